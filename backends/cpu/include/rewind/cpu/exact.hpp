// rewind cpu: the exact mode's loops over the state: s <- s +- round(g) and s <- (n/d) s + round(g)
// with its mirror, in fixed point (fixed_point.hpp), the digits that do not fit kept in the
// information ledger (ledger.hpp). Each loop runs in tiles on the team's threads, vectorised,
// with AVX-512 and AVX2 copies chosen at run time where the build did not target them.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#include "fixed_point.hpp"
#include "ledger.hpp"
#include "vector_target.hpp"

namespace rwd::cpu {

/// The copies of the exact mode's loops: vectorised for AVX-512, for AVX2 (with FMA), or for any
/// CPU (the compiler's own vectorisation of the plain loops).
enum class exact_copy { portable, avx2, avx512 };

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
  bool grows;  // the ledger grows (spills, never refills) or shrinks (refills, never spills)
};

/// f(std::true_type) where sign > 0, else f(std::false_type): a loop adding or subtracting with
/// the sign outside it (the compiler would multiply by it in 64-bit lanes).
template <class F>
void with_sign(std::int64_t sign, const F& f) {
  if (sign > 0) f(std::true_type{});
  else f(std::false_type{});
}

/// f(std::true_type) where a loop writes the float shadow of the state (`shadow` is not null),
/// else f(std::false_type).
template <class T, class F>
void with_shadow(const T* shadow, const F& f) {
  if (shadow) f(std::true_type{});
  else f(std::false_type{});
}
/// p + offset, or null where p is: a shadow nobody reads.
template <class T>
T* offset(T* p, std::size_t by) {
  return p ? p + by : nullptr;
}

namespace generic {
#include "exact_tiles.inc"
}  // namespace generic

// An application built for any x86-64 (no -march), with GCC or clang, still gets the vectorised
// tiles on a CPU with AVX-512 or AVX2: the same kernels are compiled again for each vector unit
// the build does not target (vector_target.hpp), and the widest the CPU has is chosen once at run
// time. Each copy is tuned for the first CPUs with its vector unit (tuning picks no instructions
// outside it): under GCC's generic tuning, which such a build has, the copies took 1.2-1.4x as
// long as a -march=native build's loops.
#ifdef REWIND_TARGET_COPIES
#if !defined(__AVX512DQ__)
#define REWIND_EXACT_DISPATCH 1
REWIND_TARGET_PUSH("avx512f,avx512dq,avx512vl,avx512bw,tune=icelake-server")
#define REWIND_EXACT_AVX512_KERNEL 1  // the target does not define __AVX512F__ and the like
namespace avx512 {
#include "exact_tiles.inc"
}  // namespace avx512
#undef REWIND_EXACT_AVX512_KERNEL
REWIND_TARGET_POP
#endif
#if !defined(__AVX2__) || !defined(__FMA__)
#define REWIND_EXACT_DISPATCH_AVX2 1
REWIND_TARGET_PUSH("avx2,fma,tune=haswell")
#define REWIND_EXACT_AVX2_KERNEL 1
namespace avx2 {
#include "exact_tiles.inc"
}  // namespace avx2
#undef REWIND_EXACT_AVX2_KERNEL
REWIND_TARGET_POP
#endif
#endif

/// Whether this build carries copy c of the loops and this CPU runs it.
inline bool cpu_runs(exact_copy c) {
  if (c == generic::copy) return true;
#ifdef REWIND_EXACT_DISPATCH
  if (c == exact_copy::avx512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw");
#endif
#ifdef REWIND_EXACT_DISPATCH_AVX2
  if (c == exact_copy::avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return false;
}

/// The copy of the loops the tiles run: the widest this build carries and the CPU runs.
inline exact_copy exact_loops_now = [] {
#if defined(REWIND_EXACT_DISPATCH) || defined(REWIND_EXACT_DISPATCH_AVX2)
  __builtin_cpu_init();  // this may run among the static initialisers, before libgcc's own
#endif
  for (exact_copy c : {exact_copy::avx512, exact_copy::avx2})
    if (cpu_runs(c)) return c;
  return generic::copy;
}();

/// f(the tiles of the copy in use).
template <class F>
decltype(auto) with_loops(const F& f) {
#ifdef REWIND_EXACT_DISPATCH
  if (exact_loops_now == exact_copy::avx512) return f(avx512::loops{});
#endif
#ifdef REWIND_EXACT_DISPATCH_AVX2
  if (exact_loops_now == exact_copy::avx2) return f(avx2::loops{});
#endif
  return f(generic::loops{});
}

/// One tile of add_state_exact, in the copy the CPU runs.
template <class T>
std::int64_t add_state_tiles(std::int64_t* s, const std::int64_t* t, T* shadow, std::size_t len, fixed_point fp, std::int64_t sign) {
  return with_loops([&](auto copy) { return copy.add_state(s, t, shadow, len, fp, sign); });
}

/// Runs tile(begin, length) over `count` elements in tiles of exact_tile, on `threads` threads
/// when the loop is large enough; returns the tiles' range flags or-ed. On one thread (a team's
/// chunk) the loop opens no parallel region: a nested one of one thread costs 0.35 us a call,
/// three calls a layer per chunk.
template <class Tile>
std::int64_t over_tiles(std::size_t count, int threads, const Tile& tile) {
  const auto tiles = static_cast<std::ptrdiff_t>((count + exact_tile - 1) / exact_tile);
  const auto run = [&](std::ptrdiff_t k) {
    const std::size_t begin = static_cast<std::size_t>(k) * exact_tile;
    return tile(begin, std::min(count - begin, exact_tile));
  };
  std::int64_t bad = 0;
  if (threads <= 1 || count < exact_parallel_from) {
    for (std::ptrdiff_t k = 0; k < tiles; ++k) bad |= run(k);
    return bad;
  }
#pragma omp parallel for reduction(| : bad) num_threads(threads)
  for (std::ptrdiff_t k = 0; k < tiles; ++k) bad |= run(k);
  return bad;
}

inline constexpr std::array<std::string_view, 3> exact_copy_names{"portable", "avx2", "avx512"};  // by exact_copy
}  // namespace detail

/// The copy of the exact mode's loops that runs: "avx512", "avx2" or "portable".
inline std::string_view exact_loops() { return detail::exact_copy_names[static_cast<std::size_t>(detail::exact_loops_now)]; }
/// Runs the exact mode's loops in the copy named (as exact_loops() names them) from now on, in
/// the whole process: to measure or check a narrower copy on a wider CPU (every copy gives the
/// same bits). A copy this build does not carry or this CPU cannot run is an error.
inline void use_exact_loops(std::string_view name) {
  std::string runs;
  for (std::size_t k = 0; k < detail::exact_copy_names.size(); ++k) {
    const auto c = static_cast<exact_copy>(k);
    if (!detail::cpu_runs(c)) continue;
    if (name == detail::exact_copy_names[k]) {
      detail::exact_loops_now = c;
      return;
    }
    runs += std::string(runs.empty() ? "" : ", ") + std::string(detail::exact_copy_names[k]);
  }
  throw error("rewind: exact mode: no \"" + std::string(name) + "\" copy of the loops in this build on this CPU (it runs: " + runs + ")");
}

/// s <- s + round(g) (forward) or s - round(g) (rewind) over `count` elements, with the float
/// shadow of s written beside (unless `shadow` is null: nothing reads it). Returns false when a
/// value left the fixed-point range (the caller raises the error; a loop on several threads
/// cannot).
template <class T>
bool add_exact(std::int64_t* s, const T* g, T* shadow, std::size_t count, fixed_point fp, bool forward, int threads) {
  const std::int64_t sign = forward ? 1 : -1;
  return !detail::over_tiles(count, threads, [&](std::size_t begin, std::size_t len) {
    return detail::with_loops([&](auto copy) { return copy.add(s + begin, g + begin, detail::offset(shadow, begin), len, fp, sign); });
  });
}

/// s <- s + t (forward) or s - t (rewind) over `count` elements, where t is another state
/// variable's fixed point with the same fraction bits: exact, with nothing rounded (x <- x + v
/// adds v itself, not its float shadow). Returns false as add_exact.
template <class T>
bool add_state_exact(std::int64_t* s, const std::int64_t* t, T* shadow, std::size_t count, fixed_point fp, bool forward, int threads) {
  const std::int64_t sign = forward ? 1 : -1;
  return !detail::over_tiles(count, threads, [&](std::size_t begin, std::size_t len) {
    return detail::add_state_tiles(s + begin, t + begin, detail::offset(shadow, begin), len, fp, sign);
  });
}

/// Another state variable's forward update fused after scale_add_exact's, tile by tile while the
/// tile is in the cache: s <- s + the scaled variable's new fixed point (x <- x + v right after
/// v <- mu v + f), with its shadow. No `s`: nothing fused.
template <class T>
struct then_add {
  std::int64_t* s = nullptr;
  T* shadow = nullptr;
  fixed_point fp;
};

/// s <- (n/d) s + round(g) (forward) or s <- (d/n) (s - round(g)) (rewind), exactly, the digits
/// that do not fit kept in ledger elements first .. first + count; then `then`, forward only.
/// Returns false as add_exact.
template <class T>
bool scale_add_exact(std::int64_t* s, const T* g, T* shadow, std::size_t count, fixed_point fp, const exact_ratio& a, ledger& l,
                     std::size_t first, bool forward, int threads, then_add<T> then = {}) {
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
                             .inv_over = grows ? a.inv_small : a.inv_big,
                             .grows = grows};
  std::int64_t* head = l.heads() + first;
  std::uint32_t* height = l.heights() + first;
  const std::int64_t bad = detail::over_tiles(count, threads, [&](std::size_t begin, std::size_t len) {
    std::uint8_t later[detail::exact_tile];  // from `from` on: the element's ledger moves a word, done after in scalar
    std::int64_t any_later = 0, bad = 0;
    std::size_t from = 0;
    bad = detail::with_loops([&](auto copy) {
      return copy.scale(s + begin, g + begin, detail::offset(shadow, begin), head + begin, height + begin, len, fp, c, l, first + begin, later,
                        any_later, from);
    });
    for (std::size_t i = from; any_later && i < len; ++i) {
      if (!later[i]) continue;
      const std::size_t at = begin + i;
      std::int64_t g_out;
      const std::int64_t G = fp.round(static_cast<double>(g[at]), g_out);
      const std::int64_t v = forward ? multiply_exact(s[at], a, l, first + at) + G : divide_exact(s[at] - G, a, l, first + at);
      bad |= fixed_point::outside(v);
      s[at] = v;
      if (shadow) shadow[at] = fp.template value<T>(v);
    }
    if (then.s) bad |= detail::add_state_tiles(then.s + begin, s + begin, detail::offset(then.shadow, begin), len, then.fp, 1);
    return bad;
  });
  l.settle();
  return !bad;
}

}  // namespace rwd::cpu
