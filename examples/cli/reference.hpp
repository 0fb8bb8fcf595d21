// rewind cli: the reference network of DESIGN.md section 4, in the dsl alone (no backend), so
// that the CPU code and the CUDA code (compiled by nvcc) share it.
#pragma once

#include <cstddef>
#include <type_traits>

#include <rewind/rewind.hpp>

namespace rewind_cli {

using namespace rwd::literals;

namespace ref {
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::param<"mu"> mu;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
/// momentum with a runtime mu: v <- mu*v + f(x); x <- x + v
inline constexpr auto momentum = rwd::block(v = mu * v + f(x), x = x + v);
/// leapfrog (kick, drift, kick; h = 1) with the same map
inline constexpr auto leapfrog = rwd::leapfrog(x, v, 1_c, f);
using momentum_t = std::remove_cv_t<decltype(momentum)>;
using leapfrog_t = std::remove_cv_t<decltype(leapfrog)>;
inline constexpr std::size_t width = 784, classes = 10;
}  // namespace ref

}  // namespace rewind_cli
