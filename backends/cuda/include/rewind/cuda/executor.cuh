// rewind cuda: the step executor (rewind/engine/step.hpp) on a stream: one kernel per fused
// expression (the functors of ops.hpp), maps through cuBLAS (maps.cuh). Nothing synchronises:
// an alpha that reads the data is checked into a device counter per pass, layer and update,
// which the model reads at its step's one synchronisation.
#pragma once

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

}  // namespace rwd::cuda
