// rewind cuda: the elementwise operations of the GPU engine, as plain-data functors with a
// __host__ __device__ call operator over one element. The kernels run them on the device
// (kernels.cuh); the tests run the very same functors on the host, against the CPU backend, on
// machines without a GPU. This header needs no CUDA: g++ compiles it too.
//
// The update functors are instantiated from the expression types of the dsl (rwd::evaluate): one
// fused pass per update, per inverse and per adjoint step, whatever the block.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include <rewind/functions.hpp>
#include <rewind/pointwise.hpp>

namespace rwd::cuda {

/// out[i] = E at element i (an update's right-hand side, a map call's argument, an adjoint step).
template <class Layout, class E, class T>
struct assign_op {
  typename Layout::template frame<T> f;
  T* out;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const { out[i] = evaluate<Layout, E, T>(f, i); }
};

/// out[i] += E at element i (an adjoint's accumulation into a cotangent).
template <class Layout, class E, class T>
struct accumulate_op {
  typename Layout::template frame<T> f;
  T* out;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const { out[i] += evaluate<Layout, E, T>(f, i); }
};

/// ++*counter, atomically on the device.
REWIND_HOST_DEVICE inline void count_one(unsigned* counter) {
#ifdef __CUDA_ARCH__
  atomicAdd(counter, 1u);
#else
  ++*counter;
#endif
}

/// target[i] = Rhs at element i (update U's right-hand side or its inverse's) for an alpha that
/// reads the data: alpha is evaluated first and counted in *bad where the rewind could not divide
/// by it or it leaves the range its budget rests on (the engine reads the count at its next
/// synchronisation). The target may be one of Rhs's operands: each element reads only itself.
template <class Layout, class U, class Rhs, class T>
struct checked_assign_op {
  typename Layout::template frame<T> f;
  T* target;
  unsigned* bad;
  rwd::alpha_bounds<T> bounds;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    if (!bounds.accepts(evaluate<Layout, typename U::alpha, T>(f, i))) count_one(bad);
    target[i] = evaluate<Layout, Rhs, T>(f, i);
  }
};

/// y <- fn(y + b[row]) (Fn: a dsl function), or y <- y + b[row] (Fn = void).
template <class Fn, class T>
struct bias_activation_op {
  T* y;
  const T* b;
  std::size_t rows;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    const T u = y[i] + b[i % rows];
    if constexpr (std::is_void_v<Fn>) y[i] = u;
    else y[i] = Fn::value(u);
  }
};

/// out <- fn(in) (an activation that no dense layer precedes).
template <class Fn, class T>
struct activation_op {
  const T* in;
  T* out;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const { out[i] = Fn::value(in[i]); }
};

/// g <- g * fn'(u), from the activation's output y = fn(u); `copy`, when set, receives the result.
template <class Fn, class T>
struct activation_backward_op {
  T* g;
  const T* y;
  T* copy;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    g[i] *= Fn::derivative_from_output(y[i]);
    if (copy) copy[i] = g[i];
  }
};

/// gb[r] += sum over the batch of g[r, c] (one thread per row, a fixed order: deterministic).
template <class T>
struct bias_gradient_op {
  const T* g;
  T* gb;
  std::size_t rows, batch;
  REWIND_HOST_DEVICE void operator()(std::size_t r) const {
    T sum = 0;
    for (std::size_t c = 0; c < batch; ++c) sum += g[r + c * rows];
    gb[r] += sum;
  }
};

/// Softmax cross-entropy per sample (one thread per column of the logits z, classes x batch):
/// loss[c] = -log p[label], and z becomes dloss/dz = (p - onehot) / batch.
template <class T>
struct softmax_xent_op {
  T* z;
  const int* labels;
  double* loss;
  std::size_t classes, batch;
  REWIND_HOST_DEVICE void operator()(std::size_t c) const {
    using std::exp;
    using std::log;
    T* col = z + c * classes;
    T top = col[0];
    for (std::size_t k = 1; k < classes; ++k) top = col[k] > top ? col[k] : top;
    T sum = 0;
    for (std::size_t k = 0; k < classes; ++k) {
      col[k] = exp(col[k] - top);
      sum += col[k];
    }
    const int y = labels[c];
    const double p = static_cast<double>(col[y] / sum);
    loss[c] = -log(p > 1e-300 ? p : 1e-300);
    for (std::size_t k = 0; k < classes; ++k) col[k] = (col[k] / sum - (static_cast<int>(k) == y ? T(1) : T(0))) / static_cast<T>(batch);
  }
};

/// flag <- 1 where a value is not finite.
template <class T>
struct nonfinite_op {
  const T* x;
  int* flag;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    using std::isfinite;
    if (!isfinite(x[i])) *flag = 1;
  }
};

}  // namespace rwd::cuda
