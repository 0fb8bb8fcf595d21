// libFuzzer harness: the IDX reader (plain or gzip) on arbitrary bytes. The input is split in two
// at the position its first two bytes give: images (idx3) and labels (idx1), each written to a
// file and read as `rewind train` reads Fashion-MNIST. An rwd::error is the expected answer to
// bad data; any other exception, a crash, a leak or undefined behaviour is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "cli/idx.hpp"

namespace {
std::string file(const char* name, const std::uint8_t* data, std::size_t n) {
  const std::string path = "/tmp/rewind_fuzz_idx_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
  return path;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t cut = std::min<std::size_t>(size - 2, (std::size_t{data[0]} << 8) | data[1]);
  const std::string images = file("images", data + 2, cut), labels = file("labels", data + 2 + cut, size - 2 - cut);
  try {
    const auto d = rewind_cli::read_images_and_labels(images, labels);
    if (d.images.size() != d.count * d.features || d.labels.size() != d.count) __builtin_trap();
  } catch (const rwd::error&) {
  }
  return 0;
}
