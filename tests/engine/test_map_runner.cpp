// The engine's map runner through a third executor, the reference's plain loops (double): it
// agrees with the CPU backend's Eigen executor (whole and in small tiles) on maps of every layer
// arrangement, and its own
// backward pass is the transpose of its forward (central differences), so the layer rules, not
// only one backend, are what is checked.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <rewind/cpu.hpp>
#include <rewind/engine/map_runner.hpp>

#include "../dsl/blocks.hpp"
#include "cuda_functors.hpp"
#include "reference.hpp"

// A layer kind the library does not have, added the way a new kind is added (ARCHITECTURE.md):
// a linear layer without a bias, y = W u. The language learns its shape from layer_kind, the
// engine its buffers, passes and initialisation from layer_rule; nothing else is touched.
template <std::size_t N>
struct linear_layer {};

template <std::size_t N>
struct rwd::layer_kind<linear_layer<N>> {
  static constexpr rwd::tensor_shape out(rwd::tensor_shape, rwd::tensor_shape state) { return N == 0 ? state : rwd::tensor_shape{N}; }
  static constexpr std::size_t parameter_count(rwd::tensor_shape in, rwd::tensor_shape out) { return out.size() * in.size(); }
  static constexpr long long fixed_width = static_cast<long long>(N);
  static constexpr bool keeps_output = false;
  static constexpr double bound(double x) { return x; }
  static std::string describe(rwd::tensor_shape) { return "linear " + std::to_string(N); }
};

template <std::size_t N>
struct rwd::layer_rule<linear_layer<N>> {
  static constexpr layer_buffers buffers{.own_input_cotangent = true};
  template <class T, class Glorot>
  static void initialise(T* params, const layer_shape& s, double scale, Glorot& glorot) {
    glorot(params, s.out, s.in, scale);
  }
  template <class T, class Exec>
  static void forward(const Exec& e, const layer_forward<T>& l) {
    e.gemm(false, false, l.shape.out, l.batch, l.shape.in, l.params, l.x, T(0), l.y);
  }
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    e.gemm(false, true, l.shape.out, l.shape.in, l.batch, l.g, l.x, T(1), l.grads);  // dW += g u^T
    e.gemm(true, false, l.shape.in, l.batch, l.shape.out, l.params, l.g, T(0), l.dx);  // du = W^T g
    return l.dx;
  }
};

namespace {

using reference::loop_ops;

static_assert(rwd::map_executor<loop_ops, double>);
static_assert(rwd::map_executor<rwd::cpu::map_ops<float>, float>);

constexpr std::size_t width = 5, batch = 3;

// The CPU executor with a convolution's columns in tiles of 7 (the real one's are hundreds wide,
// more than the small test images have): every pass over tiles, a ragged last one included.
struct small_tiles : rwd::cpu::map_ops<double> {
  std::size_t patch_tile_columns(std::size_t) const { return 7; }
};

template <class M, class Exec>
struct run {
  using L = rwd::map_layout<M>;
  rwd::tensor_shape state;
  std::vector<double> stages = std::vector<double>(L::stage_size(state) * batch);
  std::vector<double> scratch = std::vector<double>(L::scratch_size(state) * batch + 1);
  std::vector<double> work = std::vector<double>(L::work_size(state) * batch + 1);
  rwd::map_runner<M, double, Exec> runner;
  std::vector<double> out, grads, vjp;

  /// key: the call's dropout key (0: none), as for the samples from `first` on of a batch
  explicit run(rwd::tensor_shape s, std::uint64_t key = 0, std::size_t first = 0)
      : state(s), runner{state, batch, {}, work.data(), key, first} {}
  void go(const std::vector<double>& params, const std::vector<double>& in, const std::vector<double>& cot) {
    const double* y = runner.forward(params.data(), in.data(), stages.data());
    out.assign(y, y + state.size() * batch);
    grads.assign(params.size(), 0.0);
    vjp.assign(state.size() * batch, 0.0);
    std::vector<double> g = cot;
    runner.backward(params.data(), grads.data(), in.data(), stages.data(), g.data(), scratch.data(), vjp.data());
  }
};

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

template <class MapObject>
void check_map(MapObject, rwd::tensor_shape state = width, std::uint64_t key = 0) {
  using M = std::remove_cv_t<MapObject>;
  CAPTURE(M::describe(state));
  REQUIRE(rwd::map_layout<M>::refusal(state) == "");
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 0.5);
  const auto random = [&](std::size_t n) {
    std::vector<double> v(n);
    for (auto& e : v) e = normal(rng);
    return v;
  };
  const auto params = random(M::parameter_count(state));
  const auto in = random(state.size() * batch), cot = random(state.size() * batch);
  run<M, loop_ops> loops(state, key);
  run<M, rwd::cpu::map_ops<double>> eigen(state, key);
  run<M, cuda_functors::map_ops> gpu_arithmetic(state, key);
  run<M, small_tiles> tiled(state, key);
  loops.go(params, in, cot);
  eigen.go(params, in, cot);
  gpu_arithmetic.go(params, in, cot);
  tiled.go(params, in, cot);
  CHECK(max_diff(loops.out, eigen.out) < 1e-13);
  CHECK(max_diff(loops.grads, eigen.grads) < 1e-12);
  CHECK(max_diff(loops.vjp, eigen.vjp) < 1e-13);
  CHECK(max_diff(loops.out, gpu_arithmetic.out) < 1e-13);
  CHECK(max_diff(loops.grads, gpu_arithmetic.grads) < 1e-12);
  CHECK(max_diff(loops.vjp, gpu_arithmetic.vjp) < 1e-13);
  CHECK(max_diff(loops.out, tiled.out) < 1e-13);
  CHECK(max_diff(loops.grads, tiled.grads) < 1e-12);
  CHECK(max_diff(loops.vjp, tiled.vjp) < 1e-13);

  // <cot, J du> == <vjp, du> and <cot, J_theta dtheta> == <grads, dtheta>, by central differences
  const auto du = random(in.size()), dtheta = random(params.size());
  const double h = 1e-6;
  const auto along = [&](const std::vector<double>& base, const std::vector<double>& dir, double s) {
    std::vector<double> v = base;
    for (std::size_t i = 0; i < v.size(); ++i) v[i] += s * dir[i];
    return v;
  };
  const auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  run<M, loop_ops> plus(state, key), minus(state, key);
  plus.go(params, along(in, du, h), cot);
  minus.go(params, along(in, du, -h), cot);
  double fd = 0;
  for (std::size_t i = 0; i < cot.size(); ++i) fd += cot[i] * (plus.out[i] - minus.out[i]) / (2 * h);
  CHECK(fd == doctest::Approx(dot(loops.vjp, du)).epsilon(1e-7));
  plus.go(along(params, dtheta, h), in, cot);
  minus.go(along(params, dtheta, -h), in, cot);
  fd = 0;
  for (std::size_t i = 0; i < cot.size(); ++i) fd += cot[i] * (plus.out[i] - minus.out[i]) / (2 * h);
  CHECK(fd == doctest::Approx(dot(loops.grads, dtheta)).epsilon(1e-7));
}

// every arrangement the layout distinguishes: a dense layer fused with the activation after it,
// a dense layer followed by a dense layer, an activation first, an activation last, activations only
inline constexpr auto dense_tanh_dense = rwd::map<"a">(rwd::dense<4>, rwd::tanh, rwd::dense_same);
inline constexpr auto activation_first = rwd::map<"b">(rwd::tanh, rwd::dense_same, rwd::relu, rwd::dense<3>, rwd::dense_same);
inline constexpr auto activation_last = rwd::map<"c">(rwd::dense<6>, rwd::sigmoid, rwd::dense_same, rwd::tanh);
inline constexpr auto activations_only = rwd::map<"d">(rwd::tanh, rwd::sigmoid);
inline constexpr auto one_dense = rwd::map<"e">(rwd::dense_same);
inline constexpr auto new_kind = rwd::map<"g">(linear_layer<5>{}, rwd::tanh, linear_layer<0>{});
static_assert(decltype(new_kind)::parameter_count(6) == 5 * 6 + 6 * 5);
static_assert(rwd::map_layout<std::remove_cv_t<decltype(new_kind)>>::scratch_size(6) == 5);  // the second linear's input cotangent
inline constexpr auto exp_gate = rwd::map<"f">(rwd::dense<2>, rwd::exp, rwd::dense<7>, rwd::dense_same, rwd::tanh);

}  // namespace

TEST_CASE("the map runner through a plain-loop executor agrees with Eigen's, and its backward is its forward's transpose") {
  check_map(dense_tanh_dense);
  check_map(activation_first);
  check_map(activation_last);
  check_map(activations_only);
  check_map(one_dense);
  check_map(exp_gate);
}

TEST_CASE("a layer kind added through layer_kind and layer_rule alone runs on every executor, with its starting values") {
  using M = std::remove_cv_t<decltype(new_kind)>;
  CHECK(M::describe(6) == "6 -> linear 5 -> tanh -> linear 0");
  check_map(new_kind);
  // its initialise is called: Glorot-uniform values, the last learned layer at output_scale
  using namespace rwd::literals;
  constexpr auto b = rwd::block(test_blocks::v = 0.5_c * test_blocks::v + new_kind(test_blocks::x), test_blocks::x = test_blocks::x + test_blocks::v);
  const rwd::parameter_layout<std::remove_cv_t<decltype(b)>> arena(6, 1, 2);
  std::vector<double> params(arena.total);
  arena.initialise(std::span<double>(params), 1, 0.5);
  const auto first = std::max_element(params.begin(), params.begin() + 30, [](double a, double c) { return std::abs(a) < std::abs(c); });
  const auto second = std::max_element(params.begin() + 30, params.begin() + 60, [](double a, double c) { return std::abs(a) < std::abs(c); });
  CHECK(std::abs(*first) <= std::sqrt(6.0 / 11));
  CHECK(std::abs(*first) > 0.2);
  CHECK(std::abs(*second) <= 0.5 * std::sqrt(6.0 / 11));
  CHECK(std::abs(*second) > 0.1);
}

namespace {

// convolutions and normalizations on a shaped state: every arrangement the layout and the rules
// distinguish (a convolution's bias fused into the activation after it, a 1x1 convolution
// without patches, a normalization first (its input cotangent is the map's), last (its output
// is the map's), G = 1 and G > 1, K = 1, 3, 5), and dense layers on a flattened image
inline constexpr auto conv_only = rwd::map<"c1">(rwd::conv_same<3>);
inline constexpr auto conv_relu_conv = rwd::map<"c2">(rwd::conv<4, 3>, rwd::relu, rwd::conv_same<3>);
inline constexpr auto bottleneck = rwd::map<"c3">(rwd::conv<6, 1>, rwd::group_norm<2>, rwd::tanh, rwd::conv_same<5>);
inline constexpr auto norm_first = rwd::map<"c4">(rwd::layer_norm, rwd::conv<2, 3>, rwd::sigmoid, rwd::conv_same<1>);
inline constexpr auto norm_last = rwd::map<"c5">(rwd::conv<4, 3>, rwd::group_norm<4>, rwd::tanh, rwd::conv_same<3>, rwd::group_norm<3>);
inline constexpr auto dense_on_image = rwd::map<"c6">(rwd::dense<7>, rwd::tanh, rwd::dense_same);
inline constexpr auto conv_then_dense = rwd::map<"c7">(rwd::conv<2, 3>, rwd::tanh, rwd::dense_same);

using conv_relu_conv_t = std::remove_cv_t<decltype(conv_relu_conv)>;
static_assert(conv_relu_conv_t::parameter_count(rwd::tensor_shape{3, 5, 4}) == (4 * 3 * 9 + 4) + (3 * 4 * 9 + 3));
static_assert(conv_relu_conv_t::shape(rwd::tensor_shape{3, 5, 4})[0].output == rwd::tensor_shape{4, 5, 4});
static_assert(rwd::map_layout<conv_relu_conv_t>::stage_size(rwd::tensor_shape{3, 5, 4}) == (4 + 3) * 20);  // the first conv writes into relu's buffer
static_assert(rwd::map_layout<conv_relu_conv_t>::work_size(rwd::tensor_shape{3, 5, 4}) == 4 * 9 * 20);    // the second conv's patches

}  // namespace

TEST_CASE("convolutions and group norms run on every executor, and their backward is their forward's transpose") {
  for (const rwd::tensor_shape s : {rwd::tensor_shape{3, 5, 4}, rwd::tensor_shape{6, 3, 7}}) {
    CAPTURE(s.text());
    check_map(conv_only, s);
    check_map(conv_relu_conv, s);
    check_map(bottleneck, s);
    check_map(norm_first, s);
    check_map(dense_on_image, s);
    check_map(conv_then_dense, s);
  }
  check_map(norm_last, rwd::tensor_shape{3, 2, 5});
  check_map(rwd::map<"c8">(rwd::conv<5, 3>, rwd::group_norm<5>, rwd::relu, rwd::conv_same<3>), rwd::tensor_shape{2, 1, 6});  // one row
}

TEST_CASE("a map that cannot run on the state's shape is refused by name, with the reason") {
  using bottleneck_t = std::remove_cv_t<decltype(bottleneck)>;
  CHECK(rwd::map_layout<bottleneck_t>::refusal(rwd::tensor_shape{3, 5, 4}) == "");
  // group norm 2 of a 3-channel input
  const auto groups = rwd::map<"g">(rwd::group_norm<2>, rwd::conv_same<3>);
  CHECK(rwd::map_layout<std::remove_cv_t<decltype(groups)>>::refusal(rwd::tensor_shape{3, 5, 4}) ==
        "rewind: map g (3x5x4 -> group norm 2 -> conv3x3) on a 3x5x4 state: its layer 0 (group norm 2) cannot take a 3x5x4 input");
  // a dense layer flattens: a convolution after it has one position, not the state's 20
  const auto flat = rwd::map<"h">(rwd::dense<8>, rwd::conv_same<3>);
  CHECK(rwd::map_layout<std::remove_cv_t<decltype(flat)>>::refusal(rwd::tensor_shape{3, 5, 4}) ==
        "rewind: map h (3x5x4 -> 8 -> conv3x3) on a 3x5x4 state: its output is 3, not the state's 3x5x4");
  using namespace rwd::literals;
  const auto b = rwd::block(test_blocks::v = 0.5_c * test_blocks::v + groups(test_blocks::x), test_blocks::x = test_blocks::x + test_blocks::v);
  CHECK_THROWS_WITH_AS(rwd::parameter_layout<std::remove_cv_t<decltype(b)>>(rwd::tensor_shape{3, 5, 4}, 2, 10),
                       doctest::Contains("cannot take a 3x5x4 input"), rwd::error);
  CHECK_NOTHROW(rwd::parameter_layout<std::remove_cv_t<decltype(b)>>(rwd::tensor_shape{4, 5, 4}, 2, 10));
}

TEST_CASE("squeeze is torch's pixel_unshuffle in the channels-last layout, and undoes itself") {
  std::vector<double> image(16);
  for (std::size_t i = 0; i < image.size(); ++i) image[i] = static_cast<double>(i);  // one 4 x 4 channel, row-major
  const auto s = rwd::space_to_depth<double>(image, rwd::tensor_shape{1, 4, 4}, 1);
  CHECK(rwd::squeezed(rwd::tensor_shape{1, 4, 4}) == rwd::tensor_shape{4, 2, 2});
  // position (y, x) of the 2 x 2 result holds channels (dy, dx) = the 2 x 2 block at (2y, 2x)
  CHECK(s == std::vector<double>{0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15});
  // several channels and samples: channel 4 ch + 2 dy + dx, and the inverse restores the input
  const rwd::tensor_shape shape{3, 6, 4};
  std::vector<double> batch(shape.size() * 2);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = std::sin(1.0 + static_cast<double>(i));
  auto out = rwd::space_to_depth<double>(batch, shape, 2);
  const std::size_t b = 1, ch = 2, y = 1, x = 1, dy = 1, dx = 0;  // sample 1, channel 2 at (3, 2)
  CHECK(out[(b * 6 + y * 2 + x) * 12 + 4 * ch + 2 * dy + dx] == batch[(b * 24 + (2 * y + dy) * 4 + 2 * x + dx) * 3 + ch]);
  std::vector<double> back(batch.size());
  const rwd::squeeze_op<double> undo{back.data(), out.data(), shape, false};
  for (std::size_t col = 0; col < 2 * 6; ++col) undo(col);
  CHECK(back == batch);
  CHECK_THROWS_WITH_AS(rwd::space_to_depth<double>(batch, rwd::tensor_shape{3, 3, 8}, 2), "rewind: squeeze needs an even height and width, not 3x3x8",
                       rwd::error);
  CHECK_THROWS_WITH_AS(rwd::space_to_depth<double>(batch, shape, 3), doctest::Contains("are not 3 samples of 3x6x4"), rwd::error);
}

namespace {
// the resolution-changing layers inside maps that end on the state's shape (dense_same)
inline constexpr auto squeeze_down = rwd::map<"r1">(rwd::squeeze, rwd::conv<4, 1>, rwd::relu, rwd::dense_same);
inline constexpr auto pool_down = rwd::map<"r2">(rwd::avg_pool<2>, rwd::tanh, rwd::dense_same);
inline constexpr auto conv_pool = rwd::map<"r3">(rwd::conv<3, 3>, rwd::avg_pool<3>, rwd::dense_same);
}  // namespace

TEST_CASE("squeeze and average pooling layers run on every executor, and their backward is their forward's transpose") {
  check_map(squeeze_down, rwd::tensor_shape{2, 4, 6});
  check_map(pool_down, rwd::tensor_shape{3, 4, 2});
  check_map(conv_pool, rwd::tensor_shape{2, 6, 3});
  using S = std::remove_cv_t<decltype(squeeze_down)>;
  using P = std::remove_cv_t<decltype(conv_pool)>;
  CHECK(S::shape(rwd::tensor_shape{2, 4, 6})[0].output == rwd::tensor_shape{8, 2, 3});
  CHECK(rwd::map_layout<S>::refusal(rwd::tensor_shape{2, 3, 6}).find("its layer 0 (squeeze) cannot take a 2x3x6 input") != std::string::npos);
  CHECK(rwd::map_layout<P>::refusal(rwd::tensor_shape{2, 6, 4}).find("its layer 1 (avg pool 3) cannot take a 3x6x4 input") != std::string::npos);
}

TEST_CASE("average pooling is torch's AvgPool2d(K) in the channels-last layout") {
  // two samples of 2 channels x 4 x 6, value 100 b + 10 y + x + ch / 10 at (y, x)
  const rwd::tensor_shape s{2, 4, 6};
  std::vector<double> in(s.size() * 2), out(2 * 2 * 2 * 3), back(in.size());
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t y = 0; y < 4; ++y)
      for (std::size_t x = 0; x < 6; ++x)
        for (std::size_t ch = 0; ch < 2; ++ch) in[((b * 4 + y) * 6 + x) * 2 + ch] = 100.0 * b + 10.0 * y + x + ch / 10.0;
  const rwd::avg_pool_op<double> pool{in.data(), out.data(), s, 2, true};
  for (std::size_t col = 0; col < 2 * 2 * 3; ++col) pool(col);
  // sample 1, output (1, 2), channel 1: the mean of (y, x) in {2, 3} x {4, 5}
  CHECK(out[((1 * 2 + 1) * 3 + 2) * 2 + 1] == doctest::Approx(100 + 25 + 4.5 + 0.1));
  CHECK(out[0] == doctest::Approx(5.5));
  // the adjoint spreads each output's cotangent over its window, divided by K K
  const rwd::avg_pool_op<double> adjoint{back.data(), out.data(), s, 2, false};
  for (std::size_t col = 0; col < s.positions() * 2; ++col) adjoint(col);
  CHECK(back[((1 * 4 + 3) * 6 + 5) * 2 + 1] == doctest::Approx((100 + 25 + 4.5 + 0.1) / 4));
}

namespace {
using namespace rwd::literals;
inline constexpr auto dropout_inside = rwd::map<"d1">(rwd::dense<16>, rwd::tanh, rwd::dropout(0.5_c), rwd::dense_same);
inline constexpr auto dropout_first = rwd::map<"d2">(rwd::dropout(0.2_c), rwd::dense_same);
inline constexpr auto dropout_conv = rwd::map<"d3">(rwd::conv<4, 3>, rwd::relu, rwd::dropout(0.25_c), rwd::conv_same<3>);
}  // namespace

TEST_CASE("dropout: a fixed mask per key on every executor, its backward the transpose, the identity without a key") {
  const std::uint64_t key = rwd::noise_key(1, 0);
  check_map(dropout_inside, width, key);  // central differences through the same mask both ways
  check_map(dropout_first, width, key);   // the first layer: its cotangent is the map's
  check_map(dropout_conv, rwd::tensor_shape{3, 5, 4}, key);
  check_map(dropout_inside);              // no key: no dropout
  CHECK(decltype(dropout_inside)::describe(5) == "5 -> 16 -> tanh -> dropout 0.5 -> 5");

  using M = std::remove_cv_t<decltype(dropout_first)>;
  constexpr std::size_t n = 4000;
  const auto dropped = [&](std::uint64_t k, std::size_t first, std::size_t count) {
    std::vector<double> x(n * count, 1.0), y(n * count);
    const rwd::layer_forward<double> l{.shape = M::shape(n)[0], .batch = count, .x = x.data(), .y = y.data(), .key = k, .first = first};
    rwd::layer_rule<rwd::dropout_layer<1, 5>>::forward(loop_ops{}, l);
    return y;
  };
  const auto y = dropped(key, 0, 2);
  const auto zeros = static_cast<double>(std::count(y.begin(), y.end(), 0.0));
  CHECK(zeros / static_cast<double>(y.size()) == doctest::Approx(0.2).epsilon(0.1));  // p, within 3 sigma
  CHECK(std::all_of(y.begin(), y.end(), [](double v) { return v == 0.0 || v == 1.25; }));  // kept values scaled by 1/(1 - p)
  // the mask of a sample depends on its place in the whole batch, not on the lane it runs in
  const auto second = dropped(key, 1, 1);
  CHECK(std::equal(second.begin(), second.end(), y.begin() + n));
  // another key (another step, layer or call): another mask
  CHECK(dropped(rwd::noise_key(1, 1), 0, 2) != y);
  CHECK(dropped(0, 0, 2) == std::vector<double>(2 * n, 1.0));
}

TEST_CASE("a convolution's weight is torch's (out, in, K, K) in files, held in the patch order (out, K, K, in)") {
  using namespace rwd::literals;
  constexpr auto b = rwd::block(test_blocks::v = 0.5_c * test_blocks::v + conv_relu_conv(test_blocks::x), test_blocks::x = test_blocks::x + test_blocks::v);
  const rwd::parameter_layout<std::remove_cv_t<decltype(b)>> arena(rwd::tensor_shape{3, 5, 4}, 1, 2);
  const auto tensors = arena.tensors();
  const auto w = std::find_if(tensors.begin(), tensors.end(), [](const rwd::named_tensor& t) { return t.name == "layer0.c2.0.weight"; });
  REQUIRE(w != tensors.end());
  CHECK(w->shape == std::vector<std::uint64_t>{4, 3, 3, 3});
  std::vector<std::size_t> visited;
  rwd::detail::safetensors::for_each_element<float>(*w, [&](std::size_t k) { visited.push_back(k); });
  REQUIRE(visited.size() == 4 * 3 * 9);
  std::size_t i = 0;  // the file's order: out, in, ky, kx; the arena's: out, ky, kx, in
  for (std::size_t o = 0; o < 4; ++o)
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t ky = 0; ky < 3; ++ky)
        for (std::size_t kx = 0; kx < 3; ++kx) CHECK(visited[i++] == w->offset + o * 27 + (ky * 3 + kx) * 3 + c);
  const auto head = std::find_if(tensors.begin(), tensors.end(), [](const rwd::named_tensor& t) { return t.name == "head.weight"; });
  std::vector<std::size_t> h;
  rwd::detail::safetensors::for_each_element<float>(*head, [&](std::size_t k) { h.push_back(k); });
  CHECK(h[1] == head->offset + 2);  // (0, 1): the arena holds the head column-major, 2 classes
}
