// rewind engine: what a layer kind's rules receive, and the rule every kind specialises.
#pragma once

#include <cstddef>

#include <rewind/map.hpp>

namespace rwd {

/// One layer's forward pass in one call of its map.
template <class T>
struct layer_forward {
  layer_shape shape;                // in -> out per sample
  std::size_t batch = 0;            // samples (columns)
  const T* params = nullptr;        // the layer's parameters, where it has any
  const T* x = nullptr;             // input: shape.in x batch
  T* y = nullptr;                   // output: shape.out x batch
  bool into_next = false;           // a dense layer whose bias the activation after it applies
  const T* bias_before = nullptr;   // an activation after such a dense layer: that layer's bias
};

/// One layer's backward pass: the cotangent g of its output in, the cotangent of its input out.
template <class T>
struct layer_backward {
  layer_shape shape;
  std::size_t batch = 0;
  const T* params = nullptr;
  T* grads = nullptr;   // the layer's parameter gradients (accumulated into)
  const T* x = nullptr; // the layer's input as the forward saw it
  const T* y = nullptr; // the layer's output as the forward left it
  T* g = nullptr;       // cotangent of the output (may be overwritten)
  T* dx = nullptr;      // where the input cotangent goes when the layer writes one of its own
};

/// The rules of a layer kind: forward(exec, layer_forward) and backward(exec, layer_backward),
/// which returns the buffer holding the input cotangent.
template <class Layer>
struct layer_rule {
  static_assert(sizeof(Layer) == 0, "rewind: no rules for this layer kind (add a header under rewind/engine/layers/)");
};

}  // namespace rwd
