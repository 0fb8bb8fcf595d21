// The engine's map runner through a third executor, the reference's plain loops (double): it
// agrees with the CPU backend's Eigen executor on maps of every layer arrangement, and its own
// backward pass is the transpose of its forward (central differences), so the layer rules, not
// only one backend, are what is checked.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <rewind/cpu.hpp>
#include <rewind/engine/map_runner.hpp>

#include "../dsl/blocks.hpp"
#include "reference.hpp"

// A layer kind the library does not have, added the way a new kind is added (ARCHITECTURE.md):
// a linear layer without a bias, y = W u. The language learns its shape from layer_kind, the
// engine its buffers, passes and initialisation from layer_rule; nothing else is touched.
template <std::size_t N>
struct linear_layer {};

template <std::size_t N>
struct rwd::layer_kind<linear_layer<N>> {
  static constexpr std::size_t out(std::size_t, std::size_t width) { return N == 0 ? width : N; }
  static constexpr std::size_t parameter_count(std::size_t in, std::size_t out) { return out * in; }
  static constexpr long long fixed_width = static_cast<long long>(N);
  static constexpr bool keeps_output = false;
  static constexpr double bound(double x) { return x; }
  static std::string describe(std::size_t) { return "linear " + std::to_string(N); }
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

template <class M, class Exec>
struct run {
  using L = rwd::map_layout<M>;
  rwd::map_runner<M, double, Exec> runner{width, batch};
  std::vector<double> stages = std::vector<double>(L::stage_size(width) * batch);
  std::vector<double> scratch = std::vector<double>(L::scratch_size(width) * batch + 1);
  std::vector<double> out, grads, vjp;

  void go(const std::vector<double>& params, const std::vector<double>& in, const std::vector<double>& cot) {
    const double* y = runner.forward(params.data(), in.data(), stages.data());
    out.assign(y, y + width * batch);
    grads.assign(params.size(), 0.0);
    vjp.assign(width * batch, 0.0);
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
void check_map(MapObject) {
  using M = std::remove_cv_t<MapObject>;
  CAPTURE(M::describe(width));
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 0.5);
  const auto random = [&](std::size_t n) {
    std::vector<double> v(n);
    for (auto& e : v) e = normal(rng);
    return v;
  };
  const auto params = random(M::parameter_count(width));
  const auto in = random(width * batch), cot = random(width * batch);
  run<M, loop_ops> loops;
  run<M, rwd::cpu::map_ops<double>> eigen;
  loops.go(params, in, cot);
  eigen.go(params, in, cot);
  CHECK(max_diff(loops.out, eigen.out) < 1e-13);
  CHECK(max_diff(loops.grads, eigen.grads) < 1e-13);
  CHECK(max_diff(loops.vjp, eigen.vjp) < 1e-13);

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
  run<M, loop_ops> plus, minus;
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
