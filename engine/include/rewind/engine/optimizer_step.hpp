// rewind engine: the optimizers' update of one parameter, for every backend: trivially copyable
// functors that a CPU loop and a CUDA kernel run alike over the flat parameter arena. Their
// settings and checks are rwd::sgd and rwd::adam (rewind/optim.hpp).
#pragma once

#include <cmath>
#include <cstddef>

#include <rewind/config.hpp>
#include <rewind/optim.hpp>

namespace rwd {

/// SGD with heavy-ball momentum and decoupled weight decay, element i:
///   u <- momentum*u + g;  theta <- theta - lr*(u + weight_decay*theta)
template <class T>
struct sgd_step {
  T* theta;
  const T* g;
  T* velocity;
  T lr, mu, wd;
  static sgd_step of(const sgd& o, T* theta, const T* g, T* velocity) {
    return {theta, g, velocity, static_cast<T>(o.lr), static_cast<T>(o.momentum), static_cast<T>(o.weight_decay)};
  }
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    velocity[i] = mu * velocity[i] + g[i];
    theta[i] -= lr * (velocity[i] + wd * theta[i]);
  }
};

/// Adam with decoupled weight decay, element i, at optimizer step `step` (counted from 1): the
/// bias corrections are folded into the step size and the root of the second moment's.
template <class T>
struct adam_step {
  T* theta;
  const T* g;
  T *first, *second;
  T b1, b2, step_size, root_c2, eps, decay;
  static adam_step of(const adam& o, long long step, T* theta, const T* g, T* first, T* second) {
    const double c1 = 1 - std::pow(o.beta1, static_cast<double>(step)), c2 = 1 - std::pow(o.beta2, static_cast<double>(step));
    return {theta,
            g,
            first,
            second,
            static_cast<T>(o.beta1),
            static_cast<T>(o.beta2),
            static_cast<T>(o.lr / c1),
            static_cast<T>(std::sqrt(c2)),
            static_cast<T>(o.eps),
            static_cast<T>(o.lr * o.weight_decay)};
  }
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    using std::sqrt;
    first[i] = b1 * first[i] + (T(1) - b1) * g[i];
    second[i] = b2 * second[i] + (T(1) - b2) * g[i] * g[i];
    theta[i] -= step_size * first[i] / (sqrt(second[i]) / root_c2 + eps) + decay * theta[i];
  }
};

}  // namespace rwd
