// rewind cpu: optimizers on the flat parameter arena.
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include <rewind/diagnostics.hpp>
#include <rewind/optim.hpp>

namespace rwd::cpu {

/// The optimizer's own state: one or two arenas the size of the parameters, the step count, and
/// the optimizer they belong to (another optimizer starts afresh: see rwd::optimizer_kind).
template <class T>
struct optimizer_state {
  std::vector<T> first, second;
  long long steps = 0;
  optimizer_kind kind = optimizer_kind::none;

  /// Zero moments and step 0 for optimizer k with `moments` arenas, unless the state is already k's.
  void begin(optimizer_kind k, std::size_t n, int moments) {
    if (kind == k && first.size() == n) return;
    first.assign(n, T(0));
    second.assign(moments == 2 ? n : 0, T(0));
    steps = 0;
    kind = k;
  }
};

template <class T>
void step(const sgd& o, std::span<T> theta, std::span<const T> g, optimizer_state<T>& s) {
  check(o);
  s.begin(optimizer_kind::sgd, theta.size(), 1);
  const T lr = static_cast<T>(o.lr), mu = static_cast<T>(o.momentum), wd = static_cast<T>(o.weight_decay);
  for (std::size_t i = 0; i < theta.size(); ++i) {
    s.first[i] = mu * s.first[i] + g[i];
    theta[i] -= lr * (s.first[i] + wd * theta[i]);
  }
  ++s.steps;
}

template <class T>
void step(const adam& o, std::span<T> theta, std::span<const T> g, optimizer_state<T>& s) {
  check(o);
  s.begin(optimizer_kind::adam, theta.size(), 2);
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
