// The IDX reader on small files the test writes itself: plain and gzip, and every kind of bad file.
#include <doctest/doctest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "../../examples/cli/idx.hpp"

namespace fs = std::filesystem;

namespace {
std::vector<unsigned char> idx(std::vector<std::uint32_t> dims, std::vector<unsigned char> data, unsigned char type = 8) {
  std::vector<unsigned char> out{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (auto d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(d >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}
struct folder {
  fs::path dir = fs::temp_directory_path() / ("rewind_idx_" + std::to_string(::getpid()));
  folder() { fs::create_directories(dir); }
  ~folder() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::vector<unsigned char>& bytes, bool gzip = false) {
    const std::string path = (dir / name).string();
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
    }
    return path;
  }
};
std::vector<unsigned char> pixels(std::size_t n) {
  std::vector<unsigned char> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(i * 37);
  return p;
}
}  // namespace

TEST_CASE("idx: plain and gzip files read the same, pixels scaled to [0, 1]") {
  folder f;
  const auto images = idx({3, 2, 2}, pixels(12)), labels = idx({3}, {0, 9, 4});
  const auto a = rewind_cli::read_images_and_labels(f.write("i", images), f.write("l", labels));
  const auto b = rewind_cli::read_images_and_labels(f.write("i.gz", images, true), f.write("l.gz", labels, true));
  CHECK(a.count == 3);
  CHECK(a.features == 4);
  CHECK(a.images == b.images);
  CHECK(a.labels == std::vector<int>{0, 9, 4});
  CHECK(a.images[1] == doctest::Approx(37 / 255.0));
}

TEST_CASE("idx: a folder laid out like Fashion-MNIST") {
  folder f;
  f.write("train-images-idx3-ubyte.gz", idx({4, 28, 28}, pixels(4 * 784)), true);
  f.write("train-labels-idx1-ubyte.gz", idx({4}, {1, 2, 3, 4}), true);
  f.write("t10k-images-idx3-ubyte", idx({2, 28, 28}, pixels(2 * 784)));
  f.write("t10k-labels-idx1-ubyte", idx({2}, {5, 6}));
  const auto s = rewind_cli::read_fashion_mnist(f.dir.string());
  CHECK(s.train.count == 4);
  CHECK(s.test.count == 2);
  CHECK(s.train.features == 784);
}

TEST_CASE("idx: bad files give clear errors") {
  folder f;
  const auto labels = f.write("l", idx({3}, {0, 1, 2}));
  auto fails = [&](const std::vector<unsigned char>& images, const char* why, bool gzip = false) {
    const auto path = f.write(gzip ? "bad.gz" : "bad", images, gzip);
    CHECK_THROWS_WITH_AS(rewind_cli::read_images_and_labels(path, labels), doctest::Contains(why), rwd::error);
  };
  fails({0, 0}, "no IDX header");
  fails({1, 2, 8, 3, 0, 0, 0, 1}, "bad magic");
  fails(idx({3, 2, 2}, pixels(12), 0x0D), "not unsigned bytes");
  fails(idx({3, 2}, pixels(6)), "2 dimensions, expected 3");
  fails(idx({3, 2, 2}, pixels(11)), "truncated");
  fails(idx({3, 2, 2}, pixels(13)), "trailing bytes");
  fails(idx({4, 2, 2}, pixels(16)), "4 images but");
  auto truncated_gzip = [&] {
    const auto path = f.write("t.gz", idx({3, 2, 2}, pixels(12)), true);
    std::vector<char> bytes(fs::file_size(path));
    std::ifstream(path, std::ios::binary).read(bytes.data(), static_cast<long>(bytes.size()));
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<long>(bytes.size() - 6));
    return path;
  }();
  CHECK_THROWS_WITH_AS(rewind_cli::read_images_and_labels(truncated_gzip, labels), doctest::Contains("rewind"), rwd::error);
  CHECK_THROWS_WITH_AS(rewind_cli::read_images_and_labels((f.dir / "missing").string(), labels), doctest::Contains("no such file"),
                       rwd::error);
  CHECK_THROWS_WITH_AS(rewind_cli::read_images_and_labels(f.write("i", idx({3, 2, 2}, pixels(12))), f.write("l11", idx({3}, {0, 11, 2}))),
                       doctest::Contains("label 11"), rwd::error);
}
