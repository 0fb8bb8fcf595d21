// The names every compile-fail case uses; each case is one line, ok or ko.
#pragma once

#include <rewind/rewind.hpp>

using namespace rwd::literals;
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::var<"w"> w;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto g = rwd::map<"g">(rwd::dense<8>, rwd::relu, rwd::dense_same);
