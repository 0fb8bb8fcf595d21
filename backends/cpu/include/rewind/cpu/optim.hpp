// rewind cpu: optimizers on the flat parameter arena.
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include <rewind/diagnostics.hpp>
#include <rewind/optim.hpp>

namespace rwd::cpu {

/// The optimizer's own state: one or two arenas the size of the parameters, and the step count.
template <class T>
struct optimizer_state {
  std::vector<T> first, second;
  long long steps = 0;
};

template <class T>
void step(const sgd& o, std::span<T> theta, std::span<const T> g, optimizer_state<T>& s) {
  if (!(o.lr > 0) || o.momentum < 0 || o.momentum >= 1) throw error("rewind: sgd needs lr > 0 and momentum in [0, 1)");
  if (s.first.size() != theta.size()) s.first.assign(theta.size(), T(0));
  const T lr = static_cast<T>(o.lr), mu = static_cast<T>(o.momentum), wd = static_cast<T>(o.weight_decay);
  for (std::size_t i = 0; i < theta.size(); ++i) {
    s.first[i] = mu * s.first[i] + g[i];
    theta[i] -= lr * (s.first[i] + wd * theta[i]);
  }
  ++s.steps;
}

template <class T>
void step(const adam& o, std::span<T> theta, std::span<const T> g, optimizer_state<T>& s) {
  if (!(o.lr > 0) || o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1 || !(o.eps > 0))
    throw error("rewind: adam needs lr > 0, beta1 and beta2 in [0, 1), eps > 0");
  if (s.first.size() != theta.size()) s.first.assign(theta.size(), T(0)), s.second.assign(theta.size(), T(0));
  ++s.steps;
  const double c1 = 1 - std::pow(o.beta1, static_cast<double>(s.steps));
  const double c2 = 1 - std::pow(o.beta2, static_cast<double>(s.steps));
  const T b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2);
  const T step_size = static_cast<T>(o.lr / c1), root_c2 = static_cast<T>(std::sqrt(c2));
  const T eps = static_cast<T>(o.eps), decay = static_cast<T>(o.lr * o.weight_decay);
  for (std::size_t i = 0; i < theta.size(); ++i) {
    s.first[i] = b1 * s.first[i] + (T(1) - b1) * g[i];
    s.second[i] = b2 * s.second[i] + (T(1) - b2) * g[i] * g[i];
    theta[i] -= step_size * s.first[i] / (std::sqrt(s.second[i]) / root_c2 + eps) + decay * theta[i];
  }
}

}  // namespace rwd::cpu
