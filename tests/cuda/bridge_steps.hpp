// What every bridge does with its engine, written once: the sequence of calls (a step, forward
// and rewind, predictions, one SGD step, a second gradient and one Adam step: a switch of
// optimizer, so Adam must start afresh, as on the CPU), and the bad input every engine refuses.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <rewind/optim.hpp>

#include "../dsl/blocks.hpp"
#include "bridge.hpp"

namespace gpu_bridge {

/// Calls f with the test block of that name (tests/dsl/blocks.hpp); the names bridge::run knows
/// ("conv": conv_momentum, whose options need a state shape).
template <class F>
decltype(auto) with_block(const std::string& block, F&& f) {
  namespace tb = test_blocks;
  if (block == "momentum") return f(tb::momentum);
  if (block == "leapfrog") return f(tb::leapfrog);
  if (block == "coupling") return f(tb::coupling);
  if (block == "three") return f(tb::three);
  if (block == "runtime_mu") return f(tb::runtime_mu);
  if (block == "affine") return f(tb::affine);
  if (block == "conv") return f(tb::conv_momentum);
  throw rwd::error("rewind: the bridge knows no block '" + block + "'");
}

/// Calls f(stem, transition, block) for the staged network of that name (bridge::run_staged):
/// the transition is rwd::squeeze_boundary{} for "squeeze".
template <class F>
decltype(auto) with_staged(const std::string& net, F&& f) {
  namespace tb = test_blocks;
  if (net == "squeeze") return f(tb::stem, rwd::squeeze_boundary{}, tb::staged_momentum);
  if (net == "pool") return f(tb::stem, tb::pool, tb::staged_momentum);
  throw rwd::error("rewind: the bridge knows no staged network '" + net + "'");
}

inline constexpr rwd::sgd sgd_step{.lr = 0.05, .momentum = 0.9};
inline constexpr rwd::adam adam_step{.lr = 0.01};

template <class Range>
std::vector<double> widen(const Range& r) {
  return {r.begin(), r.end()};
}

/// Runs the sequence on a model whose parameters are already set; peak and plan of the first step.
/// A staged model has no input gradient, forward state or rewind: those stay empty.
template <class Model, class S = typename Model::scalar>
step_result record(Model& model, const std::vector<S>& batch, const std::vector<int>& labels, rwd::mode m) {
  step_result r;
  model.memory().reset_peak();
  r.loss = model.loss_and_gradient(batch, labels, m);
  r.peak = model.memory().peak();
  r.plan = model.plan(m).total();
  r.gradients = widen(model.gradients());
  if constexpr (requires { model.rewind(model.forward(batch)); }) {
    r.input_gradient = widen(model.input_gradient());
    const auto state = model.forward(batch);
    for (const auto& s : state) r.final_state.insert(r.final_state.end(), s.begin(), s.end());
    for (const auto& s : model.rewind(state)) r.rewound.insert(r.rewound.end(), s.begin(), s.end());
  }
  r.predicted = model.predict(batch);
  model.apply(sgd_step);
  r.after_sgd = widen(model.parameters());
  model.loss_and_gradient(batch, labels, m);
  r.adam_gradients = widen(model.gradients());
  model.apply(adam_step);
  r.after_adam = widen(model.parameters());
  return r;
}

/// What an engine said to each attempt, one line each: its rwd::error's message, or "(accepted)".
class refusal_log {
 public:
  template <class F>
  void expect(F&& attempt) {
    try {
      attempt();
      text_ += "(accepted)\n";
    } catch (const rwd::error& e) {
      text_ += std::string(e.what()) + "\n";
    }
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

/// What every engine refuses, on float models made by make(depth) (width 8, batch 3, 3 classes):
/// a batch of the wrong size, a non-finite batch value, a label out of range, Adam with beta2 = 1,
/// a step after spoil(model) made a parameter NaN, and reversible mode past the budget.
template <class Make, class Spoil>
void common_refusals(refusal_log& log, Make make, Spoil spoil) {
  auto m = make(4);
  const std::vector<float> good(24, 0.5f);
  const std::vector<int> labels{0, 1, 2};
  log.expect([&] { m.loss_and_gradient(std::vector<float>(23, 0.f), labels, rwd::mode::reversible); });
  std::vector<float> nan = good;
  nan[5] = std::nanf("");
  log.expect([&] { m.loss_and_gradient(nan, labels, rwd::mode::reversible); });
  log.expect([&] { m.loss_and_gradient(good, std::vector<int>{0, 1, 3}, rwd::mode::reversible); });
  log.expect([&] { m.apply(rwd::adam{.lr = 0.01, .beta2 = 1.0}); });
  m.loss_and_gradient(good, labels, rwd::mode::reversible);  // a good step, then a parameter spoilt
  spoil(m);
  log.expect([&] { m.loss_and_gradient(good, labels, rwd::mode::stored); });
  auto deep = make(200);
  log.expect([&] { deep.loss_and_gradient(good, labels, rwd::mode::reversible); });
}

/// The options of models of test_blocks::gated: v takes the input, so the input chooses alpha.
/// Its budget is unknown (alpha = exp(v) may be zero), so mode::reversible runs it only when lossy.
inline const rwd::options gated_options{.width = 6, .batch = 4, .classes = 3, .seed = 3, .input = "v", .output = "x", .lossy = true};

/// An alpha that reads the data and is zero at one element (the input -200 makes exp(v) zero in
/// float), on a model of test_blocks::gated made by make(options): refused in every float mode;
/// and without options.lossy, mode::reversible refused for the unknown budget (E014).
template <class Make>
void alpha_refusals(refusal_log& log, Make make) {
  auto m = make(gated_options);
  std::vector<float> batch(24, 0.25f);
  batch[5] = -200.f;
  for (auto mode : {rwd::mode::stored, rwd::mode::reversible, rwd::mode::checkpointed})
    log.expect([&] { m.loss_and_gradient(batch, std::vector<int>{0, 1, 2, 0}, mode); });
  rwd::options strict = gated_options;
  strict.lossy = false;
  auto s = make(strict);
  log.expect([&] { s.loss_and_gradient(std::vector<float>(24, 0.25f), std::vector<int>{0, 1, 2, 0}, rwd::mode::reversible); });
}

/// What every engine refuses of a staged network made by make(stages, options) (float, runtime
/// mu): options whose input width is not the network's, and the exact mode.
template <class Make>
void staged_refusals(refusal_log& log, Make make) {
  const rwd::stages net{{1, 4, 4}, {1, 1}};
  log.expect([&] { make(net, rwd::options{.width = 15, .batch = 2, .classes = 3}); });
  auto m = make(net, rwd::options{.batch = 2, .classes = 3});
  log.expect([&] { m.loss_and_gradient(std::vector<float>(32, 0.5f), std::vector<int>{0, 1}, rwd::mode::exact); });
}

}  // namespace gpu_bridge
