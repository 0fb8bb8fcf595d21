// The engine's map runner through a third executor, the reference's plain loops (double): it
// agrees with the CPU backend's Eigen executor on maps of every layer arrangement, and its own
// backward pass is the transpose of its forward (central differences), so the layer rules, not
// only one backend, are what is checked.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include <rewind/cpu.hpp>
#include <rewind/engine/map_runner.hpp>

#include "reference.hpp"

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
