// rewind: elementwise functions. Each states in one place its value, its derivative (from the
// output, for use inside learned maps, where only outputs are kept), the interval its slope
// lives in, and the values it takes, which the budget analysis uses. Every function here is
// nondecreasing, so the analysis maps an interval [lo, hi] of inputs to [bound(lo), bound(hi)],
// with bound() the value in double at compile time.
//
// Value and derivative are written once over a small vocabulary, `fn::math<X>`: the arithmetic
// operators of X with its scalars, and exp, tanh, square, positive (max(x, 0)) and heaviside
// ([x > 0] as 0 or 1). The primary template serves numbers, on the host and in device code; a
// backend that evaluates whole arrays (the CPU's Eigen lowering) specialises math<X> for its
// array expressions, so one statement of a function becomes a scalar kernel, a vectorised pass
// and the tests' oracle alike. A function that needs another primitive adds it to the primary
// template and to each specialisation.
#pragma once

#include <cmath>
#include <string_view>

#include "config.hpp"
#include "rational.hpp"

namespace rwd::fn {

/// The primitives over numbers X (float, double).
template <class X>
struct math {
  using scalar = X;
  REWIND_HOST_DEVICE static X exp(X x) {
    using std::exp;
    return exp(x);
  }
  REWIND_HOST_DEVICE static X tanh(X x) {
    using std::tanh;
    return tanh(x);
  }
  REWIND_HOST_DEVICE static X square(X x) { return x * x; }
  REWIND_HOST_DEVICE static X positive(X x) { return x > X(0) ? x : X(0); }
  REWIND_HOST_DEVICE static X heaviside(X x) { return x > X(0) ? X(1) : X(0); }
};

/// The scalar type of X's elements.
template <class X>
using scalar_of = typename math<X>::scalar;

struct tanh_fn {
  static constexpr std::string_view name = "tanh";
  static constexpr double slope_lo = 0, slope_hi = 1;  // tanh' = 1 - tanh^2 in (0, 1]
  static constexpr double bound(double x) { return cmath::tanh(x); }  // in (-1, 1)
  template <class X>
  REWIND_HOST_DEVICE static auto value(const X& x) {
    return math<X>::tanh(x);
  }
  template <class Y>
  REWIND_HOST_DEVICE static auto derivative_from_output(const Y& y) {  // d tanh(u) = (1 - y^2) du
    return scalar_of<Y>(1) - math<Y>::square(y);
  }
};

struct sigmoid_fn {
  static constexpr std::string_view name = "sigmoid";
  static constexpr double slope_lo = 0, slope_hi = 0.25;  // s' = s (1 - s) in (0, 1/4]
  static constexpr double bound(double x) { return cmath::sigmoid(x); }  // in (0, 1)
  template <class X>
  REWIND_HOST_DEVICE static auto value(const X& x) {
    using T = scalar_of<X>;
    return T(1) / (T(1) + math<X>::exp(-x));
  }
  template <class Y>
  REWIND_HOST_DEVICE static auto derivative_from_output(const Y& y) {  // d s(u) = s (1 - s) du
    return y * (scalar_of<Y>(1) - y);
  }
};

struct relu_fn {
  static constexpr std::string_view name = "relu";
  static constexpr double slope_lo = 0, slope_hi = 1;  // relu' is 0 or 1
  static constexpr double bound(double x) { return x > 0 ? x : 0.0; }  // in [0, inf)
  template <class X>
  REWIND_HOST_DEVICE static auto value(const X& x) {
    return math<X>::positive(x);
  }
  template <class Y>
  REWIND_HOST_DEVICE static auto derivative_from_output(const Y& y) {  // d relu(u) = [u > 0] du
    return math<Y>::heaviside(y);
  }
};

struct exp_fn {
  static constexpr std::string_view name = "exp";
  // exp' = exp is unbounded; the budget analysis linearises it at 0 (slope 1) and says so.
  static constexpr double slope_lo = 1, slope_hi = 1;
  static constexpr bool slope_is_local = true;
  static constexpr double bound(double x) { return cmath::exp(x); }  // in (0, inf)
  template <class X>
  REWIND_HOST_DEVICE static auto value(const X& x) {
    return math<X>::exp(x);
  }
  template <class Y>
  REWIND_HOST_DEVICE static auto derivative_from_output(const Y& y) {  // d exp(u) = exp(u) du
    return y;
  }
};

/// The derivative of Fn at input x, from its value there.
template <class Fn, class X>
REWIND_HOST_DEVICE auto derivative(const X& x) {
  return Fn::derivative_from_output(Fn::value(x));
}

}  // namespace rwd::fn
