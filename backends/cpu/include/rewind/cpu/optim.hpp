// rewind cpu: optimizers on the flat parameter arena, on the step's threads (each parameter is
// updated alone, so the result does not depend on how many).
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

namespace detail {
/// update(i) for every i < n, in vectors, on `threads` threads where n is large enough to pay for
/// them (a parameter's update reads and writes its own elements only). Each thread runs its own
/// copy of the functor: through a reference, GCC reads its array pointers back after every store
/// (a store might have written them), and makes the loop scalar on one thread and gathers and
/// scatters on two.
template <class Update>
void for_each_parameter(std::size_t n, int threads, const Update& update) {
  Update each = update;
#pragma omp parallel for simd num_threads(threads) schedule(static) firstprivate(each) if (threads > 1 && n >= (std::size_t{1} << 16))
  for (std::size_t i = 0; i < n; ++i) each(i);
}
}  // namespace detail

template <class T>
void step(const sgd& o, std::span<T> theta, std::span<const T> g, optimizer_state<T>& s, int threads = 1) {
  check(o);
  s.begin(optimizer_kind::sgd, theta.size(), 1);
  detail::for_each_parameter(theta.size(), threads, sgd_step<T>::of(o, theta.data(), g.data(), s.first.data()));
  ++s.steps;
}

template <class T>
void step(const adam& o, std::span<T> theta, std::span<const T> g, optimizer_state<T>& s, int threads = 1) {
  check(o);
  s.begin(optimizer_kind::adam, theta.size(), 2);
  ++s.steps;
  detail::for_each_parameter(theta.size(), threads, adam_step<T>::of(o, s.steps, theta.data(), g.data(), s.first.data(), s.second.data()));
}

}  // namespace rwd::cpu
