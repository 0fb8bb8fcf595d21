// rewind: evaluation of an expression at one element, for kernels on any backend.
//
// A backend lowers an update (or a step of its adjoint) to a `pointwise` functor: a plain,
// trivially copyable struct of pointers and scalars, with a REWIND_HOST_DEVICE call operator
// that evaluates the expression type at element i. All indexing is resolved at compile time;
// no Hana object reaches device code. The same functor runs on the host in tests, which is how
// the CUDA lowering is checked against the CPU backend without a GPU.
#pragma once

#include <cstddef>
#include <type_traits>

#include "adjoint.hpp"
#include "config.hpp"
#include "functions.hpp"
#include "range.hpp"

namespace rwd {

/// Where the operands of a pointwise expression live: the state, the cotangents, the outputs
/// of the update's map calls, the input cotangents of those calls, and the runtime scalars.
template <class T, std::size_t NState, std::size_t NCalls, std::size_t NParams, std::size_t NSteps>
struct pointwise_frame {
  const T* state[NState > 0 ? NState : 1] = {};
  const T* bars[NState > 0 ? NState : 1] = {};
  const T* calls[NCalls > 0 ? NCalls : 1] = {};
  const T* vjps[NSteps > 0 ? NSteps : 1] = {};
  T params[NParams > 0 ? NParams : 1] = {};
};

/// The compile-time layout of a frame: which variable, call, scalar and map input cotangent sits
/// at which index. Map input cotangents are indexed by the map step that makes them (an update
/// may call the same map twice on the same argument: two steps, one call).
template <class State, class Calls, class Params, class MapSteps = hana::tuple<>>
struct pointwise_layout {
  static constexpr std::size_t n_state = decltype(hana::length(State{}))::value;
  static constexpr std::size_t n_calls = decltype(hana::length(Calls{}))::value;
  static constexpr std::size_t n_params = decltype(hana::length(Params{}))::value;
  static constexpr std::size_t n_steps = decltype(hana::length(MapSteps{}))::value;
  template <class X, class Tuple>
  static constexpr std::size_t index() {
    return detail::index_in<X>(Tuple{});
  }
  template <class V> static constexpr std::size_t state_index = index<V, State>();
  template <class C> static constexpr std::size_t call_index = index<C, Calls>();
  template <class P> static constexpr std::size_t param_index = index<P, Params>();
  template <class V> static constexpr std::size_t vjp_index =
      index<map_backward_step<typename V::call_type, typename V::cotangent>, MapSteps>();
  template <class T>
  using frame = pointwise_frame<T, n_state, n_calls, n_params, n_steps>;
};

namespace detail {
template <class T> inline constexpr bool is_bar = false;
template <class V> inline constexpr bool is_bar<bar<V>> = true;
template <class T> inline constexpr bool is_map_vjp = false;
template <class C, class E> inline constexpr bool is_map_vjp<map_vjp<C, E>> = true;
}  // namespace detail

template <class Layout, class E, class T, class Frame>
REWIND_HOST_DEVICE inline T evaluate(const Frame& f, std::size_t i);

namespace detail {
template <class Layout, class E, class T, class Frame, class... Operands>
REWIND_HOST_DEVICE inline T evaluate_node(const Frame& f, std::size_t i, type_list<Operands...>) {
  return E::value(evaluate<Layout, Operands, T>(f, i)...);
}
}  // namespace detail

/// The value of expression E at element i of the frame f: a leaf is read from the frame, a node
/// is its value rule over its operands' values.
template <class Layout, class E, class T, class Frame>
REWIND_HOST_DEVICE inline T evaluate(const Frame& f, std::size_t i) {
  if constexpr (state_variable<E>) return f.state[Layout::template state_index<E>][i];
  else if constexpr (constant_expression<E>)
    return static_cast<T>(static_cast<T>(E::value.num) / static_cast<T>(E::value.den));
  else if constexpr (detail::is_param<E>) return f.params[Layout::template param_index<E>];
  else if constexpr (detail::is_bar<E>)
    return f.bars[Layout::template state_index<typename E::variable>][i];
  else if constexpr (detail::is_call<E>) return f.calls[Layout::template call_index<E>][i];
  else if constexpr (detail::is_map_vjp<E>) return f.vjps[Layout::template vjp_index<E>][i];
  else {
    static_assert(requires { typename E::operands; }, "rewind: evaluate: an unknown leaf kind");
    return detail::evaluate_node<Layout, E, T>(f, i, typename E::operands{});
  }
}

}  // namespace rwd
