// The sequence of calls every bridge makes of its engine, written once: a step, forward and
// rewind, predictions, one SGD step, a second gradient and one Adam step (a switch of optimizer:
// Adam must start afresh, as on the CPU).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <rewind/optim.hpp>

#include "../dsl/blocks.hpp"
#include "bridge.hpp"

namespace gpu_bridge {

/// Calls f with the test block of that name (tests/dsl/blocks.hpp); the names bridge::run knows.
template <class F>
decltype(auto) with_block(const std::string& block, F&& f) {
  namespace tb = test_blocks;
  if (block == "momentum") return f(tb::momentum);
  if (block == "leapfrog") return f(tb::leapfrog);
  if (block == "coupling") return f(tb::coupling);
  if (block == "three") return f(tb::three);
  if (block == "runtime_mu") return f(tb::runtime_mu);
  if (block == "affine") return f(tb::affine);
  throw rwd::error("rewind: the bridge knows no block '" + block + "'");
}

inline constexpr rwd::sgd sgd_step{.lr = 0.05, .momentum = 0.9};
inline constexpr rwd::adam adam_step{.lr = 0.01};

template <class Range>
std::vector<double> widen(const Range& r) {
  return {r.begin(), r.end()};
}

/// Runs the sequence on a model whose parameters are already set; peak and plan of the first step.
template <class Model, class S = typename Model::scalar>
step_result record(Model& model, const std::vector<S>& batch, const std::vector<int>& labels, rwd::mode m) {
  step_result r;
  model.memory().reset_peak();
  r.loss = model.loss_and_gradient(batch, labels, m);
  r.peak = model.memory().peak();
  r.plan = model.plan(m).total();
  r.gradients = widen(model.gradients());
  r.input_gradient = widen(model.input_gradient());
  const auto state = model.forward(batch);
  for (const auto& s : state) r.final_state.insert(r.final_state.end(), s.begin(), s.end());
  for (const auto& s : model.rewind(state)) r.rewound.insert(r.rewound.end(), s.begin(), s.end());
  r.predicted = model.predict(batch);
  model.apply(sgd_step);
  r.after_sgd = widen(model.parameters());
  model.loss_and_gradient(batch, labels, m);
  r.adam_gradients = widen(model.gradients());
  model.apply(adam_step);
  r.after_adam = widen(model.parameters());
  return r;
}

}  // namespace gpu_bridge
