// rewind cpu: exact arithmetic for the rewind of dissipative blocks (Maclaurin et al. 2015).
//
// The state is held in fixed point: an int64 per element with F fractional bits. Adding a map's
// output is exact when the output is rounded to fixed point the same way in the forward and in
// the rewind (the map is evaluated in float from the same fixed-point state, deterministically).
// Multiplying by a rational n/d is made invertible by an information ledger, one unbounded
// integer per element:
//   forward  s -> (n/d) s:  r = s mod d (floor), s = floor(s / d);  L = L*d + r;
//                           s = s*n + (L mod n);  L = L div n
//   rewind   the mirror:    t = s mod n, s = floor(s / n);          L = L*n + t;
//                           s = s*d + (L mod d);  L = L div d
// The ledger grows by about log2(d/n) bits per multiplication (0.152 at 9/10) and is stored
// word-major: plane p holds word p of every element, and planes are added as any element needs
// them, so any depth works. A rewind returns every ledger to zero.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <rewind/diagnostics.hpp>
#include <rewind/rational.hpp>

#include "memory.hpp"

namespace rwd::cpu {

__extension__ typedef unsigned __int128 uint128;  // a 64x64-bit product, exactly

/// floor division with a remainder in [0, d): s = q*d + r
inline void floor_divmod(std::int64_t s, std::int64_t d, std::int64_t& q, std::int64_t& r) {
  q = s / d;
  r = s % d;
  if (r < 0) r += d, q -= 1;
}

/// One unbounded non-negative integer per element, stored word-major.
class ledger {
 public:
  ledger() = default;
  ledger(memory_tracker& t, std::size_t elements) : tracker_(&t), len_(elements, 0) {}

  /// L = L*m + digit, for element i (digit < m).
  void push(std::size_t i, std::uint64_t m, std::uint64_t digit) {
    uint128 carry = digit;
    const std::size_t n = len_[i];
    for (std::size_t w = 0; w < n; ++w) {
      const uint128 v = static_cast<uint128>(planes_[w][i]) * m + carry;
      planes_[w][i] = static_cast<std::uint64_t>(v);
      carry = v >> 64;
    }
    if (carry != 0) {
      if (n == planes_.size()) add_plane();
      planes_[n][i] = static_cast<std::uint64_t>(carry);
      len_[i] = n + 1;
    }
  }
  /// digit = L mod m, L = L div m, for element i (m < 2^32: two 64-bit divisions per word).
  std::uint64_t pop(std::size_t i, std::uint64_t m) {
    std::uint64_t rem = 0;
    for (std::size_t w = len_[i]; w-- > 0;) {
      const std::uint64_t word = planes_[w][i];
      const std::uint64_t hi = (rem << 32) | (word >> 32);
      const std::uint64_t qh = hi / m;
      rem = hi - qh * m;
      const std::uint64_t lo = (rem << 32) | (word & 0xffffffffu);
      const std::uint64_t ql = lo / m;
      rem = lo - ql * m;
      planes_[w][i] = (qh << 32) | ql;
    }
    while (len_[i] > 0 && planes_[len_[i] - 1][i] == 0) --len_[i];
    return static_cast<std::uint64_t>(rem);
  }
  /// Makes room for every element to grow by one word, so that pushes on several threads
  /// never add a plane (call before such a loop; settle() after it).
  void reserve_one_more() {
    if (planes_.size() <= longest_) add_plane();
  }
  /// Takes note of the longest element after a loop of pushes and pops.
  void settle() {
    longest_ = 0;
    for (auto l : len_) longest_ = std::max<std::size_t>(longest_, l);
  }
  bool empty() const {
    for (auto l : len_)
      if (l) return false;
    return true;
  }
  /// Words in use now, over all elements; and planes allocated (each one word per element).
  std::size_t words_in_use() const {
    std::size_t n = 0;
    for (auto l : len_) n += l;
    return n;
  }
  std::size_t planes() const { return planes_.size(); }

 private:
  void add_plane() {
    planes_.emplace_back(*tracker_, len_.size());
    std::fill_n(planes_.back().data(), len_.size(), std::uint64_t{0});
  }
  memory_tracker* tracker_ = nullptr;
  std::vector<std::uint32_t> len_;
  std::size_t longest_ = 0;  // as of the last settle()
  std::vector<buffer<std::uint64_t>> planes_;
};

/// s -> (n/d) s exactly, the information that does not fit pushed into the ledger (n, d < 2^32).
inline std::int64_t multiply_exact(std::int64_t s, std::int64_t n, std::int64_t d, ledger& l, std::size_t i) {
  std::int64_t q, r;
  floor_divmod(s, d, q, r);
  l.push(i, static_cast<std::uint64_t>(d), static_cast<std::uint64_t>(r));
  return q * n + static_cast<std::int64_t>(l.pop(i, static_cast<std::uint64_t>(n)));
}
/// The inverse of multiply_exact: s -> (d/n) s, taking back what the ledger holds.
inline std::int64_t divide_exact(std::int64_t s, std::int64_t n, std::int64_t d, ledger& l, std::size_t i) {
  std::int64_t q, t;
  floor_divmod(s, n, q, t);
  l.push(i, static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(t));
  return q * d + static_cast<std::int64_t>(l.pop(i, static_cast<std::uint64_t>(d)));
}

/// The closest rational with a denominator of at most max_den (continued fractions): how a
/// runtime coefficient such as mu = 0.9 becomes the exact 9/10 of the exact policy.
inline rational rationalise(double x, long long max_den = 1000000) {
  if (!std::isfinite(x)) throw error("rewind: a non-finite coefficient has no rational value");
  long long p0 = 0, q0 = 1, p1 = 1, q1 = 0;
  double v = x;
  for (int i = 0; i < 64; ++i) {
    const double a = std::floor(v);
    const long long ai = static_cast<long long>(a);
    const long long p2 = ai * p1 + p0, q2 = ai * q1 + q0;
    if (q2 > max_den) break;
    p0 = p1, q0 = q1, p1 = p2, q1 = q2;
    if (v - a < 1e-12 || std::abs(static_cast<double>(p1) / q1 - x) < 1e-15 * std::abs(x)) break;
    v = 1 / (v - a);
  }
  return rational::make(p1, q1);
}

}  // namespace rwd::cpu
