// Blocks with many maps: a chain of eight additive couplings (16 distinct maps, 16 updates), and
// a sum of N distinct maps in one update (N + 1 slope variables), to 32 and past it.
#pragma once

#include <cstddef>
#include <utility>

#include <rewind/rewind.hpp>

namespace long_blocks {
using namespace rwd::literals;

inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::var<"x1"> x1;
inline constexpr rwd::var<"x2"> x2;

/// "a07": a map's name with a number.
consteval rwd::fixed_string<4> numbered(char c, std::size_t i) {
  const char s[4] = {c, static_cast<char>('0' + i / 10), static_cast<char>('0' + i % 10), '\0'};
  return s;
}
template <std::size_t I>
inline constexpr auto a = rwd::map<numbered('a', I)>(rwd::dense<4>, rwd::tanh, rwd::dense_same);
template <std::size_t I>
inline constexpr auto b = rwd::map<numbered('b', I)>(rwd::dense<3>, rwd::sigmoid, rwd::dense_same);
/// m00 ... m31: small maps whose slopes are declared in [-1/100, 1/100]
template <std::size_t I>
inline constexpr auto m = rwd::map<numbered('m', I)>(rwd::dense<2>, rwd::tanh, rwd::dense_same).lipschitz(0.01_c);
inline constexpr auto f = rwd::map<"f">(rwd::dense<2>, rwd::tanh, rwd::dense_same).lipschitz(0.01_c);

template <std::size_t... I>
constexpr auto couplings(std::index_sequence<I...>) {
  return rwd::chain(rwd::additive_coupling(x1, x2, a<I>, b<I>)...);
}
/// x1 += a00(x2); x2 += b00(x1); ... eight couplings, one after the other
inline constexpr auto eight_couplings = couplings(std::make_index_sequence<8>{});

template <std::size_t... I>
constexpr auto sum_of_maps(std::index_sequence<I...>) {
  return rwd::block(x = x + (m<I>(v) + ...), v = v + f(x));
}
/// x <- x + m00(v) + ... + m(N-1)(v); v <- v + f(x): N + 1 maps, every slope in [-0.01, 0.01]
template <std::size_t N>
inline constexpr auto maps_in_one_update = sum_of_maps(std::make_index_sequence<N>{});
}  // namespace long_blocks
