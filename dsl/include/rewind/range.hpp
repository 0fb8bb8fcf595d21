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
#include "interval.hpp"
#include "map.hpp"

namespace rwd {

/// The range of E over every state, runtime scalars taken from `bindings`: each node's range
/// rule applied to its operands' ranges.
template <expression E>
constexpr interval range_of(E, const env& bindings) {
  if constexpr (state_variable<E>) {
    return {};
  } else if constexpr (is_scalar(E{})) {
    const double value = scalar_value(E{}, bindings);
    return {value, value};
  } else {
    static_assert(detail::states_range<E>(), "rewind: range_of: this node kind states no range rule (a quotient belongs to the derived inverse only)");
    return hana::unpack(E::children(), [&](auto... c) { return E::range(range_of(c, bindings)...); });
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
