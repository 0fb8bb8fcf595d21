// rewind engine: the dense layer y = W u + b (W: out x in, column-major, then b), one GEMM each
// way. When an activation follows, the activation's rule adds the bias in its own pass over the
// GEMM's output (rwd::map_layout::fused), and only the activation's output is kept; else an
// executor with gemm_bias adds it in the GEMM.
#pragma once

#include "rule.hpp"

namespace rwd {

template <std::size_t N>
struct layer_rule<dense_layer<N>> {
  static constexpr layer_buffers buffers{.hands_bias_to_next = true, .own_input_cotangent = true};
  /// Glorot-uniform weights, zero biases.
  template <class T, class Glorot>
  static void initialise(T* params, const layer_shape& s, double scale, Glorot& glorot) {
    glorot(params, s.out, s.in, scale);
  }
  static constexpr layer_bias bias(const layer_shape& s) { return {s.out * s.in, s.out}; }
  /// torch.nn.Linear's names and shapes.
  static constexpr std::array<layer_tensor, 2> tensors(const layer_shape& s) {
    return {{{"weight", {s.out, s.in}, 2, 0, {1, s.out}}, {"bias", {s.out}, 1, s.out * s.in, {}}}};  // W held column-major
  }
  template <class T, class Exec>
  static void forward(const Exec& e, const layer_forward<T>& l) {
    const auto& s = l.shape;
    if constexpr (requires { e.gemm_bias(s.out, l.batch, s.in, l.params, l.x, l.params, l.y); }) {
      if (!l.into_next) return e.gemm_bias(s.out, l.batch, s.in, l.params, l.x, l.params + s.out * s.in, l.y);  // y = W u + b
    }
    e.gemm(false, false, s.out, l.batch, s.in, l.params, l.x, T(0), l.y);  // y = W u
    if (!l.into_next) e.template bias<void>(l.y, l.params + s.out * s.in, s.out, l.batch);
  }
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    const auto& s = l.shape;
    e.gemm(false, true, s.out, s.in, l.batch, l.g, l.x, T(1), l.grads);    // dW += g u^T
    e.bias_gradient(l.g, l.grads + s.out * s.in, s.out, l.batch);          // db += sum over the batch of g
    e.gemm(true, false, s.in, l.batch, s.out, l.params, l.g, T(0), l.dx);  // du = W^T g
    return l.dx;
  }
};

}  // namespace rwd
