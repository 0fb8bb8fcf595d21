// rewind engine: group normalization (torch.nn.GroupNorm: per sample and group of channels,
// normalised over the group's channels and positions, then gamma and beta per channel). The
// backward pass recomputes each group's mean and 1/std from the layer's input into its
// workspace (6c scalars per sample: the statistics per channel, and per-channel sums), so nothing
// beyond the output is kept; it writes the input cotangent over the output's. The passes run per
// sample over positions, the channels of a position contiguous; the parameter gradients add the
// samples' per-channel sums in sample order.
#pragma once

#include <algorithm>

#include "image_ops.hpp"
#include "rule.hpp"

namespace rwd {

template <std::size_t G>
struct layer_rule<group_norm_layer<G>> {
  static constexpr layer_buffers buffers{};
  static constexpr std::size_t workspace(const layer_shape& s) { return group_norm_workspace * s.input.c; }
  static constexpr bool accepts(tensor_shape in) { return in.c % G == 0; }
  /// gamma = scale (1, or the map's output scale when it is the map's last learned layer), beta 0.
  template <class T, class Glorot>
  static void initialise(T* params, const layer_shape& s, double scale, Glorot&) {
    std::fill(params, params + s.input.c, static_cast<T>(scale));
  }
  /// torch.nn.GroupNorm's names and shapes.
  static constexpr std::array<layer_tensor, 2> tensors(const layer_shape& s) {
    return {{{"weight", {s.input.c}, 1, 0, {}}, {"bias", {s.input.c}, 1, s.input.c, {}}}};
  }
  template <class T, class Exec>
  static void forward(const Exec& e, const layer_forward<T>& l) {
    e.each(group_norm_op<T>{l.x, l.y, l.params, l.work, geometry(l.shape)}, l.batch);
  }
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    const auto g = geometry(l.shape);
    T* dx = l.dx ? l.dx : l.g;
    e.each(group_norm_op<T>{l.x, nullptr, l.params, l.work, g}, l.batch);
    e.each(group_norm_backward_op<T>{l.x, l.g, l.params, l.work, dx, g}, l.batch);
    e.each(group_norm_parameter_gradient_op<T>{l.work, l.grads, g.c, l.batch}, g.c);
    return dx;
  }

 private:
  static constexpr group_geometry geometry(const layer_shape& s) { return {s.input.c, s.input.positions(), G}; }
};

}  // namespace rwd
