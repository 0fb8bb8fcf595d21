// rewind engine: the convolution y = W * u + b (K x K, stride 1, same padding), as one GEMM of
// the weights with the input's patch matrix (im2col) each way. A 1x1 convolution's patch matrix
// is its input itself (channels-last: c x positions), so it needs no workspace. The weights are
// held in the patch order (out, K, K, in), row-major: W^T as a column-major (K K in) x out
// matrix; files name and shape them as torch.nn.Conv2d does, (out, in, K, K). Like a dense
// layer, it hands its bias to an activation after it.
#pragma once

#include <cmath>

#include "image_ops.hpp"
#include "rule.hpp"

namespace rwd {

template <std::size_t N, std::size_t K>
struct layer_rule<conv_layer<N, K>> {
  static constexpr layer_buffers buffers{.hands_bias_to_next = true, .own_input_cotangent = true};
  /// The patch matrix of one sample (and, in the backward pass, its cotangent in the same place).
  static constexpr std::size_t workspace(const layer_shape& s) { return K == 1 ? 0 : s.input.c * K * K * s.input.positions(); }
  static constexpr layer_bias bias(const layer_shape& s) { return {patch(s).rows() * s.output.c, s.output.c}; }
  /// Glorot-uniform over fan in (in K K) and fan out (out K K), zero biases: glorot draws
  /// out K x in K values with sqrt(6 / ((out + in) K)), so the scale takes 1/sqrt(K) more.
  template <class T, class Glorot>
  static void initialise(T* params, const layer_shape& s, double scale, Glorot& glorot) {
    glorot(params, s.output.c * K, s.input.c * K, scale / std::sqrt(static_cast<double>(K)));
  }
  /// torch.nn.Conv2d's names and shapes; the weight (out, in, ky, kx) held as (out, ky, kx, in).
  static constexpr std::array<layer_tensor, 2> tensors(const layer_shape& s) {
    const std::size_t in = s.input.c;
    return {{{"weight", {s.output.c, in, K, K}, 4, 0, {K * K * in, 1, K * in, in}}, {"bias", {s.output.c}, 1, bias(s).offset, {}}}};
  }
  template <class T, class Exec>
  static void forward(const Exec& e, const layer_forward<T>& l) {
    const auto g = patch(l.shape);
    const std::size_t columns = l.shape.input.positions() * l.batch;
    const T* cols = K == 1 ? l.x : l.work;
    if constexpr (K > 1) e.each(im2col_op<T>{l.x, l.work, g}, columns);
    e.gemm(true, false, l.shape.output.c, columns, g.rows(), l.params, cols, T(0), l.y);  // y = W patches
    if (!l.into_next) e.template bias<void>(l.y, l.params + bias(l.shape).offset, l.shape.output.c, columns);
  }
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    const auto g = patch(l.shape);
    const std::size_t columns = l.shape.input.positions() * l.batch, out = l.shape.output.c;
    const T* cols = K == 1 ? l.x : l.work;
    if constexpr (K > 1) e.each(im2col_op<T>{l.x, l.work, g}, columns);
    e.gemm(false, true, g.rows(), out, columns, cols, l.g, T(1), l.grads);         // dW^T += patches g^T
    e.bias_gradient(l.g, l.grads + bias(l.shape).offset, out, columns);             // db += sums of g
    if constexpr (K == 1) {
      e.gemm(false, false, g.rows(), columns, out, l.params, l.g, T(0), l.dx);    // du = W^T g
    } else {
      e.gemm(false, false, g.rows(), columns, out, l.params, l.g, T(0), l.work);  // dpatches = W^T g
      e.each(col2im_op<T>{l.work, l.dx, g}, columns);
    }
    return l.dx;
  }

 private:
  static constexpr patch_geometry patch(const layer_shape& s) { return {s.input.c, s.input.h, s.input.w, K}; }
};

}  // namespace rwd
