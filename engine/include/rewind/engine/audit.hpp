// rewind engine: the audit, for a model of any backend. It runs stored backprop and a mode m on
// the same weights and batch and compares every gradient the step produces, then measures the
// rewind's reconstruction error per layer: the audit that shows the budget's cliff instead of
// hiding it.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <rewind/engine.hpp>

namespace rwd {

/// The reconstructed input of every layer when `model` rewinds from a whole final state (its
/// rewind_each): entry l is layer l's, entry depth the final state itself.
template <class Model, class T = typename Model::scalar>
std::vector<std::vector<T>> rewind_trace(Model& model, const std::vector<T>& final_state) {
  std::vector<std::vector<T>> trace(model.depth() + 1);
  trace[model.depth()] = final_state;
  model.rewind_each(final_state, [&](std::size_t l, std::span<const T> state) { trace[l].assign(state.begin(), state.end()); });
  return trace;
}

/// The audit of `model` (a CPU or CUDA model: loss_and_gradient, gradients(), input_gradient(),
/// forward_trace() and rewind_each()) on one batch, mode m against mode::stored. The model's
/// gradients are mode m's afterwards.
template <class Model, class T = typename Model::scalar>
audit_report audit(Model& model, std::span<const T> batch, std::span<const int> labels, mode m) {
  audit_report r;
  r.loss = model.loss_and_gradient(batch, labels, mode::stored);
  const auto held = [](const auto& g) { return std::vector<T>(g.begin(), g.end()); };
  const std::vector<T> stored = held(model.gradients()), stored_input = held(model.input_gradient());
  model.loss_and_gradient(batch, labels, m);
  const std::vector<T> audited = held(model.gradients()), audited_input = held(model.input_gradient());
  r.gradients.push_back(agreement<T>("parameters", stored, audited));
  r.gradients.push_back(agreement<T>("input " + std::string(model.config().input), stored_input, audited_input));
  r.cosine = 1, r.max_rel_error = 0;
  for (const auto& g : r.gradients) {  // the worst of them; NaN (not finite) wins
    r.cosine = std::isnan(g.cosine) || std::isnan(r.cosine) ? std::numeric_limits<double>::quiet_NaN() : std::min(r.cosine, g.cosine);
    r.max_rel_error = std::max(r.max_rel_error, g.max_rel_error);
  }
  // reconstruction: every layer's input on the way up, compared on the way down
  const std::vector<std::vector<T>> inputs = model.forward_trace(batch);
  r.layer_error.assign(model.depth(), 0);
  model.rewind_each(inputs.back(), [&](std::size_t l, std::span<const T> now) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < now.size(); ++i) {
      num += std::pow(double(now[i]) - double(inputs[l][i]), 2);
      den += std::pow(double(inputs[l][i]), 2);
    }
    r.layer_error[l] = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  });
  return r;
}

}  // namespace rwd
