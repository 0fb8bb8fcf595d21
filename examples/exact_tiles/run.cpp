// The exact mode's tiles as one chunk of the reference step runs them, on one thread: forward,
// v <- (9/10) v + g with x <- x + v fused (scale_add_exact), through `layers` layers; then the
// rewind, x <- x - v (add_state_exact) and v's inverse, back to zero. scripts/exact_tiles_ab.sh
// compiles this file a second time against another revision's headers, with `rwd` renamed, so
// that both builds' tiles run in one process, interleaved.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <rewind/cpu/exact.hpp>
#include <rewind/cpu/memory.hpp>

#include "tiles.hpp"

#ifndef REWIND_TILES_RUN
#define REWIND_TILES_RUN run_tiles
#endif

tiles_time REWIND_TILES_RUN(const tiles_config& c) {
  using namespace rwd::cpu;
  static const bool chosen = [&] {
    if (!c.loops.empty()) use_exact_loops(c.loops);
    return true;
  }();
  (void)chosen;
  const std::size_t n = c.elements;
  static memory_tracker tracker;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> g(n), shadow(n);
  for (auto& e : g) e = 0.25f * normal(rng);
  const fixed_point fp = fixed_point::of(32);
  ledger book(tracker, n, {rwd::rational{9, 10}});
  const exact_ratio a(9, 10, book);
  std::vector<std::int64_t> v(n, 0), x(n, 0);
  bool in_range = true;
  const auto t0 = std::chrono::steady_clock::now();
  for (int l = 0; l < c.layers; ++l)
    in_range &= scale_add_exact<float>(v.data(), g.data(), nullptr, n, fp, a, book, 0, true, 1, then_add<float>{x.data(), shadow.data(), fp});
  const auto t1 = std::chrono::steady_clock::now();
  for (int l = 0; l < c.layers; ++l) {
    in_range &= add_state_exact<float>(x.data(), v.data(), shadow.data(), n, fp, false, 1);
    in_range &= scale_add_exact<float>(v.data(), g.data(), nullptr, n, fp, a, book, 0, false, 1);
  }
  const auto t2 = std::chrono::steady_clock::now();
  const auto zero = [](std::int64_t e) { return e == 0; };
  return {std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
          in_range && std::all_of(v.begin(), v.end(), zero) && std::all_of(x.begin(), x.end(), zero) && book.empty(), book.planes()};
}
