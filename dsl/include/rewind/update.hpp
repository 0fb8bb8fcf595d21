// rewind: updates and their analysis.
//
// An update rewrites one state variable: `s = alpha*s + g(others)`. The affine decomposition
// finds alpha (the coefficient of the target) and g (the rest) symbolically, or the first rule
// of invertibility the right-hand side breaks. Laws:
//
//   update:          s <- alpha*s + g
//   inverse:         s <- (s - g) / alpha              inverse(inverse(u)) == u (as types)
//   adjoint:         ubar += J_g,u^T sbar for u != s;  sbar <- alpha*sbar   (adjoint.hpp)
#pragma once

#include <string>
#include <type_traits>

#include "diagnostics.hpp"
#include "expr.hpp"

namespace rwd {

/// Why an update is rejected, or ok. Codes match diagnostics.hpp.
enum class diagnosis {
  ok,
  e001_map_reads_target,       // x = x + f(x)
  e002_alpha_zero,             // x = 0*x + f(v), x = x - x + f(v)
  e003_overwrite,              // x = f(v)
  e004_function_reads_target,  // x = x + tanh(x)
  e005_not_affine,             // x = x*x
  e006_not_state,              // reads a variable no update of the block writes
};

template <diagnosis Code, expression Alpha, expression G>
struct affine_form {
  static constexpr diagnosis code = Code;
  using alpha = Alpha;
  using g = G;
};

namespace detail {
// a*b with exact zero folding: the analysis's own product (user products keep 0*x as written)
template <expression A, expression B>
constexpr auto times(A a, B b) {
  if constexpr (std::is_same_v<A, zero> || std::is_same_v<B, zero>) return zero{};
  else return make_mul(a, b);
}
template <class F1, class F2, class Combine>
constexpr auto combine(F1, F2, Combine c) {
  if constexpr (F1::code != diagnosis::ok) return F1{};
  else if constexpr (F2::code != diagnosis::ok) return F2{};
  else
    return affine_form<diagnosis::ok, decltype(c(typename F1::alpha{}, typename F2::alpha{})),
                       decltype(c(typename F1::g{}, typename F2::g{}))>{};
}
}  // namespace detail

/// The affine decomposition of E in the state variable T: E == alpha*T + g, alpha and g not
/// reading T; or the code of the rule E breaks.
template <class T, expression E>
constexpr auto decompose(E) {
  using detail::combine;
  if constexpr (!reads<T>(E{})) return affine_form<diagnosis::ok, zero, E>{};
  else if constexpr (std::is_same_v<E, T>) return affine_form<diagnosis::ok, one, zero>{};
  else if constexpr (detail::is_call<E>)
    return affine_form<diagnosis::e001_map_reads_target, zero, zero>{};
  else if constexpr (detail::is_apply<E>)
    return affine_form<diagnosis::e004_function_reads_target, zero, zero>{};
  else if constexpr (detail::is_neg<E>) {
    using F = decltype(decompose<T>(typename E::negated{}));
    if constexpr (F::code != diagnosis::ok) return F{};
    else
      return affine_form<diagnosis::ok, decltype(make_neg(typename F::alpha{})),
                         decltype(make_neg(typename F::g{}))>{};
  } else if constexpr (!detail::is_add<E> && !detail::is_sub<E> && !detail::is_mul<E>) {
    return affine_form<diagnosis::e005_not_affine, zero, zero>{};  // a node kind not known to be affine
  } else {
    return hana::unpack(E::children(), [](auto a, auto b) {
      using A = decltype(a);
      using B = decltype(b);
      if constexpr (detail::is_add<E>)
        return combine(decompose<T>(a), decompose<T>(b), [](auto p, auto q) { return make_add(p, q); });
      else if constexpr (detail::is_sub<E>)
        return combine(decompose<T>(a), decompose<T>(b), [](auto p, auto q) { return make_sub(p, q); });
      else if constexpr (reads<T>(A{}) && reads<T>(B{}))  // a product of two factors reading T
        return affine_form<diagnosis::e005_not_affine, zero, zero>{};
      else if constexpr (reads<T>(B{})) {  // a * (alpha_b*T + g_b)
        using F = decltype(decompose<T>(b));
        if constexpr (F::code != diagnosis::ok) return F{};
        else
          return affine_form<diagnosis::ok, decltype(detail::times(a, typename F::alpha{})),
                             decltype(detail::times(a, typename F::g{}))>{};
      } else {  // (alpha_a*T + g_a) * b
        using F = decltype(decompose<T>(a));
        if constexpr (F::code != diagnosis::ok) return F{};
        else
          return affine_form<diagnosis::ok, decltype(detail::times(typename F::alpha{}, b)),
                             decltype(detail::times(typename F::g{}, b))>{};
      }
    });
  }
}

/// The diagnosis of an assignment on its own (rules 1 to 3); rule 4 needs the block.
template <class Assignment>
constexpr diagnosis diagnose() {
  using T = typename Assignment::target;
  using Rhs = typename Assignment::rhs;
  using F = decltype(decompose<T>(Rhs{}));
  if constexpr (F::code != diagnosis::ok) return F::code;
  else if constexpr (identically_zero(typename F::alpha{}))  // 0*x, x - x, (v - v)*x, (0*v)*x
    return reads<T>(Rhs{}) ? diagnosis::e002_alpha_zero : diagnosis::e003_overwrite;
  else return diagnosis::ok;
}

// --- one concept per rule: the concept's name is the first thing a user reads --------------------

template <class A>
concept rhs_is_affine_in_target = diagnose<A>() != diagnosis::e005_not_affine;
template <class A>
concept rhs_does_not_read_target = diagnose<A>() != diagnosis::e001_map_reads_target &&
                                   diagnose<A>() != diagnosis::e004_function_reads_target;
template <class A>
concept coefficient_nonzero = diagnose<A>() != diagnosis::e002_alpha_zero &&
                              diagnose<A>() != diagnosis::e003_overwrite;
/// Rules 1 to 3 for one assignment `x = rhs`.
template <class A>
concept invertible_update =
    rhs_is_affine_in_target<A> && rhs_does_not_read_target<A> && coefficient_nonzero<A>;

// --- canonical updates ---------------------------------------------------------------------------

/// s <- alpha*s + g, with alpha != 0 and g not reading s.
template <state_variable T, expression Alpha, expression G>
struct update {
  using target = T;
  using alpha = Alpha;
  using g = G;
  static constexpr bool is_inverse = false;
  /// The right-hand side as an expression: alpha*s + g.
  using rhs = decltype(make_add(detail::times(Alpha{}, T{}), G{}));
  static std::string text(const print_context& c = {}) { return T::text(c) + " <- " + rhs::text(c); }
};

/// s <- (s - g) / alpha: the inverse of update<T, Alpha, G>. Engines rewind by evaluating its
/// right-hand side; this is the one place the inverse's arithmetic is written.
template <state_variable T, expression Alpha, expression G>
struct inverse_update {
  using target = T;
  using alpha = Alpha;
  using g = G;
  static constexpr bool is_inverse = true;
  /// The right-hand side as an expression: (s - g) / alpha, or s - g when alpha is 1.
  using rhs = decltype(make_quotient(make_sub(T{}, G{}), Alpha{}));
  static std::string text(const print_context& c = {}) { return T::text(c) + " <- " + rhs::text(c); }
};

template <class T, class A, class G>
constexpr inverse_update<T, A, G> invert(update<T, A, G>) {
  return {};
}
template <class T, class A, class G>
constexpr update<T, A, G> invert(inverse_update<T, A, G>) {
  return {};
}

/// The canonical update of a valid assignment.
template <class Assignment>
constexpr auto canonical_update(Assignment) {
  using T = typename Assignment::target;
  using F = decltype(decompose<T>(typename Assignment::rhs{}));
  return update<T, typename F::alpha, typename F::g>{};
}

/// How the coefficient of an update is known.
enum class coefficient_kind {
  constant,        // a compile-time rational: 0.9
  runtime,         // built from runtime scalars: mu, 2*mu
  data_dependent,  // reads state: exp(s(x2))
};

template <class U>
constexpr coefficient_kind coefficient_kind_of() {
  using Alpha = typename U::alpha;
  if constexpr (constant_expression<Alpha>) return coefficient_kind::constant;
  else if constexpr (is_scalar(Alpha{})) return coefficient_kind::runtime;
  else return coefficient_kind::data_dependent;
}

}  // namespace rwd
