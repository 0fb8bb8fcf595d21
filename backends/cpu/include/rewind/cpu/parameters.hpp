// rewind cpu: what every CPU model holds of its parameters: one arena laid out by Layout (a stack's
// rwd::parameter_layout, a staged network's rwd::staged_layout), its gradients, the optimizer's
// state, the number of updates (the dropout keys' step count), the files they are saved to, and
// the team of threads its steps run on (threads.hpp), which its updates use too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/engine/layers/dropout.hpp>

#include "memory.hpp"
#include "optim.hpp"
#include "threads.hpp"

namespace rwd::cpu {

template <class T, class Layout>
class parameter_owner {
 public:
  std::span<T> parameters() { return params_; }
  std::span<const T> parameters() const { return params_; }
  std::span<T> gradients() { return grads_; }
  std::span<const T> gradients() const { return grads_; }

  /// One optimizer step on the parameters with the current gradients (sgd or adam settings), on
  /// as many threads as the last training step ran on.
  template <class Optimizer>
  void apply(const Optimizer& o) {
    step(o, std::span<T>(params_), std::span<const T>(grads_), optimizer_, std::max(1, team_.last()));
    ++updates_;
  }
  /// Threads the last training step ran on (threads.hpp: fewer than asked on a busy machine; 0
  /// before the first).
  int last_team() const { return team_.last(); }
  /// The dropout key of the next training step: the seed and the number of parameter updates so
  /// far, so that every evaluation between two updates (a step, its audit, a gradient check)
  /// draws the same masks, and each update's step new ones.
  std::uint64_t training_noise() const { return noise_key(seed_, updates_); }
  /// Forgets the optimizer's momentum and step count.
  void reset_optimizer() { optimizer_ = {}; }

  /// Writes the parameters to `path` atomically: a safetensors file where the name ends in
  /// .safetensors (tensors named after the network, readable by PyTorch and JAX), else rewind's
  /// parameter file (header, values, checksum).
  void save(const std::string& path) const { layout_.save(path, std::span<const T>(params_)); }
  /// Reads parameters written by save() for the same network and shapes (or a safetensors file
  /// with this network's tensor names and shapes); on any error the model is unchanged and the
  /// message names the cause.
  void load(const std::string& path) { params_ = layout_.template load<T>(path); }

 protected:
  parameter_owner(Layout layout, std::uint64_t seed)
      : layout_(std::move(layout)), seed_(seed), params_(layout_.total, T(0)), grads_(layout_.total, T(0)) {}
  /// A step refuses parameters that are not finite, by position. (x - x is 0 for every finite x
  /// and NaN otherwise: one vector pass finds whether to look.)
  void check_parameters() const {
    T probe = 0;
#pragma omp simd reduction(+ : probe)
    for (std::size_t i = 0; i < params_.size(); ++i) probe += params_[i] - params_[i];
    if (probe == T(0)) return;
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (!std::isfinite(params_[i])) throw error("rewind: parameter " + std::to_string(i) + " is not finite");
  }

  Layout layout_;
  std::uint64_t seed_;
  std::vector<T> params_;
  std::vector<T, aligned_allocator<T>> grads_;  // aligned: see aligned_allocator
  optimizer_state<T> optimizer_;
  std::uint64_t updates_ = 0;  // apply() calls: the step count of the dropout keys
  detail::team_choice team_;
};

}  // namespace rwd::cpu
