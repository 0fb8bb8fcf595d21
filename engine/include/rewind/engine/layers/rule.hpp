// rewind engine: what a layer kind's rules receive, and the rule every kind specialises.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

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
  bool into_next = false;           // a layer whose bias the activation after it applies
  const T* bias_before = nullptr;   // an activation after such a layer: that layer's bias,
  std::size_t bias_rows = 0;        // one value per row of its output (rows x out/rows per sample)
  T* work = nullptr;                // the layer's workspace(shape) x batch scalars, not kept
  std::uint64_t key = 0;            // the layer's dropout key in this call (0: no dropout)
  std::size_t first = 0;            // the first sample's index in the whole batch
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
                        // (or, for the first layer of a map, the map's input cotangent)
  T* work = nullptr;    // the layer's workspace(shape) x batch scalars, not kept
  std::uint64_t key = 0;  // as in layer_forward: the same as the forward's
  std::size_t first = 0;
};

/// Where a layer that hands its bias to the next finds it: `offset` from its first parameter,
/// one value per row of its output seen as rows x (out / rows) per sample.
struct layer_bias {
  std::size_t offset = 0, rows = 0;
};

/// What a layer kind's rules need of the buffers of a call (rwd::map_layout lays them out):
///   hands_bias_to_next      it may leave its bias to the layer after it (which then writes its
///                           output into that layer's buffer: one pass instead of two)
///   takes_bias_of_previous  it can apply such a bias in its own pass
///   own_input_cotangent     its backward writes the input cotangent into a buffer of its own
///                           (`in` per sample; the first layer of a map writes the map's)
///                           rather than in place over the output cotangent
///   backward_reads_output   its backward reads its output (the call's output may then not be
///                           overwritten by the output cotangent)
struct layer_buffers {
  bool hands_bias_to_next = false, takes_bias_of_previous = false, own_input_cotangent = false, backward_reads_output = false;
};

/// A tensor of a layer's parameters as files name it (torch's names and shapes: a dense
/// `weight` of shape (out, in), a convolution's (out, in, K, K), `bias` of shape (out)), with its
/// offset from the layer's first parameter, rank 1 to 4, and the arena stride of each of its
/// dimensions where the layer does not hold it row-major (all 0: row-major, as in the file).
struct layer_tensor {
  std::string_view name;
  std::array<std::size_t, 4> shape{};
  std::size_t rank = 1, offset = 0;
  std::array<std::size_t, 4> strides{};
};

/// The rules of a layer kind: its buffers (a layer_buffers), forward(exec, layer_forward),
/// backward(exec, layer_backward), which returns the buffer holding the input cotangent, and,
/// for a kind with parameters, initialise(params, shape, scale, glorot): its starting values,
/// glorot(p, rows, cols, scale) drawing rows x cols Glorot-uniform values in order, and
/// tensors(shape): its parameters as named tensors (layer_tensor), covering them exactly.
/// Optional: workspace(shape), scalars per sample its passes use and do not keep (0 without);
/// bias(shape), a layer_bias, for a kind whose buffers hand its bias to the next layer; and
/// accepts(input shape), false where the kind cannot take that input (a model refuses the map).
template <class Layer>
struct layer_rule {
  static_assert(sizeof(Layer) == 0, "rewind: no rules for this layer kind (add a header under rewind/engine/layers/)");
};

}  // namespace rwd
