// rewind cpu: exact arithmetic for the rewind of dissipative blocks (Maclaurin et al. 2015).
//
// The state is held in fixed point: an int64 per element with F fractional bits. Adding a map's
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
// The head stays below 2^16 L (L a multiple of every B with 2^16 L b < 2^52: all of it exact in a
// double) and, while the stack holds words, at least L: a grow whose result would pass 2^16 L
// first moves x's low 16 bits to the stack (when x >= T = 2^16 L b / B), and a shrink whose
// result falls below L takes them back. Since a grow that spilled leaves a head below L and one
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

#if defined(__x86_64__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

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
  /// Planes of the stack allocated (each one 16-bit word per element), and the bytes of the whole
  /// ledger (heads and planes).
  std::size_t planes() const { return count_.load(); }
  std::size_t bytes() const { return height_.size() * (sizeof(std::int64_t) + planes() * sizeof(std::uint16_t)); }

 private:
  /// L: a multiple of every ratio's B, as large as 2^16 L b < 2^52 allows for every b.
  static std::int64_t low_for(const std::vector<rational>& ratios) {
    std::int64_t bigs = 1, smalls = 1;
    for (const rational& a : ratios) {
      if (a.num < 1 || a.den < 1 || a.num > max_base || a.den > max_base)
        throw error("rewind: exact mode: a coefficient " + std::to_string(a.num) + "/" + std::to_string(a.den) +
                    " needs a positive numerator and denominator of at most 65536");
      bigs = std::lcm(bigs, static_cast<std::int64_t>(std::max(a.num, a.den)));
      smalls = std::max(smalls, static_cast<std::int64_t>(std::min(a.num, a.den)));
      if (bigs > (std::int64_t{1} << 36))
        throw error("rewind: exact mode: the coefficients' larger terms need a common multiple below 2^36");
    }
    const std::int64_t room = (std::int64_t{1} << 36) / smalls;  // L b <= 2^36
    if (bigs > room)
      throw error("rewind: exact mode: the coefficients' terms are too large together (a common multiple of the larger "
                  "ones, " + std::to_string(bigs) + ", times the largest smaller one, " + std::to_string(smalls) +
                  ", must stay below 2^36)");
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

/// A fixed point with F fractional bits: x is held as round(x 2^F) in an int64 below 2^51 in
/// magnitude (so that sums of two and the ledger's arithmetic stay exact in a double).
struct fixed_point {
  static constexpr double limit = 0x1p51;
  int bits = 32;
  double scale = 0x1p32, unit = 0x1p-32;  // 2^F, 2^-F
  static fixed_point of(int bits) {
    if (bits < 0 || bits > 51) throw error("rewind: exact_fraction_bits is in [0, 51], not " + std::to_string(bits));
    return {bits, std::ldexp(1.0, bits), std::ldexp(1.0, -bits)};
  }
  /// x rounded to nearest even, without a branch (the loops below vectorise it): adding and
  /// subtracting 1.5 * 2^52 rounds a double below 2^51 to an integer in one exact step. A value
  /// out of range (NaN too) sets `out` to 1 and gives 0.
  std::int64_t round(double x, std::int64_t& out) const {
    constexpr double magic = 0x1.8p52;
    double scaled = x * scale;
    out = !(std::abs(scaled) < limit);
    scaled = out ? 0.0 : scaled;
    return static_cast<std::int64_t>((scaled + magic) - magic);
  }
  static std::int64_t outside(std::int64_t v) {
    constexpr auto bound = static_cast<std::int64_t>(limit);
    return v >= bound || v <= -bound;
  }
  template <class T>
  T value(std::int64_t v) const {
    return static_cast<T>(static_cast<double>(v) * unit);
  }
};

namespace detail {
// The loops below run on every thread in tiles (elements are independent, so the result does not
// depend on the thread count); each tile is one vectorised pass, plus a scalar pass over the
// few elements whose ledger moves a word to or from its stack. Flags are int64 like the lanes.
inline constexpr std::size_t exact_tile = 512;
inline constexpr std::size_t exact_parallel_from = 16384;

/// What one scale_add_exact call's elements share: s = q m + r; the ledger's x <- (x times + r)
/// / over, spilling from spill_from and refilling below refill_below; s <- q m_out + r' (+ g).
struct scale_step {
  std::int64_t m, m_out, add, times, over, spill_from, refill_below;
  double inv_m, inv_over;
};

namespace generic {
#include "exact_tiles.inc"
}  // namespace generic

// An application built for any x86-64 (no -march) still gets the vectorised tiles on a CPU with
// AVX-512: the same kernels are compiled a second time for it, and chosen once at run time.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX512DQ__) && !defined(__CUDACC__)
#define REWIND_EXACT_DISPATCH 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw")
#define REWIND_EXACT_AVX512_KERNEL 1  // the target pragma does not define __AVX512F__ and the like
namespace avx512 {
#include "exact_tiles.inc"
}  // namespace avx512
#undef REWIND_EXACT_AVX512_KERNEL
#pragma GCC pop_options
/// Whether the tiles run their AVX-512 copy (the CPU has it; a test turns it off).
inline bool exact_avx512 = [] {
  __builtin_cpu_init();  // this may run among the static initialisers, before libgcc's own
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw");
}();
#endif

/// Runs tile(begin, length) over `count` elements in tiles of exact_tile, on `threads` threads
/// when the loop is large enough; returns the tiles' range flags or-ed.
template <class Tile>
std::int64_t over_tiles(std::size_t count, int threads, const Tile& tile) {
  const auto tiles = static_cast<std::ptrdiff_t>((count + exact_tile - 1) / exact_tile);
  std::int64_t bad = 0;
#pragma omp parallel for reduction(| : bad) num_threads(threads) if (count >= exact_parallel_from)
  for (std::ptrdiff_t k = 0; k < tiles; ++k) {
    const std::size_t begin = static_cast<std::size_t>(k) * exact_tile;
    bad |= tile(begin, std::min(count - begin, exact_tile));
  }
  return bad;
}
}  // namespace detail

/// s <- s + round(g) (forward) or s - round(g) (rewind) over `count` elements, with the float
/// shadow of s written beside. Returns false when a value left the fixed-point range (the caller
/// raises the error; a loop on several threads cannot).
template <class T>
bool add_exact(std::int64_t* s, const T* g, T* shadow, std::size_t count, fixed_point fp, bool forward, int threads) {
  const std::int64_t sign = forward ? 1 : -1;
  return !detail::over_tiles(count, threads, [&](std::size_t begin, std::size_t len) {
#ifdef REWIND_EXACT_DISPATCH
    if (detail::exact_avx512) return detail::avx512::add_tile(s + begin, g + begin, shadow + begin, len, fp, sign);
#endif
    return detail::generic::add_tile(s + begin, g + begin, shadow + begin, len, fp, sign);
  });
}

/// s <- (n/d) s + round(g) (forward) or s <- (d/n) (s - round(g)) (rewind), exactly, the digits
/// that do not fit kept in ledger elements first .. first + count. Returns false as add_exact.
template <class T>
bool scale_add_exact(std::int64_t* s, const T* g, T* shadow, std::size_t count, fixed_point fp, const exact_ratio& a, ledger& l,
                     std::size_t first, bool forward, int threads) {
  // s = q m + r with m = d (forward) or n (rewind, after subtracting g); the ledger grows or
  // shrinks with r and gives the digit r'; s becomes q m' + r' (+ g) with m' the other term.
  const bool grows = forward == a.forward_grows;
  const detail::scale_step c{.m = forward ? a.d : a.n,
                             .m_out = forward ? a.n : a.d,
                             .add = forward,
                             .times = grows ? a.big : a.small,
                             .over = grows ? a.small : a.big,
                             .spill_from = grows ? a.spill_from : std::numeric_limits<std::int64_t>::max(),
                             .refill_below = grows ? 0 : a.low,
                             .inv_m = forward ? a.inv_d : a.inv_n,
                             .inv_over = grows ? a.inv_small : a.inv_big};
  std::int64_t* head = l.heads() + first;
  const std::uint32_t* height = l.heights() + first;
  const std::int64_t bad = detail::over_tiles(count, threads, [&](std::size_t begin, std::size_t len) {
    std::uint8_t later[detail::exact_tile];  // the element's ledger moves a word: done after, in scalar
    std::int64_t any_later = 0, bad = 0;
#ifdef REWIND_EXACT_DISPATCH
    if (detail::exact_avx512)
      bad = detail::avx512::scale_tile(s + begin, g + begin, shadow + begin, head + begin, height + begin, len, fp, c, later, any_later);
    else
#endif
      bad = detail::generic::scale_tile(s + begin, g + begin, shadow + begin, head + begin, height + begin, len, fp, c, later, any_later);
    for (std::size_t i = 0; any_later && i < len; ++i) {
      if (!later[i]) continue;
      const std::size_t at = begin + i;
      std::int64_t g_out;
      const std::int64_t G = fp.round(static_cast<double>(g[at]), g_out);
      const std::int64_t v = forward ? multiply_exact(s[at], a, l, first + at) + G : divide_exact(s[at] - G, a, l, first + at);
      bad |= fixed_point::outside(v);
      s[at] = v;
      shadow[at] = fp.template value<T>(v);
    }
    return bad;
  });
  l.settle();
  return !bad;
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
