// rewind: the range of an expression over every state, by interval arithmetic.
//
// A coefficient alpha computed from the data (exp(s(w)), 0.5 + 0.5*sigmoid(s(w))) has no single
// value, but it has a range: a state variable may hold any real, a learned map's output lies in
// its declared or last layer's range, an elementwise function maps an interval to an interval
// (each is nondecreasing), and sums, differences and products of intervals are intervals. The
// budget analysis uses the value of the range nearest zero, where the rewind's division by
// alpha amplifies most; a range that contains zero has no budget.
#pragma once

#include <limits>
#include <string>

#include "config.hpp"
#include "map.hpp"

namespace rwd {

/// A closed interval [lo, hi]; lo may be -inf and hi +inf. It holds the closure of the values an
/// expression may take: sigmoid's (0, 1) is [0, 1], so a range that excludes zero is bounded
/// away from it.
struct interval {
  double lo = -cmath::infinity, hi = cmath::infinity;
  constexpr bool contains_zero() const { return lo <= 0 && hi >= 0; }
  /// The value nearest zero, with its sign (0 when the interval contains zero).
  constexpr double nearest_zero() const { return lo > 0 ? lo : hi < 0 ? hi : 0.0; }
};

namespace detail {
/// A product of two bounds, with 0 * inf = 0: the hull of [0, 1] * [1, inf) is [0, inf).
constexpr double bound_product(double a, double b) { return a == 0 || b == 0 ? 0.0 : a * b; }

constexpr interval interval_product(interval a, interval b) {
  const double p[] = {bound_product(a.lo, b.lo), bound_product(a.lo, b.hi), bound_product(a.hi, b.lo),
                      bound_product(a.hi, b.hi)};
  interval r{p[0], p[0]};
  for (const double x : p) {
    r.lo = x < r.lo ? x : r.lo;
    r.hi = x > r.hi ? x : r.hi;
  }
  return r;
}
}  // namespace detail

/// The range of E over every state, runtime scalars taken from `bindings`.
template <expression E>
constexpr interval range_of(E, const env& bindings) {
  if constexpr (state_variable<E>) {
    return {};
  } else if constexpr (is_scalar(E{})) {
    const double value = scalar_value(E{}, bindings);
    return {value, value};
  } else if constexpr (detail::is_neg<E>) {
    const interval a = range_of(typename E::negated{}, bindings);
    return {-a.hi, -a.lo};
  } else if constexpr (detail::is_call<E>) {
    return {E::map_type::range_lo(), E::map_type::range_hi()};
  } else if constexpr (detail::is_apply<E>) {
    using F = typename E::function;
    const interval a = range_of(hana::front(E::children()), bindings);
    return {F::bound(a.lo), F::bound(a.hi)};
  } else {
    return hana::unpack(E::children(), [&](auto x, auto y) {
      const interval a = range_of(x, bindings), b = range_of(y, bindings);
      if constexpr (detail::is_add<E>) return interval{a.lo + b.lo, a.hi + b.hi};
      else if constexpr (detail::is_sub<E>) return interval{a.lo - b.hi, a.hi - b.lo};
      else {
        static_assert(detail::is_mul<E>, "rewind: no range for this node kind (a quotient belongs to the derived inverse only)");
        return detail::interval_product(a, b);
      }
    });
  }
}

inline std::string to_string(interval a) { return "[" + detail::format_double(a.lo, 6) + ", " + detail::format_double(a.hi, 6) + "]"; }

/// What an engine accepts for an element of an alpha that reads the data: a normal, finite
/// number inside the alpha's range, on which its budget rests (a map's declared range is a
/// promise that this holds to). The range is widened by 8 ulps of T for the rounding of the
/// functions that compute alpha.
template <class T>
struct alpha_bounds {
  T lo = -std::numeric_limits<T>::infinity(), hi = std::numeric_limits<T>::infinity();
  REWIND_HOST_DEVICE bool accepts(T a) const {
    const T m = a < T(0) ? -a : a;
    return m >= std::numeric_limits<T>::min() && m <= std::numeric_limits<T>::max() && a >= lo && a <= hi;  // false for NaN
  }
};

/// The bounds of the alpha of update U in the scalar type T.
template <class T, class U>
alpha_bounds<T> alpha_bounds_of(const env& bindings) {
  const interval r = range_of(typename U::alpha{}, bindings);
  const double slack = 8 * static_cast<double>(std::numeric_limits<T>::epsilon()), top = std::numeric_limits<T>::max();
  const double lo = r.lo - slack * cmath::abs(r.lo), hi = r.hi + slack * cmath::abs(r.hi);
  return {lo < -top ? -std::numeric_limits<T>::infinity() : static_cast<T>(lo),
          hi > top ? std::numeric_limits<T>::infinity() : static_cast<T>(hi)};
}

}  // namespace rwd
