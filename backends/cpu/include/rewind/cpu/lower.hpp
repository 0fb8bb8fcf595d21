// rewind cpu: lowering of a dsl expression type to one Eigen array expression.
//
// Each node's value rule (expr.hpp) is applied to its operands' Eigen expressions, and each
// elementwise function's (functions.hpp) through fn::math over Eigen arrays, defined here;
// leaves become Maps of the frame's buffers (state, cotangents, map outputs, map input
// cotangents) or scalars (constants, runtime scalars). The result is evaluated in one fused,
// vectorised pass with no per-node temporaries:
//   Eigen::Map<Array>(target, n) = lower<Layout, U::rhs, T>(frame, n);
#pragma once

#include <Eigen/Core>
#include <type_traits>

#include <rewind/pointwise.hpp>

namespace rwd::cpu::detail {
/// [x > 0] as 0 or 1, vectorised: a comparison's mask and-ed with 1 (Eigen casts a comparison's
/// bools to numbers one element at a time). A NaN gives 0, as the scalar rule does.
template <class S>
struct heaviside_op {
  S operator()(S x) const { return x > S(0) ? S(1) : S(0); }
  template <class P>
  P packetOp(const P& x) const {
    namespace in = Eigen::internal;
    return in::pand(in::pcmp_lt(in::pzero(x), x), in::pset1<P>(S(1)));
  }
};
}  // namespace rwd::cpu::detail

template <class S>
struct Eigen::internal::functor_traits<rwd::cpu::detail::heaviside_op<S>> {
  enum { Cost = 2 * NumTraits<S>::AddCost, PacketAccess = packet_traits<S>::HasCmp };
};

namespace rwd::fn {
/// The elementwise primitives over Eigen array expressions: each elementwise function's one
/// statement (functions.hpp) lowers to one vectorised Eigen expression.
template <class X>
  requires std::is_base_of_v<Eigen::ArrayBase<X>, X>
struct math<X> {
  using scalar = typename X::Scalar;
  template <class D>
  static auto exp(const Eigen::ArrayBase<D>& x) { return x.derived().exp(); }
  template <class D>
  static auto tanh(const Eigen::ArrayBase<D>& x) { return x.derived().tanh(); }
  template <class D>
  static auto square(const Eigen::ArrayBase<D>& x) { return x.derived().square(); }
  template <class D>
  static auto positive(const Eigen::ArrayBase<D>& x) { return x.derived().max(scalar(0)); }
  template <class D>
  static auto heaviside(const Eigen::ArrayBase<D>& x) { return x.derived().unaryExpr(cpu::detail::heaviside_op<scalar>{}); }
};
}  // namespace rwd::fn

namespace rwd::cpu {

namespace detail {
template <class T>
using array_view = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
}  // namespace detail

template <class Layout, class E, class T, class Frame>
auto lower(const Frame& f, Eigen::Index n);

namespace detail {
template <class Layout, class E, class T, class Frame, class... Operands>
auto lower_node(const Frame& f, Eigen::Index n, rwd::detail::type_list<Operands...>) {
  return E::value(lower<Layout, Operands, T>(f, n)...);
}
}  // namespace detail

/// The Eigen array expression of E over the frame f (n elements per buffer): a leaf is a view of
/// a frame buffer or a scalar, a node its value rule over its operands' expressions.
template <class Layout, class E, class T, class Frame>
auto lower(const Frame& f, Eigen::Index n) {
  if constexpr (state_variable<E>) return detail::array_view<T>(f.state[Layout::template state_index<E>], n);
  else if constexpr (constant_expression<E>)
    return static_cast<T>(static_cast<T>(E::value.num) / static_cast<T>(E::value.den));
  else if constexpr (rwd::detail::is_param<E>) return f.params[Layout::template param_index<E>];
  else if constexpr (rwd::detail::is_bar<E>)
    return detail::array_view<T>(f.bars[Layout::template state_index<typename E::variable>], n);
  else if constexpr (rwd::detail::is_call<E>) return detail::array_view<T>(f.calls[Layout::template call_index<E>], n);
  else if constexpr (rwd::detail::is_map_vjp<E>)
    return detail::array_view<T>(f.vjps[Layout::template vjp_index<E>], n);
  else {
    static_assert(requires { typename E::operands; }, "rewind: lower: an unknown leaf kind");
    return detail::lower_node<Layout, E, T>(f, n, typename E::operands{});
  }
}

}  // namespace rwd::cpu
