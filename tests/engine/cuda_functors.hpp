// The CUDA executor's arithmetic on the host: a step executor whose every elementwise pass is
// one of the functors the GPU's kernels run (rewind/cuda/ops.hpp, compiled here by g++), applied
// element by element, with the GEMMs in the reference's loops. Through the engine it is the GPU
// model's algorithm and arithmetic without cuBLAS and streams, so the law tests hold the
// functors to the reference on every machine.
#pragma once

#include <algorithm>
#include <cstddef>

#include <rewind/cuda/ops.hpp>
#include <rewind/engine/step.hpp>

#include "reference.hpp"

namespace cuda_functors {

template <class F>
void run(const F& f, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) f(i);
}

/// rwd::map_executor with the GPU's epilogue functors.
struct map_ops {
  using T = double;
  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T beta, T* c) const {
    reference::loop_ops{}.gemm(ta, tb, m, n, k, a, b, beta, c);
  }
  template <class Fn>
  void bias(T* y, const T* b, std::size_t rows, std::size_t cols) const {
    run(rwd::cuda::bias_activation_op<Fn, T>{y, b, rows}, rows * cols);
  }
  template <class Fn>
  void activation(const T* x, T* y, std::size_t n) const {
    run(rwd::cuda::activation_op<Fn, T>{x, y}, n);
  }
  void bias_gradient(const T* g, T* gb, std::size_t rows, std::size_t cols) const {
    run(rwd::cuda::bias_gradient_op<T>{g, gb, rows, cols}, rows);
  }
  template <class Fn>
  void activation_backward(T* g, const T* y, T* copy, std::size_t n) const {
    run(rwd::cuda::activation_backward_op<Fn, T>{g, y, copy}, n);
  }
  template <class Op>
  void each(const Op& op, std::size_t n) const {
    run(op, n);
  }
};

/// The step executor of rwd::cuda::executor, element by element on the host.
struct executor {
  using T = double;
  const rwd::env* bindings = nullptr;

  map_ops maps() const { return {}; }
  template <class Layout, class E, class Frame>
  void assign(const Frame& f, T* out, std::size_t n) const {
    run(rwd::cuda::assign_op<Layout, E, T>{f, out}, n);
  }
  template <class Layout, class E, class Frame>
  void accumulate(const Frame& f, T* out, std::size_t n) const {
    run(rwd::cuda::accumulate_op<Layout, E, T>{f, out}, n);
  }
  void copy(T* dst, const T* src, std::size_t n) const { std::copy_n(src, n, dst); }
  template <class Layout, class U, class Rhs, class Frame>
  void update(const Frame& f, T* target, std::size_t n, rwd::update_site at) const {
    if constexpr (rwd::coefficient_kind_of<U>() == rwd::coefficient_kind::data_dependent) {
      unsigned bad = 0;
      run(rwd::cuda::checked_assign_op<Layout, U, Rhs, T>{f, target, &bad, rwd::alpha_bounds_of<T, U>(*bindings)}, n);
      if (bad)
        throw rwd::error(rwd::e002_elements(U::text(), rwd::to_string(rwd::range_of(typename U::alpha{}, *bindings)), at.layer, bad, n));
    } else {
      run(rwd::cuda::assign_op<Layout, Rhs, T>{f, target}, n);
    }
  }
  void softmax_cross_entropy(T* z, const int* labels, double* loss, std::size_t classes, std::size_t count, std::size_t batch) const {
    run(rwd::cuda::softmax_xent_op<T>{z, labels, loss, classes, batch}, count);
  }
};

}  // namespace cuda_functors
