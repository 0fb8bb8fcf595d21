// libFuzzer harness: the safetensors loader on arbitrary bytes, for an arena of three tensors (a
// 2 x 3 weight held column-major, a bias of 2, a vector of 4: 12 floats) and the metadata
// rewind.block = "abc". An rwd::error is the expected answer to a bad file; any other exception,
// a crash, a leak or undefined behaviour is a finding, and so is a file accepted with a value
// that is not finite.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include <rewind/engine/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = "/tmp/rewind_fuzz_safetensors_" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  const std::vector<rwd::named_tensor> tensors{{"a.weight", {2, 3}, 0, {1, 2}}, {"a.bias", {2}, 6, {}}, {"head", {4}, 8, {}}};
  try {
    const auto values = rwd::read_safetensors<float>(path, tensors, 12, {{"rewind.block", "abc"}});
    if (values.size() != 12) __builtin_trap();
    for (const float v : values)
      if (!std::isfinite(v)) __builtin_trap();
  } catch (const rwd::error&) {
  }
  return 0;
}
