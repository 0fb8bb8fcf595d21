// rewind cpu: the information ledger of the exact mode (Maclaurin et al. 2015).
//
// The state is held in fixed point (fixed_point.hpp): an int64 per element with F fractional bits. Adding a map's
// output is exact when the output is rounded to fixed point the same way in the forward and in
// the rewind (the map is evaluated in float from the same fixed-point state, deterministically).
// Multiplying by a rational n/d is made invertible by an information ledger:
//   forward  s -> (n/d) s:  r = s mod d (floor), s = floor(s / d);  the ledger takes r (< d)
//                           and gives back a digit r' < n;  s = s*n + r'
//   rewind   the mirror:    t = s mod n, s = floor(s / n);  the ledger takes t (< n) and gives
//                           back the r of the forward;  s = s*d + r
// The ledger of an element is a mixed-radix number kept as in rANS: a head x and a stack of
// 16-bit words. Writing B >= b for the larger and the smaller of n and d, the ledger's two
// operations are
//   grow   (absorbs a digit r < B, gives a digit < b):  x -> x B + r = q b + r';  x <- q
//   shrink (its inverse):                               x -> x b + r' = q B + r;  x <- q
// The forward of n/d < 1 grows the ledger (its rewind shrinks it); n/d > 1 the other way round.
// The head stays below 2^16 L (L a multiple of every B with 2^16 L b <= 2^49: all of it exact in
// a double, and small enough for the vectorised loops' division in one step) and, while the
// stack holds words, at least L: a grow whose result would pass 2^16 L first moves x's low 16
// bits to the stack (when x >= T = 2^16 L b / B), and a shrink whose result falls below L takes
// them back. Since a grow that spilled leaves a head below L and one
// that did not leaves one at least L, each operation is undone exactly by the other, and the
// decision is made once per 16 bits of growth (a separate push and pop would move words back and
// forth for about log2(b) of every 16 bits). Every operation costs the same whatever the depth:
// the divisions are multiplications by a reciprocal corrected to the exact quotient. The ledger
// grows by log2(d/n) bits per multiplication (0.152 at 9/10); the stack is stored word-major
// (plane p holds word p of every element) and planes are added as any element needs them, so any
// depth works. A rewind returns every ledger to its start.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <rewind/diagnostics.hpp>
#include <rewind/rational.hpp>

#include "memory.hpp"

namespace rwd::cpu {

/// Floor division with a remainder in [0, b) for |x| < 2^53, through a double reciprocal of b,
/// without a branch (the loops below vectorise it). x * inv_b is within 2/b of x / b, so the floor
/// of the estimate is off by at most one, and one correction either way makes it exact.
inline void divmod_small(std::int64_t x, std::int64_t b, double inv_b, std::int64_t& q, std::int64_t& r) {
  const double e = static_cast<double>(x) * inv_b;
  q = static_cast<std::int64_t>(e);              // truncated ...
  q -= static_cast<std::int64_t>(e < static_cast<double>(q));  // ... to the floor
  r = x - q * b;
  const std::int64_t down = r < 0, up = r >= b;
  q += up - down;
  r += (down - up) * b;
}

/// floor division with a remainder in [0, d): s = q*d + r (|s| < 2^53).
inline void floor_divmod(std::int64_t s, std::int64_t d, std::int64_t& q, std::int64_t& r) {
  divmod_small(s, d, 1.0 / static_cast<double>(d), q, r);
}

class ledger;

/// A coefficient n/d (both positive, at most 2^16) with what its multiplications need, computed
/// once for a whole loop: the ledger's bases B = max(n, d) and b = min(n, d), their reciprocals,
/// and the head at which a grow spills.
struct exact_ratio {
  std::int64_t n = 1, d = 1;
  std::int64_t big = 1, small = 1;  // B, b
  double inv_n = 1, inv_d = 1, inv_big = 1, inv_small = 1;
  std::int64_t spill_from = 0;  // T = 2^16 L b / B
  std::int64_t low = 1;         // L
  bool forward_grows = true;    // n <= d: the forward grows the ledger
  exact_ratio(std::int64_t n_, std::int64_t d_, const ledger& l);
};

/// One ledger per element: a head and a stack of 16-bit words (see the top). Loops on several
/// threads may work on different elements at once: a new plane of words is added under a lock,
/// the moment some element needs it (not before: the peak holds no spare plane).
class ledger {
 public:
  static constexpr std::int64_t max_base = std::int64_t{1} << 16;
  static constexpr std::size_t max_planes = std::size_t{1} << 14;  // 2^18 bits per element
  /// `ratios`: every coefficient n/d that will multiply an element (n, d in [1, 2^16]).
  ledger(memory_tracker& t, std::size_t elements, const std::vector<rational>& ratios)
      : tracker_(&t), low_(low_for(ratios)), head_(t, elements), height_(elements, 0), plane_at_(max_planes, nullptr) {
    std::fill_n(head_.data(), elements, low_);
    owned_.reserve(max_planes);
  }
  ledger(const ledger&) = delete;
  ledger& operator=(const ledger&) = delete;

  /// Element i's number x becomes x B + r (r < B); returns x B + r mod b and keeps the quotient.
  std::int64_t grow(std::size_t i, const exact_ratio& a, std::int64_t r) {
    std::int64_t x = head_[i];
    if (x >= a.spill_from) {  // the result would pass 2^16 L: the low 16 bits go to the stack
      const std::uint32_t h = height_[i];
      plane(h)[i] = static_cast<std::uint16_t>(x & 0xffff);
      height_[i] = h + 1;
      x >>= 16;
    }
    std::int64_t q, r2;
    divmod_small(x * a.big + r, a.small, a.inv_small, q, r2);
    head_[i] = q;
    return r2;
  }
  /// The inverse of grow: x becomes x b + r (r < b); returns x b + r mod B and keeps the quotient.
  std::int64_t shrink(std::size_t i, const exact_ratio& a, std::int64_t r) {
    std::int64_t q, r2;
    divmod_small(head_[i] * a.small + r, a.big, a.inv_big, q, r2);
    if (q < low_ && height_[i] > 0) {  // the grow spilled here: take the word back
      const std::uint32_t h = --height_[i];
      q = (q << 16) | plane_at_[h][i];  // a plane below an element's height exists
    }
    head_[i] = q;
    return r2;
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
  /// For the vectorised loops (scale_add_exact): L, the heads and the stacks' heights.
  std::int64_t low() const { return low_; }
  std::int64_t* heads() { return head_.data(); }
  const std::uint32_t* heights() const { return height_.data(); }
  std::uint32_t* heights() { return height_.data(); }
  /// Plane h of the stacks, added if no element has reached it yet (while the ledger is full, a
  /// spare plane whose words are never read: the loop's settle() raises the error).
  std::uint16_t* words(std::size_t h) { return plane(h); }
  /// Planes of the stack allocated (each one 16-bit word per element), and the bytes of the whole
  /// ledger (heads and planes).
  std::size_t planes() const { return count_.load(); }
  std::size_t bytes() const { return height_.size() * (sizeof(std::int64_t) + planes() * sizeof(std::uint16_t)); }

 private:
  /// L: a multiple of every ratio's B, as large as 2^16 L b <= 2^49 allows for every b.
  static std::int64_t low_for(const std::vector<rational>& ratios) {
    std::int64_t bigs = 1, smalls = 1;
    for (const rational& a : ratios) {
      if (a.num < 1 || a.den < 1 || a.num > max_base || a.den > max_base)
        throw error("rewind: exact mode: a coefficient " + std::to_string(a.num) + "/" + std::to_string(a.den) +
                    " needs a positive numerator and denominator of at most 65536");
      bigs = std::lcm(bigs, static_cast<std::int64_t>(std::max(a.num, a.den)));
      smalls = std::max(smalls, static_cast<std::int64_t>(std::min(a.num, a.den)));
      if (bigs > (std::int64_t{1} << 33))
        throw error("rewind: exact mode: the coefficients' larger terms need a common multiple below 2^33");
    }
    const std::int64_t room = (std::int64_t{1} << 33) / smalls;  // L b <= 2^33
    if (bigs > room)
      throw error("rewind: exact mode: the coefficients' terms are too large together (a common multiple of the larger "
                  "ones, " + std::to_string(bigs) + ", times the largest smaller one, " + std::to_string(smalls) +
                  ", must stay below 2^33)");
    return bigs * (room / bigs);
  }

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

inline exact_ratio::exact_ratio(std::int64_t n_, std::int64_t d_, const ledger& l)
    : n(n_), d(d_), big(std::max(n_, d_)), small(std::min(n_, d_)), inv_n(1.0 / static_cast<double>(n_)),
      inv_d(1.0 / static_cast<double>(d_)), inv_big(1.0 / static_cast<double>(big)), inv_small(1.0 / static_cast<double>(small)),
      spill_from((l.low() / big) * small << 16), low(l.low()), forward_grows(n_ <= d_) {
  if (n_ < 1 || d_ < 1 || l.low() % big != 0)
    throw error("rewind: exact mode: the coefficient " + std::to_string(n_) + "/" + std::to_string(d_) +
                " is not positive or was not given to the ledger");
}

/// s -> (n/d) s exactly, the information that does not fit kept in element i's ledger (|s| and
/// |s n / d| below 2^51, the fixed-point range the model checks).
inline std::int64_t multiply_exact(std::int64_t s, const exact_ratio& a, ledger& l, std::size_t i) {
  std::int64_t q, r;
  divmod_small(s, a.d, a.inv_d, q, r);  // r < d
  return q * a.n + (a.forward_grows ? l.grow(i, a, r) : l.shrink(i, a, r));  // a digit < n
}
/// The inverse of multiply_exact: s -> (d/n) s, taking back what the ledger holds.
inline std::int64_t divide_exact(std::int64_t s, const exact_ratio& a, ledger& l, std::size_t i) {
  std::int64_t q, t;
  divmod_small(s, a.n, a.inv_n, q, t);  // t < n
  return q * a.d + (a.forward_grows ? l.shrink(i, a, t) : l.grow(i, a, t));  // a digit < d
}
inline std::int64_t multiply_exact(std::int64_t s, std::int64_t n, std::int64_t d, ledger& l, std::size_t i) {
  return multiply_exact(s, exact_ratio(n, d, l), l, i);
}
inline std::int64_t divide_exact(std::int64_t s, std::int64_t n, std::int64_t d, ledger& l, std::size_t i) {
  return divide_exact(s, exact_ratio(n, d, l), l, i);
}

}  // namespace rwd::cpu
