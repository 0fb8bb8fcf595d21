// rewind: the adjoint (transpose, vector-Jacobian product) of a block, derived from its type.
//
// Given the cotangent sbar = dloss/ds of the state after an update s <- alpha*s + g(others),
// reverse-mode differentiation of the right-hand side gives, for the state before it:
//   ubar += J_{g,u}^T sbar            for every other variable u that g reads
//   theta_f += (df/dtheta)^T cot      for every learned-map call f(.) inside g
//   sbar <- alpha*sbar                (alpha^T sbar: alpha is a scalar or elementwise)
// and the block's adjoint runs these for its updates in reverse order. Law (tested per block
// and backend): <J u, w> == <u, adjoint(b)(w)>.
//
// The result is a list of steps a backend executes. Expressions in the steps may read the state
// before the update (which the rewind has just restored), the cotangents `bar<v>`, the outputs
// of map calls (kept from the recomputation), derivatives of elementwise functions, and
// `map_vjp<call, cot>`, the input cotangent of a map call produced by its backward step.
#pragma once

#include <string>

#include "block.hpp"

namespace rwd {

// --- nodes that appear only in adjoints -----------------------------------------------------------

/// The cotangent of a state variable: vbar = dloss/dv.
template <state_variable V>
struct bar : expr_node {
  using variable = V;
  static constexpr auto children() { return hana::make_tuple(); }
  static int precedence(const print_context&) { return detail::prec_atom; }
  static std::string text(const print_context&) { return std::string(V::name) + "bar"; }
};

/// Fn'(a), elementwise: the function's derivative rule (functions.hpp). The adjoint's own node,
/// never differentiated again.
template <class Fn, expression A>
struct derivative : node<A> {
  using function = Fn;
  using argument = A;
  static int precedence(const print_context&) { return detail::prec_atom; }
  static std::string text(const print_context& c) {
    return std::string(Fn::name) + "'(" + A::text(c) + ")";
  }
  template <class X>
  REWIND_HOST_DEVICE static constexpr auto value(const X& a) { return fn::derivative<Fn>(a); }
};

/// J_f(a)^T cot: the input cotangent of the map call f(a), made by its backward step.
template <class Call, expression Cot>
struct map_vjp : expr_node {
  using call_type = Call;
  using cotangent = Cot;
  static constexpr auto children() { return hana::make_tuple(); }  // computed by a step, a leaf here
  static int precedence(const print_context&) { return detail::prec_product; }
  static std::string text(const print_context& c) {
    return "J_" + std::string(Call::map_type::name) + "(" + Call::argument::text(c) + ")^T " +
           detail::text_at<Cot>(c, detail::prec_atom);
  }
};

// --- steps ---------------------------------------------------------------------------------------

/// Backward through a map call: theta_f += (df/dtheta)^T cot, and map_vjp<Call, Cot> = J^T cot.
/// It needs the call's input (recomputed from the state) and the map's activation outputs.
template <class Call, expression Cot>
struct map_backward_step {
  using call_type = Call;
  using cotangent = Cot;
  using result = map_vjp<Call, Cot>;
  static std::string text(const print_context& c = {}) {
    const std::string f(Call::map_type::name);
    return "dtheta_" + f + " += (d" + f + "(" + Call::argument::text(c) + ")/dtheta)^T " +
           detail::text_at<Cot>(c, detail::prec_atom);
  }
};

/// vbar += e
template <state_variable V, expression E>
struct accumulate_step {
  using variable = V;
  using value = E;
  static std::string text(const print_context& c = {}) {
    return bar<V>::text(c) + " += " + E::text(c);
  }
};

/// vbar <- e (the target's cotangent, last: every other step reads the old one)
template <state_variable V, expression E>
struct assign_step {
  using variable = V;
  using value = E;
  static std::string text(const print_context& c = {}) {
    return bar<V>::text(c) + " <- " + E::text(c);
  }
};

/// The adjoint of one update: its steps in execution order.
template <class Update, class... Steps>
struct update_adjoint {
  using update_type = Update;
  static constexpr auto steps() { return hana::make_tuple(Steps{}...); }
  /// The map backward steps alone, in order (as hana types).
  static constexpr auto map_steps();
};

namespace detail {
template <state_variable V, expression E>
struct contribution {
  using variable = V;
  using value = E;
};
template <class T> inline constexpr bool is_contribution = false;
template <class V, class E> inline constexpr bool is_contribution<contribution<V, E>> = true;
template <class T> inline constexpr bool is_accumulate_step = false;
template <class V, class E> inline constexpr bool is_accumulate_step<accumulate_step<V, E>> = true;
template <class T> inline constexpr bool is_map_step = false;
template <class C, class E> inline constexpr bool is_map_step<map_backward_step<C, E>> = true;
}  // namespace detail

template <class Update, class... Steps>
constexpr auto update_adjoint<Update, Steps...>::map_steps() {
  return hana::transform(hana::filter(steps(), [](auto s) { return hana::bool_c<detail::is_map_step<decltype(s)>>; }),
                         [](auto s) { return hana::type_c<decltype(s)>; });
}

/// Does expression E read the output of the map call C (through any node but a map_vjp)?
template <class C, expression E>
constexpr bool reads_call(E) {
  if constexpr (std::is_same_v<E, C>) return true;
  else return hana::unpack(E::children(), [](auto... c) { return (reads_call<C>(c) || ... || false); });
}

/// Reverse-mode differentiation of E with output cotangent Cot: the contributions to the
/// cotangents of the state variables E reads, and the backward steps of the maps it calls. A
/// node hands its operands the cotangents of its partials rule.
template <expression E, expression Cot>
constexpr auto vjp(E, Cot cot) {
  using detail::contribution;
  if constexpr (state_variable<E>) return hana::make_tuple(contribution<E, Cot>{});
  else if constexpr (is_scalar(E{})) return hana::make_tuple();  // constants, runtime scalars
  else if constexpr (detail::is_call<E>) {  // d f(a) = J_f(a) da + (df/dtheta) dtheta
    return hana::prepend(vjp(typename E::argument{}, map_vjp<E, Cot>{}),
                         map_backward_step<E, Cot>{});
  } else {
    static_assert(detail::states_partials<E>(),
                  "rewind: no adjoint for this node kind: it states no partials rule (a quotient belongs to the derived inverse only)");
    return hana::unpack(E::children(), [cot](auto... operand) {
      return hana::unpack(hana::zip_with([](auto x, auto c) { return vjp(x, c); }, hana::make_tuple(operand...),
                                         E::partials(operand..., cot)),
                          [](auto... parts) { return hana::flatten(hana::make_tuple(parts...)); });
    });
  }
}

namespace detail {
template <class V, class Items>
constexpr auto sum_of_contributions(Items items) {
  return hana::fold_left(items, zero{}, [](auto acc, auto item) {
    using I = decltype(item);
    if constexpr (is_contribution<I>) {
      if constexpr (std::is_same_v<typename I::variable, V>) return make_add(acc, typename I::value{});
      else return acc;
    } else return acc;
  });
}
}  // namespace detail

/// The adjoint of one update (see the laws at the top of this file).
template <class T, class Alpha, class G>
constexpr auto adjoint(update<T, Alpha, G>) {
  using U = update<T, Alpha, G>;
  constexpr auto items = vjp(typename U::rhs{}, bar<T>{});
  auto map_steps = hana::filter(items, [](auto i) { return hana::bool_c<detail::is_map_step<decltype(i)>>; });
  auto others = hana::fold_left(variables_of(G{}), variables_of(Alpha{}),
                                [](auto acc, auto v) { return detail::insert_unique(acc, v); });
  auto accumulations = hana::transform(
      hana::remove_if(others, [](auto v) { return hana::bool_c<std::is_same_v<typename decltype(v)::type, T>>; }),
      [&](auto v) {
        using V = typename decltype(v)::type;
        return accumulate_step<V, decltype(detail::sum_of_contributions<V>(items))>{};
      });
  using new_bar = decltype(detail::sum_of_contributions<T>(items));
  auto tail = [] {
    if constexpr (std::is_same_v<new_bar, bar<T>>) return hana::make_tuple();  // alpha == 1
    else return hana::make_tuple(assign_step<T, new_bar>{});
  }();
  return hana::unpack(hana::concat(hana::concat(map_steps, accumulations), tail),
                      [](auto... steps) { return update_adjoint<U, decltype(steps)...>{}; });
}

/// The adjoint of a block: the adjoints of its updates, last update first.
template <class... Updates>
constexpr auto adjoint(block_t<Updates...> b) {
  static_assert(!block_t<Updates...>::is_inverse || sizeof...(Updates) == 0,
                "rewind: adjoint() takes a forward block; the backward pass inverts it itself");
  return hana::transform(hana::reverse(b.updates()), [](auto u) { return adjoint(u); });
}

}  // namespace rwd
