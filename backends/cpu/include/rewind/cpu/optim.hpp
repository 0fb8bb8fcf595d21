// rewind cpu: optimizers on the flat parameter arena.
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include <rewind/diagnostics.hpp>
#include <rewind/engine/optimizer_step.hpp>
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
  const auto update = sgd_step<T>::of(o, theta.data(), g.data(), s.first.data());
  for (std::size_t i = 0; i < theta.size(); ++i) update(i);
  ++s.steps;
}

template <class T>
void step(const adam& o, std::span<T> theta, std::span<const T> g, optimizer_state<T>& s) {
  check(o);
  s.begin(optimizer_kind::adam, theta.size(), 2);
  ++s.steps;
  const auto update = adam_step<T>::of(o, s.steps, theta.data(), g.data(), s.first.data(), s.second.data());
  for (std::size_t i = 0; i < theta.size(); ++i) update(i);
}

}  // namespace rwd::cpu
