// The laws of a step for one block, through every executor this build has on the host: the
// reference executor (plain loops over the dsl's element evaluator, double) is the oracle; the
// CPU executor (Eigen, chunks of the batch) and the CUDA executor's functors run on the host
// (cuda_functors.hpp) are held to it.
//   inverse after forward = identity          (one layer, the dsl's derived inverse)
//   <J u, w> = <u, adjoint(w)>                (one layer, state and parameters; J u by central
//                                              differences in double)
//   reversible = checkpointed = stored        (whole steps)
//   the gradient = central differences of the loss along a random direction
//   the CPU executor's and the CUDA functors' loss and gradients = the reference's, in double,
//   in every mode, and the CPU's tracked peak = its closed-form plan
// The GPU itself (cuBLAS, streams) is held to the CPU by tests/cuda, on a GPU.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string_view>
#include <vector>

#include <rewind/cpu.hpp>

#include "cuda_functors.hpp"
#include "reference.hpp"

namespace laws {

namespace hana = boost::hana;

using vec = std::vector<double>;

inline double dot(const vec& a, const vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
inline double max_abs(const vec& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}
inline double max_diff(const vec& a, const vec& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}
inline vec along(const vec& base, const vec& dir, double s) {
  vec v = base;
  for (std::size_t i = 0; i < v.size(); ++i) v[i] += s * dir[i];
  return v;
}
template <class Span>
vec held(const Span& s) {
  return vec(s.begin(), s.end());
}

template <class Block>
inline void check_laws(Block b, const rwd::env& bindings = {}, rwd::tensor_shape shape = 6) {
  constexpr std::size_t batch = 5, depth = 3, ns = Block::state_size;
  const std::size_t wb = shape.size() * batch;
  using State = std::remove_const_t<decltype(Block::state())>;
  rwd::options o{.batch = batch, .classes = 4, .shape = shape, .seed = 11};
  o.input = decltype(+hana::front(State{}))::type::name;  // the first state variable
  o.output = o.input;
  o.output_init_scale = 0.5;  // maps large enough that every law has something to check
  o.grain = 2;                // the CPU model runs three chunks, the reference one lane
  o.lossy = true;             // blocks without a budget (a gate exp(v)): three layers are fine
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> uni(-1, 1);
  const auto random = [&](std::size_t n) {
    vec v(n);
    for (auto& e : v) e = uni(rng);
    return v;
  };
  reference::model<Block> ref(b, depth, o, bindings);
  const std::size_t per_layer = ref.per_layer(), l = 1;
  // biases away from zero: the state variables other than the input start at 0, and a relu
  // with a zero bias would sit on its kink there, where the stored and the rewound input (off by
  // a rounding error) take different one-sided derivatives and central differences neither
  ref.parameters() = along(ref.parameters(), random(ref.parameters().size()), 0.1);

  // inverse after forward = identity
  const vec s0 = random(ns * wb), s1 = ref.forward_layer(l, s0);
  CHECK(max_diff(ref.rewind_layer(l, s1), s0) < 1e-12);
  CHECK(max_diff(s1, s0) > 1e-3);  // the layer did move the state: the law is not a no-op's

  // <J u, w> = <u, adjoint(w)>, for the state and the layer's parameters
  const vec u = random(ns * wb), w = random(ns * wb), dtheta = random(per_layer);
  vec bar = w, grads;
  ref.rewind_layer(l, s1, &bar, &grads);
  const double h = 1e-5;
  const auto jvp = [&](const vec& plus, const vec& minus) {
    vec d(plus.size());
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = (plus[i] - minus[i]) / (2 * h);
    return dot(d, w);
  };
  const double state_fd = jvp(ref.forward_layer(l, along(s0, u, h)), ref.forward_layer(l, along(s0, u, -h)));
  CHECK(state_fd == doctest::Approx(dot(u, bar)).epsilon(1e-7));
  const vec theta = ref.parameters();
  const auto layer_params = [&](double s) {
    for (std::size_t i = 0; i < per_layer; ++i) ref.parameters()[l * per_layer + i] = theta[l * per_layer + i] + s * dtheta[i];
  };
  layer_params(h);
  const vec p_plus = ref.forward_layer(l, s0);
  layer_params(-h);
  const vec p_minus = ref.forward_layer(l, s0);
  layer_params(0);
  CHECK(jvp(p_plus, p_minus) == doctest::Approx(dot(dtheta, grads)).epsilon(1e-7));

  // whole steps: reversible = checkpointed = stored, and the gradient = central differences
  const vec data = random(wb);
  std::vector<int> labels(batch);
  for (std::size_t j = 0; j < batch; ++j) labels[j] = static_cast<int>(j % 4);
  const double loss = ref.loss_and_gradient(data, labels, rwd::mode::stored);
  const vec stored = ref.gradients(), stored_input = ref.input_gradient();
  const double scale = max_abs(stored), input_scale = max_abs(stored_input);
  REQUIRE(scale > 0);
  REQUIRE(input_scale > 0);
  rwd::options segments = o;
  segments.checkpoint_every = 2;
  reference::model<Block> ref2(b, depth, segments, bindings);
  ref2.parameters() = ref.parameters();
  for (rwd::mode m : {rwd::mode::reversible, rwd::mode::checkpointed}) {
    CAPTURE(rwd::to_string(m));
    auto& r = m == rwd::mode::checkpointed ? ref2 : ref;
    CHECK(r.loss_and_gradient(data, labels, m) == doctest::Approx(loss).epsilon(1e-13));
    CHECK(max_diff(r.gradients(), stored) <= 1e-10 * scale);
    CHECK(max_diff(r.input_gradient(), stored_input) <= 1e-10 * input_scale);
  }
  const vec dir = random(theta.size());
  ref.parameters() = along(theta, dir, h);
  const double up = ref.loss_and_gradient(data, labels, rwd::mode::stored);
  ref.parameters() = along(theta, dir, -h);
  const double down = ref.loss_and_gradient(data, labels, rwd::mode::stored);
  ref.parameters() = theta;
  CHECK((up - down) / (2 * h) == doctest::Approx(dot(stored, dir)).epsilon(1e-6));

  // the CPU executor and the CUDA functors: the same numbers as the reference; the CPU's peak = its plan
  for (rwd::mode m : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed}) {
    CAPTURE(rwd::to_string(m));
    rwd::cpu::model<double, Block> cpu(b, depth, m == rwd::mode::checkpointed ? segments : o, bindings);
    REQUIRE(cpu.parameters().size() == theta.size());
    std::copy(theta.begin(), theta.end(), cpu.parameters().begin());
    cpu.memory().reset_peak();
    CHECK(cpu.loss_and_gradient(data, labels, m) == doctest::Approx(loss).epsilon(1e-13));
    CHECK(cpu.memory().peak() == cpu.plan(m).total());
    CHECK(max_diff(held(cpu.gradients()), stored) <= 1e-10 * scale);
    CHECK(max_diff(held(cpu.input_gradient()), stored_input) <= 1e-10 * input_scale);
    reference::model<Block, cuda_functors::executor> gpu_arithmetic(b, depth, m == rwd::mode::checkpointed ? segments : o, bindings);
    gpu_arithmetic.parameters() = theta;
    CHECK(gpu_arithmetic.loss_and_gradient(data, labels, m) == doctest::Approx(loss).epsilon(1e-13));
    CHECK(max_diff(gpu_arithmetic.gradients(), stored) <= 1e-10 * scale);
    CHECK(max_diff(gpu_arithmetic.input_gradient(), stored_input) <= 1e-10 * input_scale);
  }
}

}  // namespace laws
