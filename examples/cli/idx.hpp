// rewind cli: the IDX format of (Fashion-)MNIST, gzip-compressed or not, read with zlib.
//
// An IDX file is a big-endian header (two zero bytes, a type code, the number of dimensions,
// then each dimension as a 32-bit count) followed by the data. Images are idx3 of unsigned
// bytes (n x rows x cols), labels idx1 of unsigned bytes (n). Everything is checked: magic,
// type, dimensions, sizes against the data actually present, label range.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <rewind/diagnostics.hpp>

namespace rewind_cli {

/// Images as floats in [0, 1], one column of rows*cols per image; labels in [0, classes).
struct dataset {
  std::size_t count = 0, features = 0;
  std::vector<float> images;
  std::vector<int> labels;
};

/// The whole (decompressed) content of a file; gzip is detected by zlib transparently.
inline std::vector<unsigned char> read_maybe_gzip(const std::string& path) {
  if (!std::filesystem::exists(path)) throw rwd::error("rewind: " + path + ": no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw rwd::error("rewind: " + path + ": cannot open");
  std::vector<unsigned char> out;
  unsigned char chunk[1 << 16];
  for (;;) {
    const int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw rwd::error("rewind: " + path + ": corrupt compressed data (" + msg + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  const int status = gzclose(f);
  if (status != Z_OK) throw rwd::error("rewind: " + path + ": truncated or corrupt compressed data");
  return out;
}

struct idx_array {
  std::vector<std::uint32_t> dims;
  std::vector<unsigned char> data;
};

inline idx_array read_idx(const std::string& path, std::size_t expected_dims) {
  const auto bytes = read_maybe_gzip(path);
  const std::string where = "rewind: " + path + ": ";
  if (bytes.size() < 4) throw rwd::error(where + "truncated: no IDX header");
  if (bytes[0] != 0 || bytes[1] != 0) throw rwd::error(where + "not an IDX file (bad magic)");
  if (bytes[2] != 0x08) throw rwd::error(where + "IDX data type " + std::to_string(bytes[2]) + " is not unsigned bytes");
  if (bytes[3] != expected_dims)
    throw rwd::error(where + "has " + std::to_string(bytes[3]) + " dimensions, expected " + std::to_string(expected_dims));
  if (bytes.size() < 4 + 4 * expected_dims) throw rwd::error(where + "truncated header");
  idx_array a;
  std::size_t total = 1;
  for (std::size_t d = 0; d < expected_dims; ++d) {
    const unsigned char* p = &bytes[4 + 4 * d];
    const std::uint32_t n = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
    if (n == 0) throw rwd::error(where + "a dimension is zero");
    a.dims.push_back(n);
    total *= n;
  }
  const std::size_t header = 4 + 4 * expected_dims;
  if (bytes.size() - header != total)
    throw rwd::error(where + (bytes.size() - header < total ? "truncated" : "has trailing bytes") + ": " +
                     std::to_string(bytes.size() - header) + " data bytes, the header says " + std::to_string(total));
  a.data.assign(bytes.begin() + static_cast<long>(header), bytes.end());
  return a;
}

/// Reads images and labels (idx3 and idx1), checks that they match, scales pixels to [0, 1].
inline dataset read_images_and_labels(const std::string& images_path, const std::string& labels_path,
                                      std::size_t classes = 10) {
  const idx_array images = read_idx(images_path, 3), labels = read_idx(labels_path, 1);
  if (images.dims[0] != labels.dims[0])
    throw rwd::error("rewind: " + images_path + " holds " + std::to_string(images.dims[0]) + " images but " +
                     labels_path + " holds " + std::to_string(labels.dims[0]) + " labels");
  dataset d;
  d.count = images.dims[0];
  d.features = std::size_t{images.dims[1]} * images.dims[2];
  d.images.resize(images.data.size());
  for (std::size_t i = 0; i < images.data.size(); ++i) d.images[i] = static_cast<float>(images.data[i]) / 255.0f;
  d.labels.resize(d.count);
  for (std::size_t i = 0; i < d.count; ++i) {
    if (labels.data[i] >= classes)
      throw rwd::error("rewind: " + labels_path + ": label " + std::to_string(labels.data[i]) + " outside [0, " +
                       std::to_string(classes) + ")");
    d.labels[i] = labels.data[i];
  }
  return d;
}

/// Fashion-MNIST's train and test sets from a folder of the four standard (gzip) files.
struct split {
  dataset train, test;
  std::string source;
};

inline split read_fashion_mnist(const std::string& dir) {
  auto file = [&](const char* name) {
    const std::string gz = dir + "/" + name + ".gz";
    return std::filesystem::exists(gz) ? gz : dir + "/" + name;
  };
  split s;
  s.train = read_images_and_labels(file("train-images-idx3-ubyte"), file("train-labels-idx1-ubyte"));
  s.test = read_images_and_labels(file("t10k-images-idx3-ubyte"), file("t10k-labels-idx1-ubyte"));
  if (s.train.features != s.test.features) throw rwd::error("rewind: " + dir + ": train and test images differ in size");
  s.source = "Fashion-MNIST (" + dir + ")";
  return s;
}

/// A built-in 10-class problem of 784 features when no data is installed: each class is a
/// smooth random template plus noise, seeded, so that runs are reproducible.
inline split synthetic(std::size_t train, std::size_t test, std::size_t features = 784, std::uint64_t seed = 1) {
  std::uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&] {  // splitmix64
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  std::vector<float> templates(10 * features);
  for (auto& t : templates) t = static_cast<float>(next());
  auto make = [&](std::size_t n) {
    dataset d;
    d.count = n;
    d.features = features;
    d.images.resize(n * features);
    d.labels.resize(n);
    for (std::size_t j = 0; j < n; ++j) {
      const int c = static_cast<int>(next() * 10) % 10;
      d.labels[j] = c;
      for (std::size_t r = 0; r < features; ++r)
        d.images[j * features + r] = static_cast<float>(0.6 * templates[c * features + r] + 0.4 * next());
    }
    return d;
  };
  split s;
  s.train = make(train);
  s.test = make(test);
  s.source = "built-in synthetic 10-class problem (no Fashion-MNIST found)";
  return s;
}

}  // namespace rewind_cli
