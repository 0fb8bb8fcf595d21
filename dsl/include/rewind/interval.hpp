// rewind: closed intervals of reals, the values of interval arithmetic (range.hpp) and the range
// rule each node kind states (expr.hpp).
#pragma once

#include "rational.hpp"

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

}  // namespace rwd
