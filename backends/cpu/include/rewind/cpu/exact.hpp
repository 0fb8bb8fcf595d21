// rewind cpu: exact arithmetic for the rewind of dissipative blocks (Maclaurin et al. 2015).
//
// The state is held in fixed point: an int64 per element with F fractional bits. Adding a map's
// output is exact when the output is rounded to fixed point the same way in the forward and in
// the rewind (the map is evaluated in float from the same fixed-point state, deterministically).
// Multiplying by a rational n/d is made invertible by an information ledger:
//   forward  s -> (n/d) s:  r = s mod d (floor), s = floor(s / d);  push r in base d;
//                           s = s*n + (pop a digit in base n)
//   rewind   the mirror:    t = s mod n, s = floor(s / n);          push t in base n;
//                           s = s*d + (pop a digit in base d)
// The ledger of an element is a mixed-radix number kept as in rANS: a head x below 2^16 L (L a
// multiple of every base, at most 2^36: x stays an exact double) and a stack of 16-bit words.
// Pushing a digit in base b first moves x's low 16 bits to the stack when x >= 2^16 L / b;
// popping moves a word back when x falls below L and the stack is not empty. Each push is undone
// by the pop in the same base and vice versa, so the rewind restores every bit, and every
// operation costs the same whatever the depth (the divisions by n and d are multiplications by a
// reciprocal, corrected to the exact quotient). The ledger grows by about log2(d/n) bits per
// multiplication (0.152 at 9/10); the stack is stored word-major (plane p holds word p of every
// element) and planes are added as any element needs them, so any depth works. A rewind returns
// every ledger to its start.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <rewind/diagnostics.hpp>
#include <rewind/rational.hpp>

#include "memory.hpp"

namespace rwd::cpu {

/// Floor division with a remainder in [0, b) for |x| < 2^53, through a double reciprocal of b:
/// the truncated estimate is off by at most two, and corrected to exact (no libm call).
inline void divmod_small(std::int64_t x, std::int64_t b, double inv_b, std::int64_t& q, std::int64_t& r) {
  q = static_cast<std::int64_t>(static_cast<double>(x) * inv_b);
  r = x - q * b;
  while (r < 0) r += b, q -= 1;
  while (r >= b) r -= b, q += 1;
}

/// floor division with a remainder in [0, d): s = q*d + r (|s| < 2^53).
inline void floor_divmod(std::int64_t s, std::int64_t d, std::int64_t& q, std::int64_t& r) {
  divmod_small(s, d, 1.0 / static_cast<double>(d), q, r);
}

/// One ledger per element: a head below 2^16 L and a stack of 16-bit words (see the top). Loops
/// on several threads may push and pop different elements at once: a new plane of words is added
/// under a lock, the moment some element needs it (not before: the peak holds no spare plane).
class ledger {
 public:
  static constexpr std::int64_t max_base = std::int64_t{1} << 16;
  static constexpr std::size_t max_planes = std::size_t{1} << 14;  // 2^18 bits per element
  /// `bases`: a common multiple of every base that will be pushed or popped (n and d of every
  /// coefficient), at most 2^32.
  ledger(memory_tracker& t, std::size_t elements, std::int64_t bases)
      : tracker_(&t), low_(bases * ((std::int64_t{1} << 36) / std::max<std::int64_t>(bases, 1))), head_(t, elements),
        height_(elements, 0), plane_at_(max_planes, nullptr) {
    if (bases < 1 || bases > (std::int64_t{1} << 32))
      throw error("rewind: exact mode: the coefficients' numerators and denominators need a common multiple below 2^32");
    std::fill_n(head_.data(), elements, low_);
    owned_.reserve(max_planes);
  }
  ledger(const ledger&) = delete;
  ledger& operator=(const ledger&) = delete;

  /// Where a push in base b first makes room: (L / b) 2^16 (computed once per loop, not per element).
  std::int64_t room_limit(std::int64_t b) const { return (low_ / b) << 16; }

  /// Appends the digit (< b) in base b to element i's number.
  void push(std::size_t i, std::int64_t b, std::int64_t digit) { push(i, b, digit, room_limit(b)); }
  void push(std::size_t i, std::int64_t b, std::int64_t digit, std::int64_t limit) {
    std::int64_t x = head_[i];
    if (x >= limit) {  // make room: the low 16 bits go to the stack
      const std::uint32_t h = height_[i];
      plane(h)[i] = static_cast<std::uint16_t>(x & 0xffff);
      height_[i] = h + 1;
      x >>= 16;
    }
    head_[i] = x * b + digit;
  }
  /// Takes element i's last digit in base b (the inverse of push in base b).
  std::int64_t pop(std::size_t i, std::int64_t b, double inv_b) {
    std::int64_t q, r;
    divmod_small(head_[i], b, inv_b, q, r);
    if (q < low_ && height_[i] > 0) {  // refill from the stack
      const std::uint32_t h = --height_[i];
      q = (q << 16) | plane_at_[h][i];  // a plane below an element's height exists
    }
    head_[i] = q;
    return r;
  }

  /// After a loop on threads: raises the error that the loop could not (the ledger is full).
  void settle() const {
    if (full_.load())
      throw error("rewind: exact mode: the ledger is full (" + std::to_string(max_planes * 16) +
                  " bits per element): the network is too deep for the exact policy at this coefficient");
  }
  /// Every element back where it started.
  bool empty() const {
    for (std::size_t i = 0; i < height_.size(); ++i)
      if (height_[i] != 0 || head_[i] != low_) return false;
    return true;
  }
  /// Bits held now, over all elements: the heads' growth past their start, and the stacks.
  double bits_in_use() const {
    double bits = 0;
    for (std::size_t i = 0; i < height_.size(); ++i)
      bits += 16.0 * height_[i] + std::log2(static_cast<double>(head_[i]) / static_cast<double>(low_));
    return bits;
  }
  /// Planes of the stack allocated (each one 16-bit word per element), and the bytes of the whole
  /// ledger (heads and planes).
  std::size_t planes() const { return count_.load(); }
  std::size_t bytes() const { return height_.size() * (sizeof(std::int64_t) + planes() * sizeof(std::uint16_t)); }

 private:
  std::uint16_t* plane(std::size_t h) {
    if (h < count_.load(std::memory_order_acquire)) [[likely]] return plane_at_[h];
    std::uint16_t* p = nullptr;
#pragma omp critical(rewind_ledger_planes)
    {
      std::size_t n = count_.load(std::memory_order_relaxed);
      while (n <= h && n < max_planes) {
        owned_.emplace_back(*tracker_, height_.size());
        std::fill_n(owned_.back().data(), height_.size(), std::uint16_t{0});
        plane_at_[n] = owned_.back().data();
        count_.store(++n, std::memory_order_release);
      }
      if (h < n) p = plane_at_[h];
      else {
        full_.store(true);
        if (!overflow_.data()) overflow_ = buffer<std::uint16_t>(*tracker_, height_.size());
        p = overflow_.data();  // the step fails after the loop (settle): the words are never read
      }
    }
    return p;
  }

  memory_tracker* tracker_ = nullptr;
  std::int64_t low_ = 1;  // L
  buffer<std::int64_t> head_;
  std::vector<std::uint32_t> height_;
  std::vector<std::uint16_t*> plane_at_;  // fixed size: readers never see it move
  std::atomic<std::size_t> count_{0};
  std::atomic<bool> full_{false};
  std::vector<buffer<std::uint16_t>> owned_;  // reserved: never reallocated
  buffer<std::uint16_t> overflow_;
};

/// A coefficient n/d with what its multiplications need precomputed once for a whole loop.
struct exact_ratio {
  std::int64_t n = 1, d = 1;
  double inv_n = 1, inv_d = 1;
  std::int64_t limit_n = 0, limit_d = 0;  // ledger::room_limit of each base
  exact_ratio(std::int64_t n_, std::int64_t d_, const ledger& l)
      : n(n_), d(d_), inv_n(1.0 / static_cast<double>(n_)), inv_d(1.0 / static_cast<double>(d_)), limit_n(l.room_limit(n_)),
        limit_d(l.room_limit(d_)) {}
};

/// s -> (n/d) s exactly, the information that does not fit pushed into the ledger (n, d <= 2^16;
/// |s| and |s n / d| below 2^51, the fixed-point range the model checks).
inline std::int64_t multiply_exact(std::int64_t s, const exact_ratio& a, ledger& l, std::size_t i) {
  std::int64_t q, r;
  divmod_small(s, a.d, a.inv_d, q, r);
  l.push(i, a.d, r, a.limit_d);
  return q * a.n + l.pop(i, a.n, a.inv_n);
}
/// The inverse of multiply_exact: s -> (d/n) s, taking back what the ledger holds.
inline std::int64_t divide_exact(std::int64_t s, const exact_ratio& a, ledger& l, std::size_t i) {
  std::int64_t q, t;
  divmod_small(s, a.n, a.inv_n, q, t);
  l.push(i, a.n, t, a.limit_n);
  return q * a.d + l.pop(i, a.d, a.inv_d);
}
inline std::int64_t multiply_exact(std::int64_t s, std::int64_t n, std::int64_t d, ledger& l, std::size_t i) {
  return multiply_exact(s, exact_ratio(n, d, l), l, i);
}
inline std::int64_t divide_exact(std::int64_t s, std::int64_t n, std::int64_t d, ledger& l, std::size_t i) {
  return divide_exact(s, exact_ratio(n, d, l), l, i);
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
