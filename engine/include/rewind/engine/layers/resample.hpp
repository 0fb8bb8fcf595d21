// rewind engine: the layers that change a state's resolution, nothing learned: squeeze (space to
// depth by 2, a permutation) and average pooling over K x K windows with stride K. Both run per
// position through `each`; their backward passes read only the output cotangent and write the
// input's into a buffer of its own (the shapes differ).
#pragma once

#include "image_ops.hpp"
#include "rule.hpp"

namespace rwd {

template <>
struct layer_rule<squeeze_layer> {
  static constexpr layer_buffers buffers{.own_input_cotangent = true};
  static constexpr bool accepts(tensor_shape in) { return in.h % 2 == 0 && in.w % 2 == 0; }
  template <class T, class Exec>
  static void forward(const Exec& e, const layer_forward<T>& l) {
    e.each(squeeze_op<T>{const_cast<T*>(l.x), l.y, l.shape.input, true}, l.shape.output.positions() * l.batch);  // reads x only
  }
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    e.each(squeeze_op<T>{l.dx, l.g, l.shape.input, false}, l.shape.output.positions() * l.batch);
    return l.dx;
  }
};

template <std::size_t K>
struct layer_rule<avg_pool_layer<K>> {
  static constexpr layer_buffers buffers{.own_input_cotangent = true};
  static constexpr bool accepts(tensor_shape in) { return in.h % K == 0 && in.w % K == 0; }
  template <class T, class Exec>
  static void forward(const Exec& e, const layer_forward<T>& l) {
    e.each(avg_pool_op<T>{const_cast<T*>(l.x), l.y, l.shape.input, K, true}, l.shape.output.positions() * l.batch);  // reads x only
  }
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    e.each(avg_pool_op<T>{l.dx, l.g, l.shape.input, K, false}, l.shape.input.positions() * l.batch);
    return l.dx;
  }
};

}  // namespace rwd
