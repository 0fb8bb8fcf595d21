// rewind engine: a learned map forward and backward, written once for every backend.
//
// A map is a stack of layers (rwd::map: dense layers and activations). Each layer kind states its
// rules once, in a header of its own under layers/ (dense.hpp, activation.hpp): its forward and
// backward pass in terms of a few primitives that each backend's executor provides. The buffers
// of one call (stages, backward scratch, parameter offsets, fusion of a dense layer with the
// activation after it) are laid out by rwd::map_layout, so the memory plan stays a closed form.
//
// The executor contract (`map_executor`): for scalars T, buffers in the executor's memory,
// column-major and contiguous, one sample per column:
//   gemm(ta, tb, m, n, k, A, B, beta, C)    C = op(A) op(B) + beta C, with op(A) m x k, op(B)
//                                           k x n, beta 0 or 1 (op transposes when t* is set;
//                                           at most one of them: a GEMM kernel per pair costs
//                                           compile time, and the layers need three)
//   bias<Fn>(Y, b, rows, cols)              Y = Fn(Y + b) down every column (Fn = void: Y + b)
//   gemm_bias(m, n, k, A, B, b, C)          optional: C = A B + b down every column, where an
//                                           executor can add the bias inside its GEMM (dense.hpp)
//   activation<Fn>(X, Y, n)                 Y = Fn(X) elementwise
//   bias_gradient(G, gb, rows, cols)        gb += the row sums of G
//   activation_backward<Fn>(G, Y, copy, n)  G *= Fn'(u) from the output Y = Fn(u); copy = G
//                                           where copy is not null
//   each(op, n)                             op(i) for every i in [0, n), in any order (op: a
//                                           functor of layers/image_ops.hpp, each i writing
//                                           its own outputs)
// Fn is a dsl function (rwd::fn::tanh_fn, ...): its value and its derivative from the output
// are stated once, in the dsl. The CPU backend's executor is Eigen, the CUDA backend's cuBLAS and
// kernels, the tests' a plain loop in double (tests/engine/test_map_runner.cpp).
//
// Adding a layer kind: rwd::layer_kind for what the language knows of it (shape, parameter count,
// range; dsl/map.hpp says what), and a header under layers/ specialising rwd::layer_rule: its
// layer_buffers (from which rwd::map_layout places a call's buffers), its workspace, forward and
// backward over the primitives (work that is not a GEMM as functors run by `each`; a new
// primitive goes into every executor), and its initialisation. conv.hpp and group_norm.hpp are
// written that way; tests/engine/test_map_runner.cpp adds a kind in the test alone.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>

#include <rewind/layout.hpp>
#include <rewind/map.hpp>

#include "layers/activation.hpp"
#include "layers/conv.hpp"
#include "layers/dense.hpp"
#include "layers/dropout.hpp"
#include "layers/group_norm.hpp"
#include "layers/resample.hpp"

namespace rwd {

/// The primitives a backend provides to run maps (see the contract above).
template <class E, class T>
concept map_executor = requires(const E& e, const T* c, T* p, std::size_t n, bool t) {
  e.gemm(t, t, n, n, n, c, c, T{}, p);
  e.template bias<void>(p, c, n, n);
  e.bias_gradient(c, p, n, n);
  e.each(im2col_op<T>{}, n);
};

/// Runs map M forward and backward over caller-provided buffers, through executor Exec.
template <class M, class T, class Exec>
  requires map_executor<Exec, T>
struct map_runner {
  using L = map_layout<M>;
  tensor_shape state;
  std::size_t batch;
  Exec exec{};
  T* work = nullptr;  // L::work_size(state) x batch scalars, for the layers' passes
  std::uint64_t key = 0;  // this call's dropout key (0: none); layer k's is noise_key(key, k)
  std::size_t first = 0;  // the batch's first sample in the whole batch (dropout draws per sample)

  std::uint64_t layer_key(std::size_t k) const { return key == 0 ? 0 : noise_key(key, k); }
  /// Output k's buffer: stages laid out one after the other from `stages`.
  std::array<T*, L::depth> outputs(T* stages) const { return L::outputs(stages, state, batch); }

  /// y = M(in); returns the output buffer (inside stages).
  const T* forward(const T* params, const T* in, T* stages) const {
    const auto shape = M::shape(state);
    const auto out = outputs(stages);
    const auto offsets = L::offsets(state);
    const T* x = in;
    const T* bias = nullptr;  // a bias the previous layer left to this one
    std::size_t bias_rows = 0, k = 0;
    hana::for_each(M::layers(), [&](auto layer) {
      using rule = layer_rule<decltype(layer)>;
      const layer_forward<T> step{.shape = shape[k],
                                  .batch = batch,
                                  .params = params + offsets[k],
                                  .x = x,
                                  .y = out[k],
                                  .into_next = L::fused(k),
                                  .bias_before = bias,
                                  .bias_rows = bias_rows,
                                  .work = work,
                                  .key = layer_key(k),
                                  .first = first};
      rule::forward(exec, step);
      bias = nullptr;
      if constexpr (requires { rule::bias(shape[k]); })
        if (L::fused(k)) bias = params + offsets[k] + rule::bias(shape[k]).offset, bias_rows = rule::bias(shape[k]).rows;
      x = out[k];
      ++k;
    });
    return out[L::depth - 1];
  }

  /// Backward from the output cotangent g (overwritten): dtheta accumulates into grads, the input
  /// cotangent lands in vjp.
  void backward(const T* params, T* grads, const T* in, T* stages, T* g, T* scratch, T* vjp) const {
    const auto shape = M::shape(state);
    const auto out = outputs(stages);
    const auto offsets = L::offsets(state);
    const auto cotangent_of = L::cotangent_targets(scratch, vjp, state, batch);
    std::size_t k = L::depth;
    hana::for_each(hana::reverse(M::layers()), [&](auto layer) {
      --k;
      const layer_backward<T> step{.shape = shape[k],
                                   .batch = batch,
                                   .params = params + offsets[k],
                                   .grads = grads + offsets[k],
                                   .x = k == 0 ? in : out[k - 1],
                                   .y = out[k],
                                   .g = g,
                                   .dx = k == 0 ? vjp : cotangent_of[k],
                                   .work = work,
                                   .key = layer_key(k),
                                   .first = first};
      g = layer_rule<decltype(layer)>::backward(exec, step);
    });
  }
};

}  // namespace rwd
