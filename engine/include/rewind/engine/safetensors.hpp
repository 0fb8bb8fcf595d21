// rewind engine: a parameter arena as a safetensors file (the format of Hugging Face's
// `safetensors` package, which PyTorch and JAX users read with safetensors.torch.load_file or
// safetensors.numpy.load_file): an 8-byte little-endian header length N, N bytes of JSON naming
// each tensor's dtype, shape and byte range, then the tensors' bytes, row-major, little-endian,
// without holes. The names follow the network (`layer3.f.0.weight`, `head.bias`) and a dense
// layer's weight is (out, in) as torch.nn.Linear holds it, so a torch.nn.Sequential of the same
// layers loads by name. The header's __metadata__ carries the block's fingerprint and a checksum
// of the bytes, checked on reading when present (a file written elsewhere has neither, and is
// read by names and shapes alone). Writing is atomic (a temporary file, then a rename); reading
// validates the whole file before it returns, so a model that takes the result is unchanged by a
// bad file.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <rewind/diagnostics.hpp>

#include "parameter_file.hpp"

namespace rwd {

static_assert(std::endian::native == std::endian::little, "rewind: safetensors files are little-endian, as this host must be");

/// A tensor of a parameter arena under its file name: its shape as the file holds it (row-major),
/// where it starts in the arena, and how the arena lays it out: the arena stride of each of the
/// file's dimensions (none: row-major as in the file). A dense layer's weight (out, in) is held
/// column-major, strides (1, out); a convolution's (out, in, K, K) as (out, K, K, in).
struct named_tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::size_t offset = 0;
  std::vector<std::uint64_t> strides{};
  std::size_t size() const {
    std::size_t n = 1;
    for (const auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
};

/// Metadata a file carries as strings (the rewind keys: rewind.block, rewind.checksum).
using safetensors_metadata = std::vector<std::pair<std::string, std::string>>;

namespace detail::safetensors {

template <class T>
constexpr std::string_view dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "rewind: safetensors files hold F32 or F64 parameters");
  return std::is_same_v<T, float> ? "F32" : "F64";
}

inline std::string hex(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

inline std::string json_string(std::string_view s) {  // a JSON string
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += {'\\', c};
    else if (static_cast<unsigned char>(c) < 0x20) {
      out += "\\u00";
      out += "0123456789abcdef"[(c >> 4) & 15];
      out += "0123456789abcdef"[c & 15];
    } else out += c;
  }
  return out + "\"";
}

/// The subset of JSON a safetensors header uses: objects, arrays, strings and non-negative
/// integers (up to 2^53). Anything else, and nesting deeper than four levels, is refused.
struct member;
struct value {
  enum class kind { object, array, string, integer } type = kind::integer;
  std::vector<member> members;  // an object, in file order
  std::vector<value> items;     // an array
  std::string text;             // a string
  std::uint64_t number = 0;     // an integer
};
struct member {
  std::string key;
  value v;
};

class parser {
 public:
  parser(std::string_view s, std::string where) : s_(s), where_(std::move(where)) {}
  value document() {
    value v = parse(0);
    skip_space();
    if (i_ != s_.size()) fail("text after the header's object");
    if (v.type != value::kind::object) fail("the header is not a JSON object");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw error(where_ + "malformed header: " + what + " (at byte " + std::to_string(i_) + " of the JSON)");
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  value parse(int depth) {
    if (depth > 4) fail("nested too deeply");
    skip_space();
    if (i_ >= s_.size()) fail("unexpected end");
    value v;
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.type = value::kind::object;
      if (eat('}')) return v;
      std::set<std::string> keys;
      do {
        skip_space();
        std::string key = string();
        expect(':');
        if (!keys.insert(key).second) fail("the key " + json_string(key) + " twice");
        v.members.push_back({std::move(key), parse(depth + 1)});
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.type = value::kind::array;
      if (eat(']')) return v;
      do v.items.push_back(parse(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.type = value::kind::string;
      v.text = string();
    } else if (c >= '0' && c <= '9') {
      v.type = value::kind::integer;
      if (c == '0' && i_ + 1 < s_.size() && s_[i_ + 1] >= '0' && s_[i_ + 1] <= '9') fail("a number with a leading zero");
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        v.number = v.number * 10 + static_cast<std::uint64_t>(s_[i_++] - '0');
        if (v.number > (std::uint64_t{1} << 53)) fail("a number above 2^53");
      }
      if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) fail("a number that is not an integer");
    } else fail(std::string("a value this reader does not take ('") + c + "')");
    return v;
  }
  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("a short \\u escape");
    unsigned u = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) fail("a bad \\u escape");
      u = u * 16 + static_cast<unsigned>(d);
    }
    return u;
  }
  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("an unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("an unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned u = hex4();
          if (u >= 0xDC00 && u < 0xE000) fail("a lone low surrogate");
          if (u >= 0xD800 && u < 0xDC00) {
            if (i_ + 2 > s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') fail("a lone high surrogate");
            i_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("a high surrogate without its low one");
            u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
          }
          if (u < 0x80) out += static_cast<char>(u);  // UTF-8
          else if (u < 0x800) out += {static_cast<char>(0xC0 | (u >> 6)), static_cast<char>(0x80 | (u & 0x3F))};
          else if (u < 0x10000)
            out += {static_cast<char>(0xE0 | (u >> 12)), static_cast<char>(0x80 | ((u >> 6) & 0x3F)), static_cast<char>(0x80 | (u & 0x3F))};
          else
            out += {static_cast<char>(0xF0 | (u >> 18)), static_cast<char>(0x80 | ((u >> 12) & 0x3F)),
                    static_cast<char>(0x80 | ((u >> 6) & 0x3F)), static_cast<char>(0x80 | (u & 0x3F))};
          break;
        }
        default: fail("an unknown escape");
      }
    }
  }

  std::string_view s_;
  std::string where_;
  std::size_t i_ = 0;
};

/// The arena's elements of tensor t in the file's order (row-major over its shape).
template <class T, class Visit>
void for_each_element(const named_tensor& t, const Visit& visit) {
  const std::size_t n = t.size();
  if (t.strides.empty()) {
    for (std::size_t i = 0; i < n; ++i) visit(t.offset + i);
    return;
  }
  std::vector<std::uint64_t> index(t.shape.size(), 0);  // the file's index, last dimension fastest
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t at = t.offset;
    for (std::size_t d = 0; d < index.size(); ++d) at += static_cast<std::size_t>(index[d] * t.strides[d]);
    visit(at);
    for (std::size_t d = index.size(); d-- > 0;) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
}

/// The tensors cover the arena exactly once (a layer kind whose rule names no tensors would
/// leave a hole).
inline void check_cover(const std::vector<named_tensor>& tensors, std::size_t arena) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (const auto& t : tensors) spans.emplace_back(t.offset, t.offset + t.size());
  std::sort(spans.begin(), spans.end());
  std::size_t at = 0;
  for (const auto& [b, e] : spans) {
    if (b != at) throw error("rewind: safetensors: the named tensors do not cover the parameters (a layer kind that names none?)");
    at = e;
  }
  if (at != arena) throw error("rewind: safetensors: the named tensors do not cover the parameters (a layer kind that names none?)");
}

}  // namespace detail::safetensors

/// Writes the arena's tensors to `path` atomically, with the metadata and a checksum of the bytes.
template <class T>
void write_safetensors(const std::string& path, const std::vector<named_tensor>& tensors, std::span<const T> arena,
                       const safetensors_metadata& metadata) {
  namespace st = detail::safetensors;
  st::check_cover(tensors, arena.size());
  std::vector<T> bytes;
  bytes.reserve(arena.size());
  for (const auto& t : tensors) st::for_each_element<T>(t, [&](std::size_t k) { bytes.push_back(arena[k]); });
  const std::uint64_t sum = fnv1a(bytes.data(), bytes.size() * sizeof(T));
  // appended piece by piece: GCC 12 reports a false -Wrestrict in `"literal" + std::string` at -O3
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"";
  for (const auto& [key, text] : metadata) header.append(",").append(st::json_string(key)).append(":").append(st::json_string(text));
  header.append(",\"rewind.checksum\":\"").append(st::hex(sum)).append("\"}");
  std::size_t begin = 0;
  for (const auto& t : tensors) {
    header.append(",").append(st::json_string(t.name)).append(":{\"dtype\":\"").append(st::dtype_of<T>()).append("\",\"shape\":[");
    for (std::size_t d = 0; d < t.shape.size(); ++d) header.append(d ? "," : "").append(std::to_string(t.shape[d]));
    const std::size_t end = begin + t.size() * sizeof(T);
    header.append("],\"data_offsets\":[").append(std::to_string(begin)).append(",").append(std::to_string(end)).append("]}");
    begin = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::uint64_t n = header.size();
  write_file_atomically(path, [&](std::ofstream& out) {
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() * sizeof(T)));
  });
}

/// Reads a safetensors file into a new arena of `arena_size` values laid out as `tensors` say:
/// every tensor by name, with its shape and the model's dtype, no tensor more, the bytes in
/// bounds and without holes or overlaps, finite values, and, where the file carries them, the
/// expected metadata (the block's fingerprint) and the checksum. Throws rwd::error naming the
/// file and the cause.
template <class T>
std::vector<T> read_safetensors(const std::string& path, const std::vector<named_tensor>& tensors, std::size_t arena_size,
                                const safetensors_metadata& expected) {
  namespace st = detail::safetensors;
  using kind = st::value::kind;
  st::check_cover(tensors, arena_size);
  const std::string where = "rewind: " + path + ": ";
  const std::vector<char> file = read_whole_file(path, "safetensors file");
  std::uint64_t n = 0;
  if (file.size() < sizeof n) throw error(where + "truncated (shorter than the header's length)");
  std::memcpy(&n, file.data(), sizeof n);
  if (n > file.size() - sizeof n) throw error(where + "truncated (the header's length " + std::to_string(n) + " passes the end)");
  const st::value doc = st::parser(std::string_view(file.data() + sizeof n, static_cast<std::size_t>(n)), where).document();
  const char* data = file.data() + sizeof n + n;
  const std::size_t data_size = file.size() - sizeof n - static_cast<std::size_t>(n);

  const auto member = [&](const st::value& object, std::string_view key) -> const st::value* {
    for (const auto& [k, v] : object.members)
      if (k == key) return &v;
    return nullptr;
  };
  std::vector<T> arena(arena_size);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  std::map<std::string_view, const named_tensor*> by_name;
  for (const auto& t : tensors) by_name.emplace(t.name, &t);
  std::size_t found = 0;
  for (const auto& m : doc.members) {
    const std::string& name = m.key;  // not a structured binding: the lambdas below capture it
    const st::value& entry = m.v;
    if (name == "__metadata__") {
      if (entry.type != kind::object) throw error(where + "__metadata__ is not an object");
      for (const auto& [key, v] : entry.members)
        if (v.type != kind::string) throw error(where + "__metadata__ " + st::json_string(key) + " is not a string");
      for (const auto& [key, text] : expected)
        if (const auto* v = member(entry, key); v && v->text != text)
          throw error(where + "made for another network (" + key + " " + v->text + ", this model's " + text + ")");
      continue;
    }
    const auto named = by_name.find(name);
    if (named == by_name.end()) throw error(where + "holds a tensor " + st::json_string(name) + " this model does not have");
    const named_tensor* t = named->second;
    const auto* dtype = entry.type == kind::object ? member(entry, "dtype") : nullptr;
    const auto* shape = entry.type == kind::object ? member(entry, "shape") : nullptr;
    const auto* offsets = entry.type == kind::object ? member(entry, "data_offsets") : nullptr;
    if (!dtype || dtype->type != kind::string || !shape || shape->type != kind::array || !offsets || offsets->type != kind::array ||
        offsets->items.size() != 2 || entry.members.size() != 3)
      throw error(where + "tensor " + name + ": not {dtype, shape, data_offsets}");
    if (dtype->text != st::dtype_of<T>())
      throw error(where + "tensor " + name + " is " + dtype->text + ", this model holds " + std::string(st::dtype_of<T>()));
    std::vector<std::uint64_t> dims;
    for (const auto& d : shape->items) {
      if (d.type != kind::integer) throw error(where + "tensor " + name + ": a shape entry is not an integer");
      dims.push_back(d.number);
    }
    if (dims != t->shape) {
      auto text = [](const std::vector<std::uint64_t>& s) {
        std::string r = "[";
        for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      throw error(where + "tensor " + name + " has shape " + text(dims) + ", this model's is " + text(t->shape));
    }
    const auto& b = offsets->items[0];
    const auto& e = offsets->items[1];
    if (b.type != kind::integer || e.type != kind::integer || b.number > e.number || e.number > data_size)
      throw error(where + "tensor " + name + ": data_offsets out of the file's " + std::to_string(data_size) + " data bytes");
    if (e.number - b.number != t->size() * sizeof(T))
      throw error(where + "tensor " + name + ": " + std::to_string(e.number - b.number) + " bytes for " + std::to_string(t->size()) +
                  " values");
    ranges.emplace_back(b.number, e.number);
    const char* p = data + b.number;
    bool finite = true;
    st::for_each_element<T>(*t, [&](std::size_t k) {
      std::memcpy(&arena[k], p, sizeof(T));
      p += sizeof(T);
      finite = finite && std::isfinite(arena[k]);
    });
    if (!finite) throw error(where + "tensor " + name + " holds a non-finite value");
    ++found;
  }
  if (found != tensors.size()) {
    std::set<std::string_view> in_file;
    for (const auto& m : doc.members) in_file.insert(m.key);
    for (const auto& t : tensors)
      if (!in_file.contains(t.name)) throw error(where + "lacks the tensor " + t.name);
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t at = 0;
  for (const auto& [b, e] : ranges) {
    if (b != at) throw error(where + "its tensors' bytes " + (b < at ? "overlap" : "leave a hole") + " at byte " + std::to_string(std::min(b, at)));
    at = e;
  }
  if (at != data_size) throw error(where + std::to_string(data_size - at) + " bytes after the last tensor");
  if (const auto* meta = member(doc, "__metadata__"))
    if (const auto* sum = member(*meta, "rewind.checksum"); sum && sum->text != st::hex(fnv1a(data, data_size)))
      throw error(where + "checksum mismatch: the file is corrupt");
  return arena;
}

}  // namespace rwd
