// rewind cuda: the kernels. One grid-stride kernel runs any functor of ops.hpp (one fused
// elementwise pass per update, inverse, adjoint step, epilogue or optimizer step); dense maps go
// through cuBLAS (gemm below).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>

#include "ops.hpp"
#include "runtime.cuh"

namespace rwd::cuda {

template <class F>
__global__ void for_each_kernel(F f, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) f(i);
}

/// Runs f(i) for every i in [0, n) on the stream.
template <class F>
void for_each(const F& f, std::size_t n, cudaStream_t s) {
  static_assert(std::is_trivially_copyable_v<F>, "rewind: a kernel's functor is copied to the device byte for byte");
  if (n == 0) return;
  constexpr unsigned threads = 256;
  const std::size_t blocks = (n + threads - 1) / threads;
  for_each_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), threads, 0, s>>>(f, n);
  REWIND_CUDA(cudaGetLastError());
}

/// C = alpha * op(A) op(B) + beta * C, column-major (Eigen's layout), float or double.
template <class T>
void gemm(cublasHandle_t h, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* A, std::size_t lda,
          const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  const auto opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto i = [](std::size_t v) {  // cuBLAS takes int sizes
    if (v > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw error("rewind: a GEMM dimension of " + std::to_string(v) + " is past cuBLAS's int range");
    return static_cast<int>(v);
  };
  if constexpr (std::is_same_v<T, float>)
    REWIND_CUDA(cublasSgemm(h, opa, opb, i(m), i(n), i(k), &alpha, A, i(lda), B, i(ldb), &beta, C, i(ldc)));
  else
    REWIND_CUDA(cublasDgemm(h, opa, opb, i(m), i(n), i(k), &alpha, A, i(lda), B, i(ldb), &beta, C, i(ldc)));
}

}  // namespace rwd::cuda
