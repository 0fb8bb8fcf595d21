// rewind: the expression language. Few node kinds, each an empty type, each printable:
//
//   var<"x">         a state variable (a tensor of shape width x batch)
//   constant<N, D>   the exact rational N/D, known at compile time (0.9_c is constant<9, 10>)
//   param<"mu">      a runtime scalar, bound by name when the network is built
//   neg, add, sub    -a, a + b, a - b
//   mul<A, B>        a * b: a scalar times an expression, or an elementwise product
//   quotient<A, B>   a / b: the derived inverse's division by an update's coefficient (users
//                    divide by constants only, and e / c is the exact product (1/c)*e)
//   apply<Fn, A>     an elementwise function, tanh(a)
//   call<Map, A>     a learned map applied to an expression, f(a)
//
// Canonical forms are applied at construction, so that equal mathematics has equal types:
// -(-e) => e, constants to the left of products, c1*(c2*e) => (c1*c2)*e, 1*e => e,
// a + (-b) => a - b, constant arithmetic folded exactly. `0*x` is kept as written, so that
// the analysis can say why `x = 0*x + f(v)` is rejected.
#pragma once

#include <boost/hana.hpp>
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

#include "detail/text.hpp"
#include "detail/type_set.hpp"
#include "env.hpp"
#include "fixed_string.hpp"
#include "functions.hpp"
#include "interval.hpp"
#include "rational.hpp"

namespace rwd {

namespace hana = boost::hana;

/// Every node. Assigning to a node that is not a state variable (f(x) = ..., x + v = ...) makes
/// an assignment that rwd::block refuses with rewind E013, instead of a plain C++ error; the
/// nodes bring this operator= into scope (their implicit copy assignment would hide it).
struct expr_node {
  template <class Rhs>
  constexpr auto operator=(Rhs) const;
};

namespace detail {
// Kinds of leaves are told by tag bases, not by partial specialisations on class-type template
// parameters (is_var<var<N>>), which nvcc's front end does not match.
struct var_tag {};
struct param_tag {};
struct constant_tag {};
struct map_tag {};
template <class T> inline constexpr bool is_constant = std::is_base_of_v<constant_tag, T>;
template <class T> inline constexpr bool is_param = std::is_base_of_v<param_tag, T>;
}  // namespace detail

template <class T>
concept expression = std::derived_from<std::remove_cvref_t<T>, expr_node>;

/// How an expression is printed: params show their bound value when one is given.
struct print_context {
  const env* bindings = nullptr;
};

namespace detail {
inline constexpr int prec_sum = 1, prec_neg = 2, prec_product = 3, prec_atom = 4;

template <expression E>
std::string text_at(const print_context& ctx, int min_precedence) {
  std::string t = E::text(ctx);
  return E::precedence(ctx) < min_precedence ? "(" + t + ")" : t;
}
}  // namespace detail

/// The printed form of an expression, in the notation of the mathematics.
template <expression E>
std::string to_string(E, const print_context& ctx = {}) {
  return E::text(ctx);
}

// --- leaves --------------------------------------------------------------------------------------

template <class Name>
struct basic_param : expr_node, detail::param_tag {
  using expr_node::operator=;
  static constexpr std::string_view name = Name::view();
  static constexpr auto children() { return hana::make_tuple(); }
  static int precedence(const print_context& ctx) {
    const auto b = ctx.bindings ? ctx.bindings->find_scalar(name) : std::nullopt;
    return b && *b < 0 ? detail::prec_neg : detail::prec_atom;
  }
  static std::string text(const print_context& ctx) {
    const auto b = ctx.bindings ? ctx.bindings->find_scalar(name) : std::nullopt;
    return b ? detail::format_double(*b, 8) : std::string(name);
  }
};

/// A runtime scalar named `Name`, bound when the network is built: param<"mu">.
template <fixed_string Name>
using param = basic_param<name_of<Name>>;

template <long long N, long long D = 1>
struct constant : expr_node, detail::constant_tag {
  using expr_node::operator=;
  static_assert(D > 0 && rational::gcd(N, D) == 1, "rewind: constant<N, D> must be normalised");
  static constexpr rational value{N, D};
  static constexpr auto children() { return hana::make_tuple(); }
  static int precedence(const print_context&) {
    // a fraction prints as 1/3 and is bracketed inside products, (1/3)*x; -1.5 is not, -1.5*x
    if (detail::format_rational(value).find('/') != std::string::npos) return detail::prec_sum;
    return N < 0 ? detail::prec_neg : detail::prec_atom;
  }
  static std::string text(const print_context&) { return detail::format_rational(value); }
};

template <rational R>
using constant_of = constant<R.num, R.den>;

using zero = constant<0>;
using one = constant<1>;

// --- interior nodes ------------------------------------------------------------------------------
//
// An interior node states its rules, and nothing else states them (the analyses and evaluators
// fold over the tree and ask each node):
//
//   value(x...)         its value from its operands' values, with the arithmetic operators and
//                       fn::math: numbers on any backend and in device code, whole array
//                       expressions on the CPU (the Eigen lowering), double in the analyses
//   range(interval...)  its range from its operands' ranges (interval arithmetic); a node
//                       without one is refused by range_of, and so by the budget of an alpha
//   partials(x..., c)   reverse mode: its operands' cotangents given its own, c. Written with
//                       + - * only, so the same rule derives the symbolic adjoint (operands and
//                       c are expressions) and the budget's linearisation (numbers: a
//                       state-dependent operand is 0 at its point); a node without one is refused
//                       by both
//
// plus its printing (text, precedence) and its operands (a type list, for device code, and
// children(), for the analyses). Adding a node kind is one struct with these members; the
// affine decomposition of an update (update.hpp) treats any node it does not name as not affine.

namespace detail {
template <class... Ts>
struct type_list {};
}  // namespace detail

/// An interior node over the expressions Operands.
template <expression... Operands>
struct node : expr_node {
  using operands = detail::type_list<Operands...>;
  static constexpr auto children() { return hana::make_tuple(Operands{}...); }
};

template <class Fn, expression A>
struct derivative;

template <expression A>
struct neg : node<A> {
  using expr_node::operator=;
  using negated = A;  // for the canonical forms: -(-a) => a, b + (-a) => b - a
  static int precedence(const print_context&) { return detail::prec_neg; }
  static std::string text(const print_context& c) {  // -(a + b), -a*b
    std::string t = "-";  // appended: GCC 12 warns falsely (-Wrestrict) on "-" + a temporary at -O3
    t += detail::text_at<A>(c, detail::prec_product);
    return t;
  }
  template <class X>
  REWIND_HOST_DEVICE static constexpr auto value(const X& a) { return -a; }
  static constexpr interval range(interval a) { return {-a.hi, -a.lo}; }
  template <class X, class C>
  static constexpr auto partials(const X&, const C& c) { return hana::make_tuple(-c); }
};

template <expression A, expression B>
struct add : node<A, B> {
  using expr_node::operator=;
  static int precedence(const print_context&) { return detail::prec_sum; }
  static std::string text(const print_context& c) {
    return detail::text_at<A>(c, detail::prec_sum) + " + " + detail::text_at<B>(c, detail::prec_sum);
  }
  template <class X, class Y>
  REWIND_HOST_DEVICE static constexpr auto value(const X& a, const Y& b) { return a + b; }
  static constexpr interval range(interval a, interval b) { return {a.lo + b.lo, a.hi + b.hi}; }
  template <class X, class Y, class C>
  static constexpr auto partials(const X&, const Y&, const C& c) { return hana::make_tuple(c, c); }
};

template <expression A, expression B>
struct sub : node<A, B> {
  using expr_node::operator=;
  static int precedence(const print_context&) { return detail::prec_sum; }
  static std::string text(const print_context& c) {
    return detail::text_at<A>(c, detail::prec_sum) + " - " +
           detail::text_at<B>(c, detail::prec_product);
  }
  template <class X, class Y>
  REWIND_HOST_DEVICE static constexpr auto value(const X& a, const Y& b) { return a - b; }
  static constexpr interval range(interval a, interval b) { return {a.lo - b.hi, a.hi - b.lo}; }
  template <class X, class Y, class C>
  static constexpr auto partials(const X&, const Y&, const C& c) { return hana::make_tuple(c, -c); }
};

template <expression A, expression B>
struct mul : node<A, B> {
  using expr_node::operator=;
  using scaled_constant = A;  // for the canonical form c1*(c2*e) => (c1*c2)*e
  using scaled_operand = B;
  static int precedence(const print_context&) { return detail::prec_product; }
  static std::string text(const print_context& c) {
    // a leading negative constant needs no brackets: -1.5*v
    return detail::text_at<A>(c, detail::is_constant<A> ? detail::prec_neg : detail::prec_product) +
           "*" + detail::text_at<B>(c, detail::prec_atom);
  }
  template <class X, class Y>
  REWIND_HOST_DEVICE static constexpr auto value(const X& a, const Y& b) { return a * b; }
  static constexpr interval range(interval a, interval b) { return detail::interval_product(a, b); }
  template <class X, class Y, class C>  // d(a*b) = b*da + a*db
  static constexpr auto partials(const X& a, const Y& b, const C& c) { return hana::make_tuple(b * c, a * c); }
};

/// No range and no partials: a quotient belongs to the derived inverse only, which is evaluated
/// and never analysed or differentiated.
template <expression A, expression B>
struct quotient : node<A, B> {
  using expr_node::operator=;
  static int precedence(const print_context&) { return detail::prec_product; }
  static std::string text(const print_context& c) {
    return detail::text_at<A>(c, detail::prec_product) + " / " + detail::text_at<B>(c, detail::prec_atom);
  }
  template <class X, class Y>
  REWIND_HOST_DEVICE static constexpr auto value(const X& a, const Y& b) { return a / b; }
};

/// An elementwise function: its rules are the function's own (functions.hpp).
template <class Fn, expression A>
struct apply : node<A> {
  using expr_node::operator=;
  using function = Fn;
  using argument_type = A;
  static int precedence(const print_context&) { return detail::prec_atom; }
  static std::string text(const print_context& c) {
    return std::string(Fn::name) + "(" + A::text(c) + ")";
  }
  template <class X>
  REWIND_HOST_DEVICE static constexpr auto value(const X& a) { return Fn::value(a); }
  static constexpr interval range(interval a) { return {Fn::bound(a.lo), Fn::bound(a.hi)}; }
  template <class X, class C>  // d fn(a) = fn'(a) * da
  static constexpr auto partials(const X&, const C& c) { return hana::make_tuple(derivative<Fn, A>{} * c); }
};

/// A learned map's call: its value is the map's output (made by the map runner, read by the
/// evaluators as a buffer), its range the map's, its partials the map's backward step (adjoint.hpp).
template <class Map, expression A>
struct call : node<A> {
  using expr_node::operator=;
  using map_type = Map;
  using argument = A;
  static int precedence(const print_context&) { return detail::prec_atom; }
  static std::string text(const print_context& c) {
    return std::string(Map::name) + "(" + A::text(c) + ")";
  }
  static constexpr interval range(interval) { return {Map::range_lo(), Map::range_hi()}; }
};

// --- kinds of nodes, for the analysis and the backends ------------------------------------------

namespace detail {
template <class T> inline constexpr bool is_call = false;
template <class M, class A> inline constexpr bool is_call<call<M, A>> = true;
template <class T> inline constexpr bool is_apply = false;
template <class F, class A> inline constexpr bool is_apply<apply<F, A>> = true;
template <class T> inline constexpr bool is_neg = false;
template <class A> inline constexpr bool is_neg<neg<A>> = true;
template <class T> inline constexpr bool is_add = false;
template <class A, class B> inline constexpr bool is_add<add<A, B>> = true;
template <class T> inline constexpr bool is_sub = false;
template <class A, class B> inline constexpr bool is_sub<sub<A, B>> = true;
template <class T> inline constexpr bool is_mul = false;
template <class A, class B> inline constexpr bool is_mul<mul<A, B>> = true;
template <class T> inline constexpr bool is_quotient = false;
template <class A, class B> inline constexpr bool is_quotient<quotient<A, B>> = true;
}  // namespace detail

template <class T>
concept constant_expression = detail::is_constant<T>;

namespace detail {
/// Does node E state a range rule, a partials rule? (Leaves state neither.)
template <class>
using interval_for = interval;
template <class E, class... Operands>
constexpr bool states_range(type_list<Operands...>) {
  return requires { E::range(interval_for<Operands>{}...); };
}
template <class E, class... Operands>
constexpr bool states_partials(type_list<Operands...>) {
  return requires(Operands... x) { E::partials(x..., constant<0>{}); };
}
template <class E>
constexpr bool states_range() {
  if constexpr (requires { typename E::operands; }) return states_range<E>(typename E::operands{});
  else return false;
}
template <class E>
constexpr bool states_partials() {
  if constexpr (requires { typename E::operands; }) return states_partials<E>(typename E::operands{});
  else return false;
}
}  // namespace detail

// --- state variables and assignments -------------------------------------------------------------

/// `x = rhs` as the user wrote it; the block analyses and canonicalises it.
template <class Target, expression Rhs>
struct assignment {
  using target = Target;
  using rhs = Rhs;
};

/// The target of an assignment to something that is not a state variable.
struct not_a_state_variable {};
template <class Rhs>
constexpr auto expr_node::operator=(Rhs) const {
  return assignment<not_a_state_variable, Rhs>{};
}

template <class Name>
struct basic_var : expr_node, detail::var_tag {
  static constexpr std::string_view name = Name::view();
  static constexpr auto children() { return hana::make_tuple(); }
  static int precedence(const print_context&) { return detail::prec_atom; }
  static std::string text(const print_context&) { return std::string(name); }

  /// `x = rhs`: an update of x. Rejected patterns are diagnosed by `block`.
  template <expression Rhs>
  constexpr assignment<basic_var, Rhs> operator=(Rhs) const {
    return {};
  }
  /// `x += e` is `x = x + e`.
  template <expression E>
  constexpr auto operator+=(E e) const;
  /// `x -= e` is `x = x - e`.
  template <expression E>
  constexpr auto operator-=(E e) const;
};

/// A state variable named `Name`: var<"x">.
template <fixed_string Name>
using var = basic_var<name_of<Name>>;

namespace detail {
template <class T> inline constexpr bool is_var = std::is_base_of_v<var_tag, T>;
}  // namespace detail

template <class T>
concept state_variable = detail::is_var<T>;

// --- smart constructors: canonical forms ---------------------------------------------------------

template <expression A>
constexpr auto make_neg(A) {
  if constexpr (constant_expression<A>) return constant_of<-A::value>{};  // -(c) folded
  else if constexpr (requires { typename A::negated; }) return typename A::negated{};
  else return neg<A>{};
}

template <expression A, expression B>
constexpr auto make_mul(A a, B b) {
  if constexpr (constant_expression<A> && constant_expression<B>)
    return constant_of<A::value * B::value>{};
  else if constexpr (constant_expression<B>)
    return make_mul(b, a);  // constants to the left
  else if constexpr (constant_expression<A>) {
    if constexpr (A::value.is_one()) return b;                        // 1*e => e
    else if constexpr (A::value == rational{-1, 1}) return make_neg(b);  // -1*e => -e
    else if constexpr (requires { typename B::negated; })            // c*(-e) => (-c)*e
      return make_mul(constant<-A::value.num, A::value.den>{}, typename B::negated{});
    else if constexpr (requires { requires constant_expression<typename B::scaled_constant>; })
      return make_mul(constant_of<A::value * B::scaled_constant::value>{},  // c1*(c2*e)
                      typename B::scaled_operand{});
    else return mul<A, B>{};
  } else return mul<A, B>{};
}

template <expression A, expression B>
constexpr auto make_add(A a, B b) {
  if constexpr (constant_expression<A> && constant_expression<B>)
    return constant_of<A::value + B::value>{};
  else if constexpr (std::is_same_v<A, zero>) return b;
  else if constexpr (std::is_same_v<B, zero>) return a;
  else if constexpr (requires { typename B::negated; }) return sub<A, typename B::negated>{};
  else if constexpr (requires { requires constant_expression<typename B::scaled_constant>; }) {
    if constexpr (B::scaled_constant::value.num < 0)  // a + (-c)*e => a - c*e
      return sub<A, decltype(make_mul(constant<-B::scaled_constant::value.num, B::scaled_constant::value.den>{},
                                      typename B::scaled_operand{}))>{};
    else return add<A, B>{};
  } else return add<A, B>{};
}

template <expression A, expression B>
constexpr auto make_sub(A a, B b) {
  if constexpr (constant_expression<A> && constant_expression<B>)
    return constant_of<A::value - B::value>{};
  else if constexpr (std::is_same_v<B, zero>) return a;
  else if constexpr (std::is_same_v<A, zero>) return make_neg(b);
  else if constexpr (requires { typename B::negated; }) return add<A, typename B::negated>{};
  else return sub<A, B>{};
}

/// a / b, for the inverse of an update: e / 1 => e, constants folded exactly. A constant divisor
/// stays a division (the inverse divides by 0.9; it does not multiply by a rounded 1/0.9).
template <expression A, expression B>
constexpr auto make_quotient(A a, B) {
  static_assert(!std::is_same_v<B, zero>, "rewind: division by the constant zero");
  if constexpr (constant_expression<A> && constant_expression<B>) return constant_of<A::value / B::value>{};
  else if constexpr (std::is_same_v<B, one> || std::is_same_v<A, zero>) return a;
  else return quotient<A, B>{};
}

// --- operators -----------------------------------------------------------------------------------

template <expression A, expression B>
constexpr auto operator+(A a, B b) {
  return make_add(a, b);
}
template <expression A, expression B>
constexpr auto operator-(A a, B b) {
  return make_sub(a, b);
}
template <expression A>
constexpr auto operator-(A a) {
  return make_neg(a);
}
template <expression A, expression B>
constexpr auto operator*(A a, B b) {
  return make_mul(a, b);
}
/// Division by a constant: e / c is (1/c)*e, exactly.
template <expression A, long long N, long long D>
constexpr auto operator/(A a, constant<N, D>) {
  static_assert(N != 0, "rewind: division by the constant zero");
  return make_mul(constant_of<rational{D, 1} / rational{N, 1}>{}, a);
}

template <class Name>
template <expression E>
constexpr auto basic_var<Name>::operator+=(E e) const {
  return assignment<basic_var, decltype(basic_var{} + e)>{};
}
template <class Name>
template <expression E>
constexpr auto basic_var<Name>::operator-=(E e) const {
  return assignment<basic_var, decltype(basic_var{} - e)>{};
}

// --- elementwise functions as callables ----------------------------------------------------------

/// `rwd::tanh(e)` builds apply<tanh_fn, E>; the same object is an activation in a map.
template <class Fn>
struct elementwise {
  using function = Fn;
  template <expression A>
  constexpr apply<Fn, A> operator()(A) const {
    return {};
  }
};

inline constexpr elementwise<fn::tanh_fn> tanh{};
inline constexpr elementwise<fn::sigmoid_fn> sigmoid{};
inline constexpr elementwise<fn::relu_fn> relu{};
inline constexpr elementwise<fn::exp_fn> exp{};

// --- literals ------------------------------------------------------------------------------------

namespace literals {
/// `0.9_c` is the exact rational 9/10, `2_c` is 2: decimal literals parsed at compile time.
template <char... Cs>
consteval auto operator""_c() {
  constexpr auto parsed = detail::parse_decimal<Cs...>();
  if constexpr (!parsed.ok) {
    static_assert(parsed.ok, REWIND_E011);
    return one{};  // one message: a stand-in that no rule after this one rejects
  } else {
    return constant<parsed.num, parsed.den>{};
  }
}
}  // namespace literals

// --- structural queries --------------------------------------------------------------------------

/// Does expression E read the state variable V (anywhere, through maps and functions too)?
template <class V, expression E>
constexpr bool reads(E) {
  if constexpr (std::is_same_v<E, V>) return true;
  else return hana::unpack(E::children(), [](auto... c) { return (reads<V>(c) || ... || false); });
}

/// Does E read no state variable at all (a scalar: constants and runtime params only)?
template <expression E>
constexpr bool is_scalar(E) {
  if constexpr (state_variable<E> || detail::is_call<E> || detail::is_apply<E>) return false;
  else return hana::unpack(E::children(), [](auto... c) { return (is_scalar(c) && ... && true); });
}


/// The state variables an expression reads, as hana types, in order of first appearance.
template <expression E>
constexpr auto variables_of(E) {
  if constexpr (state_variable<E>) return hana::make_tuple(hana::type_c<E>);
  else
    return hana::fold_left(E::children(), hana::make_tuple(), [](auto acc, auto c) {
      return detail::insert_all(acc, variables_of(c));
    });
}

/// The runtime scalars an expression reads, as hana types.
template <expression E>
constexpr auto params_of(E) {
  if constexpr (detail::is_param<E>) return hana::make_tuple(hana::type_c<E>);
  else
    return hana::fold_left(E::children(), hana::make_tuple(), [](auto acc, auto c) {
      return detail::insert_all(acc, params_of(c));
    });
}

/// The learned-map calls an expression contains, innermost first (the order to evaluate them).
template <expression E>
constexpr auto calls_of(E) {
  auto inner = hana::fold_left(E::children(), hana::make_tuple(), [](auto acc, auto c) {
    return detail::insert_all(acc, calls_of(c));
  });
  if constexpr (detail::is_call<E>) return detail::insert_unique(inner, hana::type_c<E>);
  else return inner;
}

template <expression E>
constexpr bool identically_zero(E);

namespace detail {
/// E times c as a linear combination of terms: a tuple of pairs (hana type of a term, rational
/// coefficient). Sums, differences, negations and constant multiples are split; a product one of
/// whose factors is identically zero contributes nothing; constants are multiples of `one`; any
/// other node (a variable, a param, a product, a function or a map) is one term.
template <expression E>
constexpr auto linear_terms(E, rational c) {
  if constexpr (is_constant<E>) return hana::make_tuple(hana::make_pair(hana::type_c<one>, c * E::value));
  else if constexpr (is_neg<E>) return linear_terms(typename E::negated{}, -c);
  else if constexpr (is_add<E> || is_sub<E>)
    return hana::unpack(E::children(), [c](auto a, auto b) {
      return hana::concat(linear_terms(a, c), linear_terms(b, is_sub<E> ? -c : c));
    });
  else if constexpr (is_mul<E>) {
    using A = typename E::scaled_constant;
    using B = typename E::scaled_operand;
    if constexpr (is_constant<A>) return linear_terms(B{}, c * A::value);
    else if constexpr (identically_zero(A{}) || identically_zero(B{})) return hana::make_tuple();
    else return hana::make_tuple(hana::make_pair(hana::type_c<E>, c));
  } else return hana::make_tuple(hana::make_pair(hana::type_c<E>, c));
}
}  // namespace detail

/// Is E zero whatever its variables, params, functions and maps hold? Seen through constant
/// folding, products with a zero factor (0*v, (v - v)*w) and sums whose equal terms cancel
/// (v - v, 2*v - v - v, x + f(v) - f(v) - x). Products are compared as written: v*w - w*v is not
/// recognised.
template <expression E>
constexpr bool identically_zero(E) {
  constexpr auto terms = detail::linear_terms(E{}, rational{1, 1});
  bool zero_sum = true;
  hana::for_each(terms, [&](const auto& p) {  // references: read through decltype only, a copy
    rational sum{0, 1};                         // would be a parameter nvcc calls unused
    hana::for_each(terms, [&](const auto& q) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(hana::first(p))>, std::remove_cvref_t<decltype(hana::first(q))>>)
        sum = sum + hana::second(q);
    });
    if (!(sum == rational{0, 1})) zero_sum = false;
  });
  return zero_sum;
}

/// The value of a scalar expression, with runtime params taken from `bindings`.
template <expression E>
constexpr double scalar_value(E, const env& bindings) {
  if constexpr (constant_expression<E>) return E::value.value();
  else if constexpr (detail::is_param<E>) {
    const auto b = bindings.find_scalar(E::name);
    if (!b) throw error("rewind: the runtime scalar '" + std::string(E::name) + "' has no value");
    return *b;
  } else {
    static_assert(requires { typename E::operands; }, "rewind: scalar_value: not a scalar expression");
    return hana::unpack(E::children(), [&](auto... c) { return E::value(scalar_value(c, bindings)...); });
  }
}

}  // namespace rwd
