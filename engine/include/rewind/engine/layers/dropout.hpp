// rewind engine: dropout whose masks are drawn again, not stored. Element e of a call's layer is
// kept where a counter-based draw, a hash of (key, e), is at least p 2^64: the key mixes the
// step's noise (the seed and the count of parameter updates), the layer of the stack, the
// update, the call and the map's layer (rwd::step_engine::call_key, rwd::map_runner), and e
// counts from the first sample of the whole batch, so the forward pass, the rewind and the
// backward pass draw the same mask on every executor, for any chunking of the batch. The hash
// is SplitMix64's finaliser (Steele, Lea and Flood 2014), applied twice.
#pragma once

#include <cstdint>

#include <rewind/config.hpp>

#include "rule.hpp"

namespace rwd {

/// SplitMix64's finaliser: a bijection of 64-bit words whose outputs pass BigCrush in sequence.
REWIND_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/// A key derived from `key` and a counter: never 0 (0 means "no dropout").
REWIND_HOST_DEVICE constexpr std::uint64_t noise_key(std::uint64_t key, std::uint64_t counter) {
  const std::uint64_t k = mix64(key ^ mix64(counter));
  return k == 0 ? 1 : k;
}

/// Dropout of element i of a lane (element first + i of the whole batch): y = x / (1 - p) where
/// kept, 0 elsewhere; with key 0, y = x.
template <class T>
struct dropout_op {
  const T* x;
  T* y;
  std::uint64_t key, first, threshold;  // threshold: p 2^64
  T scale;                              // 1 / (1 - p)
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    if (key == 0) y[i] = x[i];
    else y[i] = mix64(key ^ mix64(first + i)) >= threshold ? x[i] * scale : T(0);
  }
};
/// Its backward pass, in place: g = g / (1 - p) where kept, 0 elsewhere; `copy` receives it.
template <class T>
struct dropout_backward_op {
  T* g;
  T* copy;
  std::uint64_t key, first, threshold;
  T scale;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    if (key != 0) g[i] = mix64(key ^ mix64(first + i)) >= threshold ? g[i] * scale : T(0);
    if (copy) copy[i] = g[i];
  }
};

template <long long N, long long D>
struct layer_rule<dropout_layer<N, D>> {
  static constexpr layer_buffers buffers{};
  template <class T, class Exec>
  static void forward(const Exec& e, const layer_forward<T>& l) {
    e.each(dropout_op<T>{l.x, l.y, l.key, l.first * l.shape.out, threshold, scale<T>()}, l.shape.out * l.batch);
  }
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    e.each(dropout_backward_op<T>{l.g, l.dx, l.key, l.first * l.shape.out, threshold, scale<T>()}, l.shape.out * l.batch);
    return l.g;
  }

 private:
  /// floor(p 2^64) = floor(N 2^64 / D), exactly, by binary long division (N < D < 2^63).
  static constexpr std::uint64_t threshold = [] {
    std::uint64_t q = 0, r = static_cast<std::uint64_t>(N);
    for (int bit = 0; bit < 64; ++bit) {
      r <<= 1, q <<= 1;
      if (r >= static_cast<std::uint64_t>(D)) r -= static_cast<std::uint64_t>(D), q |= 1;
    }
    return q;
  }();
  template <class T>
  static constexpr T scale() {
    return static_cast<T>(static_cast<double>(D) / static_cast<double>(D - N));
  }
};

}  // namespace rwd
