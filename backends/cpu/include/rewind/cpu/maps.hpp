// rewind cpu: learned maps on the CPU. A dense layer is one GEMM (Eigen); when an activation
// follows it, bias and activation are fused into one pass over the GEMM's output, and only the
// activation's output is kept (every activation's derivative is a function of its output).
//
// Buffers of one call of map M (per sample; times the batch size):
//   stage k:  out_k scalars for every layer k, except a dense layer followed by an activation
//             (its pre-activation is never stored)
// Backward with output cotangent g (in a buffer of the map's output width):
//   scratch:  in_k scalars for every dense layer but the first (the cotangent of its input)
//   result:   the first layer's input cotangent, in the caller's vjp buffer (state width)
#pragma once

#include <Eigen/Core>
#include <array>
#include <cstddef>

#include <rewind/layout.hpp>
#include <rewind/map.hpp>

#include "lower.hpp"

namespace rwd::cpu {

/// Runs map M forward and backward over caller-provided buffers.
template <class M, class T>
struct map_runner {
  using L = map_layout<M>;
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  std::size_t width, batch;

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
        Eigen::Map<const matrix> W(params + off, s.out, s.in), X(x, s.in, batch);
        Eigen::Map<const vector> b(params + off + s.out * s.in, s.out);
        Eigen::Map<matrix> Y(out[k], s.out, batch);
        Y.noalias() = W * X;  // then bias, and the activation when one follows, in one pass
        if (!L::fused(k)) Y.colwise() += b;
        off += s.out * s.in + s.out;
      } else if (k > 0 && L::fused(k - 1)) {
        const auto& d = shape[k - 1];
        Eigen::Map<matrix> Y(out[k], s.out, batch);
        Eigen::Map<const vector> b(params + off - d.out, d.out);
        Y.array() = detail::apply_fn<typename Layer::function, T>((Y.colwise() + b).array());
      } else {
        Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(out[k], s.out * batch) =
            detail::apply_fn<typename Layer::function, T>(detail::array_view<T>(x, s.out * batch));
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
        Eigen::Map<const matrix> W(params + offsets[k], s.out, s.in), X(x, s.in, batch), G(g, s.out, batch);
        Eigen::Map<matrix> gW(grads + offsets[k], s.out, s.in);
        Eigen::Map<vector> gb(grads + offsets[k] + s.out * s.in, s.out);
        gW.noalias() += G * X.transpose();  // dW += g u^T
        gb += G.rowwise().sum();             // db += sum over the batch of g
        T* next = scratch_of[k];  // the first dense layer writes straight into vjp
        Eigen::Map<matrix>(next, s.in, batch).noalias() = W.transpose() * G;  // du = W^T g
        g = next;
      } else {  // g *= fn'(y), from the activation's output y, as the dsl states it for fn
        using Fn = typename Layer::function;
        Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> G(g, s.out * batch);
        detail::array_view<T> Y(out[k], s.out * batch);
        G *= Y.unaryExpr([](T y) { return Fn::template derivative_from_output<T>(y); });
        if (k == 0) Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(vjp, s.out * batch) = G;
      }
    });
  }
};

}  // namespace rwd::cpu
