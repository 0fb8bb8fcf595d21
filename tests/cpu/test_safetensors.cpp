// Parameters as safetensors files: the layout PyTorch reads, a file written elsewhere read by
// names and shapes, and every kind of bad file refused with the model unchanged.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <rewind/cpu.hpp>

#include "../dsl/blocks.hpp"

using namespace test_blocks;  // momentum: f = dense<16> -> tanh -> dense_same, mu = 0.9

namespace {
using model_t = rwd::cpu::model<float, std::remove_cv_t<decltype(momentum)>>;
const rwd::options shapes{.width = 12, .batch = 2, .classes = 3, .seed = 1};

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("rewind_test_") + name + "_" + std::to_string(::getpid()) + ".safetensors"))
      .string();
}
std::vector<char> read_all(const std::string& path) {
  std::vector<char> bytes(std::filesystem::file_size(path));
  std::ifstream(path, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}
void write_all(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
/// A safetensors file from its header's JSON and its data bytes.
std::vector<char> file_of(const std::string& header, const std::vector<char>& data) {
  const std::uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  out += header;
  out.append(data.begin(), data.end());
  return std::vector<char>(out.begin(), out.end());
}
std::string header_of(const std::vector<char>& file) {
  std::uint64_t n;
  std::memcpy(&n, file.data(), 8);
  return std::string(file.data() + 8, n);
}
float float_at(const std::vector<char>& file, std::size_t k) {  // the k-th float of the data
  std::uint64_t n;
  std::memcpy(&n, file.data(), 8);
  float value;
  std::memcpy(&value, file.data() + 8 + n + 4 * k, 4);
  return value;
}
}  // namespace

TEST_CASE("safetensors: the layout PyTorch reads, and a round trip") {
  const auto path = temp_path("layout");
  model_t a(momentum, 2, shapes);
  a.save(path);
  CHECK(!std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
  const auto file = read_all(path);
  const std::string header = header_of(file);
  CAPTURE(header);
  CHECK((8 + header.size()) % 8 == 0);  // the data 8-byte aligned
  CHECK(header.starts_with(R"({"__metadata__":{"format":"pt","rewind.block":")"));
  CHECK(header.find(R"("rewind.checksum":")") != std::string::npos);
  // f = dense<16> -> tanh -> dense_same: torch.nn.Sequential(Linear(12, 16), Tanh(), Linear(16, 12))
  CHECK(header.find(R"("layer0.f.0.weight":{"dtype":"F32","shape":[16,12],"data_offsets":[0,768]})") != std::string::npos);
  CHECK(header.find(R"("layer0.f.0.bias":{"dtype":"F32","shape":[16],"data_offsets":[768,832]})") != std::string::npos);
  CHECK(header.find(R"("layer0.f.2.weight":{"dtype":"F32","shape":[12,16])") != std::string::npos);
  CHECK(header.find(R"("layer1.f.2.bias")") != std::string::npos);
  CHECK(header.find(R"("head.weight":{"dtype":"F32","shape":[3,12])") != std::string::npos);
  CHECK(header.find(R"("head.bias":{"dtype":"F32","shape":[3])") != std::string::npos);
  CHECK(header.find("layer2") == std::string::npos);
  // a weight is (out, in) row-major: W(0, 1) is the file's second value, the arena's 17th
  // (column-major 16 x 12); the whole file holds every parameter once
  const auto p = a.parameters();
  CHECK(float_at(file, 0) == p[0]);
  CHECK(float_at(file, 1) == p[16]);
  CHECK(float_at(file, 12) == p[1]);
  CHECK(file.size() == 8 + header.size() + 4 * p.size());

  model_t b(momentum, 2, {.width = 12, .batch = 2, .classes = 3, .seed = 2});
  b.load(path);
  CHECK(std::equal(p.begin(), p.end(), b.parameters().begin()));
  std::filesystem::remove(path);
}

TEST_CASE("safetensors: a file written elsewhere is read by its tensors' names and shapes") {
  // as Python's safetensors writes one: no rewind metadata, its own order and spacing, escapes
  model_t a(momentum, 1, shapes);
  const auto p = a.parameters();
  const auto tensors = rwd::parameter_layout<std::remove_cv_t<decltype(momentum)>>(12, 1, 3).tensors();
  std::string header = "{ \"__metadata__\" : {\"format\": \"pt\", \"note\": \"caf\\u00e9 \\ud83d\\ude00\"}";
  std::vector<char> data;
  for (auto t = tensors.rbegin(); t != tensors.rend(); ++t) {  // the reverse order
    const std::size_t begin = data.size();
    rwd::detail::safetensors::for_each_element<float>(*t, [&](std::size_t k) {
      const char* bytes = reinterpret_cast<const char*>(&p[k]);
      data.insert(data.end(), bytes, bytes + 4);
    });
    header += ", \"" + t->name + "\": {\"shape\": [";
    for (std::size_t d = 0; d < t->shape.size(); ++d) header += (d ? ", " : "") + std::to_string(t->shape[d]);
    header += "], \"data_offsets\": [" + std::to_string(begin) + ", " + std::to_string(data.size()) + "], \"dtype\": \"F32\"}";
  }
  header += "}   ";
  const auto path = temp_path("elsewhere");
  write_all(path, file_of(header, data));
  model_t b(momentum, 1, {.width = 12, .batch = 2, .classes = 3, .seed = 5});
  b.load(path);
  CHECK(std::equal(p.begin(), p.end(), b.parameters().begin()));
  std::filesystem::remove(path);
}

TEST_CASE("safetensors: every kind of bad file is refused by name, the model unchanged") {
  const auto path = temp_path("bad");
  model_t a(momentum, 1, shapes);
  a.save(path);
  const auto good = read_all(path);
  const std::string header = header_of(good);
  const std::vector<char> data(good.begin() + 8 + static_cast<long>(header.size()), good.end());
  model_t b(momentum, 1, {.width = 12, .batch = 2, .classes = 3, .seed = 9});
  const std::vector<float> before(b.parameters().begin(), b.parameters().end());
  const auto refused = [&](const std::vector<char>& file, const char* why) {
    write_all(path, file);
    CAPTURE(why);
    CHECK_THROWS_WITH_AS(b.load(path), doctest::Contains(why), rwd::error);
    CHECK(std::equal(before.begin(), before.end(), b.parameters().begin()));
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string h = header;
    const auto at = h.find(from);
    REQUIRE(at != std::string::npos);
    return h.replace(at, from.size(), to);
  };
  refused(std::vector<char>(good.begin(), good.begin() + 5), "truncated");
  refused(std::vector<char>(good.begin(), good.begin() + static_cast<long>(good.size() - 4)), "out of the file");
  auto longer = good;
  longer[0] = static_cast<char>(0xff), longer[5] = 1;
  refused(longer, "passes the end");
  refused(file_of("[1, 2]", {}), "not a JSON object");
  refused(file_of("{\"a\": tru}", {}), "malformed header");
  refused(file_of("{\"a\": 1.5}", {}), "not an integer");
  refused(file_of("{\"a\": \"\\u12\"}", {}), "malformed header");
  refused(file_of("{\"a\": \"x}", {}), "unterminated");
  refused(file_of("{\"a\": [[[[[[1]]]]]]}", {}), "nested too deeply");
  refused(file_of(replaced("\"head.bias\"", "\"head.bias\":{},\"head.bias\""), data), "twice");
  refused(file_of(replaced("\"F32\",\"shape\":[16,12]", "\"F64\",\"shape\":[16,12]"), data), "is F64, this model holds F32");
  refused(file_of(replaced("\"shape\":[16,12]", "\"shape\":[12,16]"), data), "has shape [12, 16], this model's is [16, 12]");
  refused(file_of(replaced("\"head.bias\"", "\"head.biases\""), data), "does not have");
  std::string without = header;
  const auto entry = without.find(",\"head.bias\":");
  REQUIRE(entry != std::string::npos);
  without.erase(entry, without.find('}', entry) + 1 - entry);
  refused(file_of(without, data), "lacks the tensor head.bias");
  refused(file_of(replaced("\"data_offsets\":[768,832]", "\"data_offsets\":[764,828]"), data), "overlap");
  refused(file_of(replaced("\"data_offsets\":[0,768]", "\"data_offsets\":[32,800]"), data), "leave a hole");
  refused(file_of(replaced("\"data_offsets\":[0,768]", "\"data_offsets\":[0,999999]"), data), "out of the file");
  auto trailing = good;
  trailing.insert(trailing.end(), 4, '\0');
  refused(trailing, "bytes after the last tensor");
  auto corrupt = good;
  corrupt[good.size() - 3] ^= 0x10;
  refused(corrupt, "checksum mismatch");
  auto nan_data = data;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_data.data(), &nan, 4);
  const std::string unchecked = replaced("\"rewind.checksum\"", "\"was.checksum\"");
  refused(file_of(unchecked, nan_data), "non-finite");
  // the same shapes, another block: the metadata says so
  const auto other = rwd::momentum(x, v, 0.5_c, f);
  rwd::cpu::model<float, std::remove_cv_t<decltype(other)>> different(other, 1, shapes);
  write_all(path, good);
  CHECK_THROWS_WITH_AS(different.load(path), doctest::Contains("made for another network"), rwd::error);
  rwd::cpu::model<double, std::remove_cv_t<decltype(momentum)>> wide(momentum, 1, shapes);
  CHECK_THROWS_WITH_AS(wide.load(path), doctest::Contains("is F32, this model holds F64"), rwd::error);
  model_t deeper(momentum, 2, shapes);
  CHECK_THROWS_WITH_AS(deeper.load(path), doctest::Contains("made for another network"), rwd::error);
  CHECK_THROWS_WITH_AS(b.load(path + ".missing.safetensors"), doctest::Contains("does not exist"), rwd::error);
  CHECK_THROWS_AS(a.save("/nonexistent-folder/x.safetensors"), rwd::error);
  std::filesystem::remove(path);
}
