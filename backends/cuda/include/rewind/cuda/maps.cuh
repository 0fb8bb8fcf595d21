// rewind cuda: learned maps on the GPU: the engine's map runner (rewind/engine/map_runner.hpp)
// over cuBLAS and the kernels of ops.hpp, with the CPU backend's buffer layout (rwd::map_layout).
#pragma once

#include <cstddef>

#include <rewind/engine/map_runner.hpp>

#include "kernels.cuh"

namespace rwd::cuda {

/// The map primitives (rwd::map_executor) on a cuBLAS handle and a stream.
template <class T>
struct map_ops {
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;

  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T beta, T* c) const {
    cuda::gemm<T>(blas, ta, tb, m, n, k, T(1), a, ta ? k : m, b, tb ? n : k, beta, c, m);
  }
  template <class Fn>
  void bias(T* y, const T* b, std::size_t rows, std::size_t cols) const {
    for_each(bias_activation_op<Fn, T>{y, b, rows}, rows * cols, stream);
  }
  template <class Fn>
  void activation(const T* x, T* y, std::size_t n) const {
    for_each(activation_op<Fn, T>{x, y}, n, stream);
  }
  void bias_gradient(const T* g, T* gb, std::size_t rows, std::size_t cols) const {
    for_each(bias_gradient_op<T>{g, gb, rows, cols}, rows, stream);
  }
  template <class Fn>
  void activation_backward(T* g, const T* y, T* copy, std::size_t n) const {
    for_each(activation_backward_op<Fn, T>{g, y, copy}, n, stream);
  }
  template <class Op>
  void each(const Op& op, std::size_t n) const {
    for_each(op, n, stream);
  }
};

/// Runs map M forward and backward over caller-provided device buffers.
template <class M, class T>
using map_runner = rwd::map_runner<M, T, map_ops<T>>;

}  // namespace rwd::cuda
