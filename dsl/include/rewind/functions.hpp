// rewind: elementwise functions. Each declares in one place its value, its derivative (from the
// input, and from the output for use inside learned maps, where only outputs are kept), the
// interval its slope lives in, and the values it takes, which the budget analysis uses. Every
// function here is nondecreasing, so the analysis maps an interval [lo, hi] of inputs to
// [bound(lo), bound(hi)], with bound() the value in double at compile time.
#pragma once

#include <cmath>
#include <string_view>

#include "config.hpp"
#include "rational.hpp"

namespace rwd::fn {

struct tanh_fn {
  static constexpr std::string_view name = "tanh";
  static constexpr double slope_lo = 0, slope_hi = 1;  // tanh' = 1 - tanh^2 in (0, 1]
  static constexpr double bound(double x) { return cmath::tanh(x); }  // in (-1, 1)
  template <class T>
  REWIND_HOST_DEVICE static T value(T x) {
    using std::tanh;
    return tanh(x);
  }
  template <class T>
  REWIND_HOST_DEVICE static T derivative_from_output(T y) {  // d tanh(u) = (1 - y^2) du
    return T(1) - y * y;
  }
};

struct sigmoid_fn {
  static constexpr std::string_view name = "sigmoid";
  static constexpr double slope_lo = 0, slope_hi = 0.25;  // s' = s (1 - s) in (0, 1/4]
  static constexpr double bound(double x) { return cmath::sigmoid(x); }  // in (0, 1)
  template <class T>
  REWIND_HOST_DEVICE static T value(T x) {
    using std::exp;
    return T(1) / (T(1) + exp(-x));
  }
  template <class T>
  REWIND_HOST_DEVICE static T derivative_from_output(T y) {  // d s(u) = s (1 - s) du
    return y * (T(1) - y);
  }
};

struct relu_fn {
  static constexpr std::string_view name = "relu";
  static constexpr double slope_lo = 0, slope_hi = 1;  // relu' is 0 or 1
  static constexpr double bound(double x) { return x > 0 ? x : 0.0; }  // in [0, inf)
  template <class T>
  REWIND_HOST_DEVICE static T value(T x) {
    return x > T(0) ? x : T(0);
  }
  template <class T>
  REWIND_HOST_DEVICE static T derivative_from_output(T y) {  // d relu(u) = [u > 0] du
    return y > T(0) ? T(1) : T(0);
  }
};

struct exp_fn {
  static constexpr std::string_view name = "exp";
  // exp' = exp is unbounded; the budget analysis linearises it at 0 (slope 1) and says so.
  static constexpr double slope_lo = 1, slope_hi = 1;
  static constexpr bool slope_is_local = true;
  static constexpr double bound(double x) { return cmath::exp(x); }  // in (0, inf)
  template <class T>
  REWIND_HOST_DEVICE static T value(T x) {
    using std::exp;
    return exp(x);
  }
  template <class T>
  REWIND_HOST_DEVICE static T derivative_from_output(T y) {  // d exp(u) = exp(u) du
    return y;
  }
};

/// The derivative of Fn at input x, from its value there.
template <class Fn, class T>
REWIND_HOST_DEVICE T derivative(T x) {
  return Fn::derivative_from_output(Fn::value(x));
}

}  // namespace rwd::fn
