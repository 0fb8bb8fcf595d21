// The blocks the DSL tests use: eight accepted kinds and three data-dependent ones, a block on an
// image, and the parts of two staged networks.
#pragma once

#include <rewind/rewind.hpp>

namespace test_blocks {
using namespace rwd::literals;

inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::var<"w"> w;
inline constexpr rwd::var<"x1"> x1;
inline constexpr rwd::var<"x2"> x2;
inline constexpr rwd::param<"mu"> mu;

inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto g = rwd::map<"g">(rwd::dense<8>, rwd::relu, rwd::dense_same);
inline constexpr auto F = rwd::map<"F">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto G = rwd::map<"G">(rwd::dense<16>, rwd::sigmoid, rwd::dense_same);
// the scale of the affine coupling ends with tanh (as in Real NVP), so exp(s) lies in [1/e, e]
inline constexpr auto s = rwd::map<"s">(rwd::dense<8>, rwd::tanh, rwd::dense_same, rwd::tanh);
inline constexpr auto t = rwd::map<"t">(rwd::dense<8>, rwd::tanh, rwd::dense_same);

// 1. momentum, 2. leapfrog, 3. additive coupling: the ready-made blocks
inline constexpr auto momentum = rwd::momentum(x, v, 0.9_c, f);
inline constexpr auto leapfrog = rwd::leapfrog(x, v, 1_c, F);
inline constexpr auto coupling = rwd::additive_coupling(x1, x2, F, G);
// 4. three state variables
inline constexpr auto three = rwd::block(v = 0.5_c * v + f(x), w = w + g(v), x = x + v - 0.25_c * w);
// 5. a runtime mu
inline constexpr auto runtime_mu = rwd::block(v = mu * v + f(x), x = x + v);
// 6. two different maps in one update
inline constexpr auto two_maps = rwd::block(v = 0.9_c * v + f(x) - g(x), x = x + v);
// 7. a constant alpha of 2: expansive
inline constexpr auto expansive = rwd::block(x = 2_c * x + f(v), v = v + g(x));
// 8. a long sum in g
inline constexpr auto long_sum =
    rwd::block(x = x + v + 0.5_c * w - f(v) + g(w) + rwd::tanh(v) - 3_c * w, v = v + f(x), w += x);
// 9. affine coupling: a data-dependent alpha in [1/e, e] (budget: 15 layers in float32)
inline constexpr auto affine = rwd::block(x1 = x1 * rwd::exp(s(x2)) + t(x2), x2 = x2 + F(x1));
// 10. a gate exp(v): a data-dependent alpha that the input chooses (exp(-200) is 0 in float);
// its range [0, inf] contains zero, so it has no budget
inline constexpr auto gated = rwd::block(x = rwd::exp(v) * x + f(v), v = v + g(x));
// 11. a gate bounded away from zero: alpha in [1/2, 1] (budget: 23 layers in float32)
inline constexpr auto half_gate = rwd::block(x = (0.5_c + 0.5_c * rwd::sigmoid(t(v))) * x + f(v), v = v + g(x));
// 12. momentum on an image: a convolutional bottleneck with group norm and dropout (a state with a
// shape)
inline constexpr auto c = rwd::map<"c">(rwd::conv<8, 3>, rwd::group_norm<4>, rwd::relu, rwd::dropout(0.1_c), rwd::conv_same<3>);
inline constexpr auto conv_momentum = rwd::momentum(x, v, 0.9_c, c);

// Staged networks (rwd::stages): a stem on the kept input; stages of momentum (runtime mu) with a
// bottleneck that follows the stage's width, with dropout; between stages a squeeze, or a kept
// transition that pools and widens
inline constexpr auto stem = rwd::stem<"stem">(rwd::conv<2, 3>, rwd::tanh);
inline constexpr auto bottleneck = rwd::map<"b">(rwd::conv<4, 3>, rwd::group_norm<2>, rwd::relu, rwd::dropout(0.25_c), rwd::conv_same<3>);
inline constexpr auto staged_momentum = rwd::block(v = mu * v + bottleneck(x), x = x + v);
inline constexpr auto pool = rwd::transition<"pool">(rwd::avg_pool<2>, rwd::conv<8, 3>, rwd::relu);
}  // namespace test_blocks
