// rewind cuda: the step executor (rewind/engine/step.hpp) on a stream: one kernel per fused
// expression (the functors of ops.hpp), maps through cuBLAS (maps.cuh). Nothing synchronises:
// an alpha that reads the data is checked into a device counter per pass, layer and update,
// which the model reads at its step's one synchronisation.
#pragma once

#include <array>
#include <cstddef>

#include <rewind/engine/step.hpp>

#include "kernels.cuh"
#include "maps.cuh"

namespace rwd::cuda {

template <class T>
struct executor {
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  const env* bindings = nullptr;   // the model's runtime scalars, for alpha's range
  unsigned* alpha_bad = nullptr;   // [pass (forward, rewound)][layer][update] bad alpha elements
  std::size_t depth = 0, updates = 0;

  map_ops<T> maps() const { return {blas, stream}; }

  template <class Layout, class E, class Frame>
  void assign(const Frame& f, T* out, std::size_t n) const {
    for_each(assign_op<Layout, E, T>{f, out}, n, stream);
  }
  template <class Layout, class E, class Frame>
  void accumulate(const Frame& f, T* out, std::size_t n) const {
    for_each(accumulate_op<Layout, E, T>{f, out}, n, stream);
  }
  void copy(T* dst, const T* src, std::size_t n) const {
    REWIND_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, stream));
  }
  template <class Layout, class U, class Rhs, class Frame>
  void update(const Frame& f, T* target, std::size_t n, update_site at) const {
    if constexpr (coefficient_kind_of<U>() == coefficient_kind::data_dependent) {
      unsigned* counter = alpha_bad + ((at.rewound ? depth : 0) + at.layer) * updates + at.index;
      for_each(checked_assign_op<Layout, U, Rhs, T>{f, target, counter, alpha_bounds_of<T, U>(*bindings)}, n, stream);
    } else {
      for_each(assign_op<Layout, Rhs, T>{f, target}, n, stream);
    }
  }
  void softmax_cross_entropy(T* z, const int* labels, double* loss, std::size_t classes, std::size_t count, std::size_t batch) const {
    for_each(softmax_xent_op<T>{z, labels, loss, classes, batch}, count, stream);
  }
};

/// The state variables and cotangents of a whole batch on the device (count samples of `width`
/// scalars each), zeroed on the stream, and the batch as one lane (rwd::lane) over them.
template <class T, std::size_t NS>
struct device_states {
  std::array<device_buffer<T>, NS> s, b;
  std::size_t count = 0;
  device_states(device_tracker& tracker, std::size_t width, std::size_t samples, cudaStream_t stream) : count(samples) {
    for (std::size_t k = 0; k < NS; ++k) {
      s[k] = device_buffer<T>(tracker, width * count);
      b[k] = device_buffer<T>(tracker, width * count);
      REWIND_CUDA(cudaMemsetAsync(s[k].data(), 0, s[k].size() * sizeof(T), stream));
      REWIND_CUDA(cudaMemsetAsync(b[k].data(), 0, b[k].size() * sizeof(T), stream));
    }
  }
  /// The whole batch as one lane, with the workspace `work`.
  lane<T, NS> whole(T* work) {
    lane<T, NS> ln;
    for (std::size_t k = 0; k < NS; ++k) ln.s[k].p = s[k].data(), ln.b[k].p = b[k].data();
    ln.count = count;
    ln.work = work;
    return ln;
  }
};

}  // namespace rwd::cuda
