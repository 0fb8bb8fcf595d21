// rewind engine: an elementwise activation y = fn(u) (fn a dsl function: its value and its
// derivative from the output are stated once, in rewind/functions.hpp). After a dense layer it
// also adds that layer's bias, in the same pass (one value per row of the output: per output of
// a dense layer, per channel of a convolution); its backward needs only its output.
#pragma once

#include <rewind/expr.hpp>

#include "rule.hpp"

namespace rwd {

template <class Fn>
struct layer_rule<elementwise<Fn>> {
  static constexpr layer_buffers buffers{.takes_bias_of_previous = true, .backward_reads_output = true};
  template <class T, class Exec>
  static void forward(const Exec& e, const layer_forward<T>& l) {
    if (l.bias_before) e.template bias<Fn>(l.y, l.bias_before, l.bias_rows, l.shape.out / l.bias_rows * l.batch);  // y holds W u
    else e.template activation<Fn>(l.x, l.y, l.shape.out * l.batch);
  }
  /// g *= fn'(u), from the output; the first layer of a map also copies it to the input cotangent.
  template <class T, class Exec>
  static T* backward(const Exec& e, const layer_backward<T>& l) {
    e.template activation_backward<Fn>(l.g, l.y, l.dx, l.shape.out * l.batch);
    return l.g;
  }
};

}  // namespace rwd
