// rewind engine: the convolution y = W * u + b (K x K, stride 1, same padding), as one GEMM of
// the weights with a patch matrix each way: the input's (im2col) for y, the output cotangent's
// for the input's (cotangent_patches_op: the transposed convolution, as deep a GEMM as the
// forward one), and either for the weights' gradient (see backward). A 1x1 convolution's patch
// matrix is its input itself (channels-last: c x positions), so it needs no workspace. The
// weights are held in the patch order (out, K, K, in), row-major: W^T as a column-major
// (K K in) x out matrix; files name and shape them as torch.nn.Conv2d does, (out, in, K, K).
// Like a dense layer, it hands its bias to an activation after it.
#pragma once

#include <algorithm>
#include <cmath>

#include "image_ops.hpp"
#include "rule.hpp"

namespace rwd {

template <std::size_t N, std::size_t K>
struct layer_rule<conv_layer<N, K>> {
  static constexpr layer_buffers buffers{.hands_bias_to_next = true, .own_input_cotangent = true};
  /// One sample's patch matrix: the input's, then (in the backward pass) the output cotangent's.
  static constexpr std::size_t workspace(const layer_shape& s) {
    return K == 1 ? 0 : std::max(s.input.c, s.output.c) * K * K * s.input.positions();
  }
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
    const std::size_t columns = l.shape.input.positions() * l.batch, out = l.shape.output.c;
    if constexpr (K == 1) {
      e.gemm(true, false, out, columns, g.rows(), l.params, l.x, T(0), l.y);  // y = W u
    } else {
      for_tiles(e, g.rows(), columns, [&](std::size_t first, std::size_t n) {
        e.each(im2col_op<T>{l.x, l.work, g, first}, n);
        e.gemm(true, false, out, n, g.rows(), l.params, l.work, T(0), l.y + first * out);  // y = W patches
      });
    }
    if (!l.into_next) e.template bias<void>(l.y, l.params + bias(l.shape).offset, out, columns);
  }
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    const auto g = patch(l.shape);
    const std::size_t columns = l.shape.input.positions() * l.batch, out = l.shape.output.c, in = l.shape.input.c;
    e.bias_gradient(l.g, l.grads + bias(l.shape).offset, out, columns);  // db += sums of g
    if constexpr (K == 1) {
      e.gemm(false, true, in, out, columns, l.x, l.g, T(1), l.grads);      // dW^T += u g^T
      e.gemm(false, false, in, columns, out, l.params, l.g, T(0), l.dx);  // du = W^T g
    } else {
      // The weights' gradient: with an input at least as wide as the output, from the output
      // cotangent's patches, which the input cotangent needs anyway (one patch matrix per tile,
      // not two; u g's patches^T lands in the weights' own layout); with a narrower input, from
      // the input's patches (u's few rows would run Eigen's GEMM at about half its rate).
      const patch_geometry gg{out, l.shape.input.h, l.shape.input.w, K};
      for_tiles(e, std::max(g.rows(), gg.rows()), columns, [&](std::size_t first, std::size_t n) {
        if (in < out) {
          e.each(im2col_op<T>{l.x, l.work, g, first}, n);
          e.gemm(false, true, g.rows(), out, n, l.work, l.g + first * out, T(1), l.grads);  // dW^T += patches g^T
        }
        e.each(cotangent_patches_op<T>{l.g, l.work, gg, first}, n);
        if (in >= out) e.gemm(false, true, in, gg.rows(), n, l.x + first * in, l.work, T(1), l.grads);  // dW += u g's patches^T
        e.gemm(false, false, in, n, gg.rows(), l.params, l.work, T(0), l.dx + first * in);  // du = W g's patches
      });
    }
    return l.dx;
  }

 private:
  static constexpr patch_geometry patch(const layer_shape& s) { return {s.input.c, s.input.h, s.input.w, K}; }
  /// body(first, n) over the columns in tiles whose patch matrices (`rows` each) the executor
  /// keeps in its cache (Exec::patch_tile_columns(rows), where it says; one tile otherwise).
  template <class Exec, class Body>
  static void for_tiles(const Exec& e, std::size_t rows, std::size_t columns, Body body) {
    std::size_t n = columns;
    if constexpr (requires { e.patch_tile_columns(rows); }) n = std::max<std::size_t>(1, std::min(columns, e.patch_tile_columns(rows)));
    for (std::size_t first = 0; first < columns; first += n) body(first, std::min(n, columns - first));
  }
};

}  // namespace rwd
