// libFuzzer harness: the parameter-file loader on arbitrary bytes, for a model of width 4, 2
// classes, depth 1 and 10 float parameters (block fingerprint 42). An rwd::error is the expected
// answer to a bad file; any other exception, a crash, a leak or undefined behaviour is a finding,
// and so is a file accepted with the wrong number of values.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include <rewind/engine/parameter_file.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = "/tmp/rewind_fuzz_params_" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  rwd::parameter_file_header expected;
  expected.scalar_bytes = sizeof(float);
  expected.width = 4, expected.classes = 2, expected.depth = 1, expected.count = 10, expected.block_fingerprint = 42;
  try {
    const auto values = rwd::read_parameter_file<float>(path, expected);
    if (values.size() != 10) __builtin_trap();
  } catch (const rwd::error&) {
  }
  return 0;
}
