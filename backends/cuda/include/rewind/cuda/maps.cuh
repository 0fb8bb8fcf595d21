// rewind cuda: learned maps on the GPU, with the CPU backend's buffer layout (rwd::map_layout):
// a dense layer is one cuBLAS GEMM; when an activation follows it, bias and activation are one
// pass over the GEMM's output and only the activation's output is kept.
#pragma once

#include <array>
#include <cstddef>

#include <rewind/layout.hpp>
#include <rewind/map.hpp>

#include "kernels.cuh"

namespace rwd::cuda {

/// Runs map M forward and backward over caller-provided device buffers.
template <class M, class T>
struct map_runner {
  using L = map_layout<M>;
  std::size_t width, batch;
  cublasHandle_t blas;
  cudaStream_t stream;

  /// Output k's buffer: stages laid out one after the other from `stages`.
  std::array<T*, L::depth> outputs(T* stages) const { return L::outputs(stages, width, batch); }


  /// y = M(in); returns the output buffer (inside stages).
  const T* forward(const T* params, const T* in, T* stages) const {
    const auto shape = M::shape(width);
    const auto out = outputs(stages);
    const T* x = in;
    std::size_t k = 0, off = 0;
    hana::for_each(M::layers(), [&](auto layer) {
      using Layer = decltype(layer);
      const auto& s = shape[k];
      if constexpr (rwd::detail::is_dense<Layer>) {
        gemm<T>(blas, false, false, s.out, batch, s.in, T(1), params + off, s.out, x, s.in, T(0), out[k], s.out);
        if (!L::fused(k)) for_each(bias_activation_op<void, T>{out[k], params + off + s.out * s.in, s.out}, s.out * batch, stream);
        off += s.out * s.in + s.out;
      } else if (k > 0 && L::fused(k - 1)) {
        const auto& d = shape[k - 1];
        for_each(bias_activation_op<typename Layer::function, T>{out[k], params + off - d.out, d.out}, s.out * batch, stream);
      } else {
        for_each(activation_op<typename Layer::function, T>{x, out[k]}, s.out * batch, stream);
      }
      x = out[k];
      ++k;
    });
    return out[L::depth - 1];
  }

  /// Backward from the output cotangent g (overwritten): dtheta accumulates into grads, the input
  /// cotangent lands in vjp.
  void backward(const T* params, T* grads, const T* in, T* stages, T* g, T* scratch, T* vjp) const {
    const auto shape = M::shape(width);
    const auto out = outputs(stages);
    const auto offsets = L::offsets(width);
    const auto scratch_of = L::cotangent_targets(scratch, vjp, width, batch);
    std::size_t k = L::depth;
    hana::for_each(hana::reverse(M::layers()), [&](auto layer) {
      using Layer = decltype(layer);
      --k;
      const auto& s = shape[k];
      if constexpr (rwd::detail::is_dense<Layer>) {
        const T* x = k == 0 ? in : out[k - 1];
        T* gW = grads + offsets[k];
        gemm<T>(blas, false, true, s.out, s.in, batch, T(1), g, s.out, x, s.in, T(1), gW, s.out);  // dW += g u^T
        for_each(bias_gradient_op<T>{g, gW + s.out * s.in, s.out, batch}, s.out, stream);        // db += sum g
        T* next = scratch_of[k];
        gemm<T>(blas, true, false, s.in, batch, s.out, T(1), params + offsets[k], s.out, g, s.out, T(0), next, s.in);  // du = W^T g
        g = next;
      } else {  // g *= fn'(y), from the activation's output y
        for_each(activation_backward_op<typename Layer::function, T>{g, out[k], k == 0 ? vjp : nullptr}, s.out * batch, stream);
      }
    });
  }
};

}  // namespace rwd::cuda
