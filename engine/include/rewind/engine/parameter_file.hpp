// rewind engine: parameter files, for any backend. A header (magic, version, scalar size, shapes, a fingerprint of
// the block), the parameters, and a checksum of everything before it. Written atomically: to a
// temporary file in the same folder, then renamed over the target, so a crash never leaves a
// partial file under the real name. Reading validates everything before touching the model.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include <rewind/diagnostics.hpp>

namespace rwd {

struct parameter_file_header {
  char magic[8] = {'R', 'W', 'N', 'D', 'P', 'A', 'R', 'M'};
  std::uint32_t version = 1;
  std::uint32_t scalar_bytes = 0;
  std::uint64_t width = 0, classes = 0, depth = 0, count = 0;
  std::uint64_t block_fingerprint = 0;  // FNV-1a of the block's printed updates and maps
};
static_assert(sizeof(parameter_file_header) == 8 + 4 + 4 + 5 * 8);

/// FNV-1a, 64 bits.
inline std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/// Writes a file through `write(std::ofstream&)` atomically: into a temporary file in the same
/// folder, then renamed over `path`, so that a crash or a full disk never leaves a partial file
/// under the real name.
template <class Write>
void write_file_atomically(const std::string& path, const Write& write) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw error("rewind: cannot write " + tmp.string());
    write(out);
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw error("rewind: writing " + tmp.string() + " failed (disk full?); " + path + " is unchanged");
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw error("rewind: cannot rename the new file onto " + path);
  }
}

template <class T>
void write_parameter_file(const std::string& path, parameter_file_header h, std::span<const T> values) {
  h.scalar_bytes = sizeof(T);
  h.count = values.size();
  std::uint64_t sum = fnv1a(&h, sizeof h);
  sum = fnv1a(values.data(), values.size_bytes(), sum);
  write_file_atomically(path, [&](std::ofstream& out) {
    out.write(reinterpret_cast<const char*>(&h), sizeof h);
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
    out.write(reinterpret_cast<const char*>(&sum), sizeof sum);
  });
}

/// The bytes of the file `what` at `path` (a regular file that exists and reads whole), or the
/// error that says which of these it is not.
inline std::vector<char> read_whole_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw error("rewind: the " + what + " " + path + (std::filesystem::exists(path, ec) ? " is not a regular file" : " does not exist"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("rewind: cannot open the " + what + " " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw error("rewind: cannot read the " + what + " " + path);
  return bytes;
}

/// Reads and validates a parameter file made for `expected` (its count, shapes and block).
template <class T>
std::vector<T> read_parameter_file(const std::string& path, const parameter_file_header& expected) {
  const std::vector<char> bytes = read_whole_file(path, "parameter file");
  const std::string where = "rewind: " + path + ": ";
  parameter_file_header h;
  if (bytes.size() < sizeof h + sizeof(std::uint64_t)) throw error(where + "truncated (shorter than a header)");
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, expected.magic, sizeof h.magic) != 0) throw error(where + "not a rewind parameter file (bad magic)");
  if (h.version != expected.version) throw error(where + "version " + std::to_string(h.version) + " is not supported");
  if (h.scalar_bytes != sizeof(T))
    throw error(where + "holds " + std::to_string(h.scalar_bytes * 8) + "-bit scalars, the model uses " +
                std::to_string(sizeof(T) * 8));
  auto mismatch = [&](const char* what, std::uint64_t file, std::uint64_t model) {
    if (file != model)
      throw error(where + "made for " + what + " " + std::to_string(file) + ", the model has " + std::to_string(model));
  };
  mismatch("width", h.width, expected.width);
  mismatch("classes", h.classes, expected.classes);
  mismatch("depth", h.depth, expected.depth);
  mismatch("a parameter count of", h.count, expected.count);
  if (h.block_fingerprint != expected.block_fingerprint) throw error(where + "made for a different block");
  const std::size_t need = sizeof h + h.count * sizeof(T) + sizeof(std::uint64_t);
  if (bytes.size() != need)
    throw error(where + (bytes.size() < need ? "truncated" : "has trailing bytes") + " (" + std::to_string(bytes.size()) +
                " bytes, expected " + std::to_string(need) + ")");
  std::uint64_t stored;
  std::memcpy(&stored, bytes.data() + need - sizeof stored, sizeof stored);
  if (fnv1a(bytes.data(), need - sizeof stored) != stored) throw error(where + "checksum mismatch: the file is corrupt");
  std::vector<T> values(h.count);
  std::memcpy(values.data(), bytes.data() + sizeof h, h.count * sizeof(T));
  return values;
}

}  // namespace rwd
