// rewind cpu: lowering of a dsl expression type to one Eigen array expression.
//
// Each node becomes the Eigen node of the same mathematics; leaves become Maps of the frame's
// buffers (state, cotangents, map outputs, map input cotangents) or scalars (constants, runtime
// scalars). The result is evaluated in one fused, vectorised pass with no per-node temporaries:
//   Eigen::Map<Array>(target, n) = lower<Layout, U::rhs, T>(frame, n);
#pragma once

#include <Eigen/Core>
#include <type_traits>

#include <rewind/pointwise.hpp>

namespace rwd::cpu {

namespace detail {
template <class T>
using array_view = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class X>
inline constexpr bool is_scalar_value = std::is_arithmetic_v<std::remove_cvref_t<X>>;

/// An elementwise function on an Eigen array expression (or on a scalar).
template <class Fn, class T, class X>
auto apply_fn(const X& x) {
  if constexpr (is_scalar_value<X>) return Fn::value(static_cast<T>(x));
  else if constexpr (std::is_same_v<Fn, fn::tanh_fn>) return x.tanh();
  else if constexpr (std::is_same_v<Fn, fn::sigmoid_fn>) return (T(1) + (-x).exp()).inverse();
  else if constexpr (std::is_same_v<Fn, fn::relu_fn>) return x.max(T(0));
  else if constexpr (std::is_same_v<Fn, fn::exp_fn>) return x.exp();
  else static_assert(sizeof(Fn) == 0, "rewind: no Eigen lowering for this elementwise function");
}

/// Fn'(x), from Fn's value as the dsl's derivative_from_output states it.
template <class Fn, class T, class X>
auto apply_derivative(const X& x) {
  if constexpr (is_scalar_value<X>) return fn::derivative<Fn>(static_cast<T>(x));
  else if constexpr (std::is_same_v<Fn, fn::tanh_fn>) return T(1) - x.tanh().square();  // 1 - y^2
  else if constexpr (std::is_same_v<Fn, fn::sigmoid_fn>) {                             // y (1 - y)
    return (T(1) + (-x).exp()).inverse() * (T(1) - (T(1) + (-x).exp()).inverse());
  } else if constexpr (std::is_same_v<Fn, fn::relu_fn>) return (x > T(0)).template cast<T>();
  else if constexpr (std::is_same_v<Fn, fn::exp_fn>) return x.exp();
  else static_assert(sizeof(Fn) == 0, "rewind: no Eigen lowering for this elementwise function");
}
}  // namespace detail

/// The Eigen array expression of E over the frame f (n elements per buffer).
template <class Layout, class E, class T, class Frame>
auto lower(const Frame& f, Eigen::Index n) {
  using rwd::detail::is_add;
  using rwd::detail::is_sub;
  if constexpr (state_variable<E>) return detail::array_view<T>(f.state[Layout::template state_index<E>], n);
  else if constexpr (constant_expression<E>)
    return static_cast<T>(static_cast<T>(E::value.num) / static_cast<T>(E::value.den));
  else if constexpr (rwd::detail::is_param<E>) return f.params[Layout::template param_index<E>];
  else if constexpr (rwd::detail::is_bar<E>)
    return detail::array_view<T>(f.bars[Layout::template state_index<typename E::variable>], n);
  else if constexpr (rwd::detail::is_call<E>) return detail::array_view<T>(f.calls[Layout::template call_index<E>], n);
  else if constexpr (rwd::detail::is_map_vjp<E>)
    return detail::array_view<T>(f.vjps[Layout::template vjp_index<E>], n);
  else if constexpr (rwd::detail::is_neg<E>) return -lower<Layout, typename E::negated, T>(f, n);
  else if constexpr (rwd::detail::is_apply<E>)
    return detail::apply_fn<typename E::function, T>(lower<Layout, typename E::argument_type, T>(f, n));
  else if constexpr (rwd::detail::is_derivative<E>)
    return detail::apply_derivative<typename E::function, T>(lower<Layout, typename E::argument, T>(f, n));
  else {
    using A = typename rwd::detail::binary_parts<E>::left;
    using B = typename rwd::detail::binary_parts<E>::right;
    auto a = lower<Layout, A, T>(f, n);
    auto b = lower<Layout, B, T>(f, n);
    if constexpr (is_add<E>) return a + b;
    else if constexpr (is_sub<E>) return a - b;
    else if constexpr (rwd::detail::is_quotient<E>) return a / b;
    else {
      static_assert(rwd::detail::is_mul<E>, "rewind: lower: an unknown node kind");
      return a * b;
    }
  }
}

}  // namespace rwd::cpu
