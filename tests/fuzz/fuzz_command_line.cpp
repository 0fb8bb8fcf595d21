// libFuzzer harness: the rewind program's command line (examples/cli/command_line.hpp) on
// arbitrary arguments: the input split at zero bytes into at most 24 arguments after "rewind".
// CLI::ParseError is the expected answer to a bad command line; any other exception, a crash, a
// leak or undefined behaviour is a finding. Nothing is run: parsing only.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/command_line.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"rewind"};
  std::string current;
  for (std::size_t i = 0; i < size && args.size() < 25; ++i) {
    if (data[i] == 0) args.push_back(current), current.clear();
    else current.push_back(static_cast<char>(data[i]));
  }
  if (!current.empty() && args.size() < 25) args.push_back(current);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  rewind_cli::command_line cl;
  try {
    cl.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
  }
  return 0;
}
