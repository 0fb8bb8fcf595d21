// rewind: exact rationals and the few pieces of constexpr real arithmetic the analysis needs.
//
// Constants of the language are exact rationals held in the type (`constant<9, 10>`), never
// floating-point template parameters (clang 14 rejects those). The literal `0.9_c` is parsed at
// compile time into 9/10. The budget analysis needs sqrt, ln and exp (and tanh and the sigmoid,
// for the ranges of coefficients) at compile time; std:: offers none as constexpr in C++20, so
// they are here, accurate to a few ulps on the ranges used.
#pragma once

#include <cstdint>
#include <limits>

#include "diagnostics.hpp"

namespace rwd {

namespace detail {
__extension__ typedef __int128 wide_int;  // exact products of two 64-bit integers
}  // namespace detail

/// An exact rational num/den, always normalised: den > 0 and gcd(num, den) == 1.
struct rational {
  long long num = 0;
  long long den = 1;

  static constexpr long long gcd(long long a, long long b) {
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b != 0) {
      long long t = a % b;
      a = b;
      b = t;
    }
    return a;
  }
  static constexpr rational make(detail::wide_int n, detail::wide_int d) {
    if (d < 0) n = -n, d = -d;
    detail::wide_int a = n < 0 ? -n : n, b = d;
    while (b != 0) {
      detail::wide_int t = a % b;
      a = b;
      b = t;
    }
    if (a > 1) n /= a, d /= a;
    if (n > std::numeric_limits<long long>::max() || n < std::numeric_limits<long long>::min() ||
        d > std::numeric_limits<long long>::max())
      throw error("rewind: rational constant overflows 64 bits");
    return {static_cast<long long>(n), static_cast<long long>(d)};
  }
  constexpr double value() const { return static_cast<double>(num) / static_cast<double>(den); }
  constexpr bool is_zero() const { return num == 0; }
  constexpr bool is_one() const { return num == 1 && den == 1; }

  friend constexpr rational operator+(rational a, rational b) {
    return make(static_cast<detail::wide_int>(a.num) * b.den + static_cast<detail::wide_int>(b.num) * a.den,
                static_cast<detail::wide_int>(a.den) * b.den);
  }
  friend constexpr rational operator-(rational a) { return make(-static_cast<detail::wide_int>(a.num), a.den); }
  friend constexpr rational operator-(rational a, rational b) { return a + (-b); }
  friend constexpr rational operator*(rational a, rational b) {
    return make(static_cast<detail::wide_int>(a.num) * b.num, static_cast<detail::wide_int>(a.den) * b.den);
  }
  friend constexpr rational operator/(rational a, rational b) {
    if (b.num == 0) throw error("rewind: division of a constant by zero");
    return make(static_cast<detail::wide_int>(a.num) * b.den, static_cast<detail::wide_int>(a.den) * b.num);
  }
  friend constexpr bool operator==(rational, rational) = default;
};

namespace cmath {

inline constexpr double ln2 = 0.693147180559945309417232121458176568;
inline constexpr double infinity = std::numeric_limits<double>::infinity();

constexpr double abs(double x) { return x < 0 ? -x : x; }

/// Square root by Newton's iteration from a power-of-two start; exact to the last ulp or two.
constexpr double sqrt(double x) {
  if (!(x > 0)) return x == 0 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  if (x == infinity) return x;
  double r = 1.0;
  for (double y = x; y > 4.0; y /= 4.0) r *= 2.0;
  for (double y = x; y < 0.25; y *= 4.0) r /= 2.0;
  for (int i = 0; i < 64; ++i) {
    double next = 0.5 * (r + x / r);
    if (next == r) break;
    r = next;
  }
  return r;
}

/// Natural logarithm: x = m * 2^k with m in [1/sqrt2, sqrt2), then 2*atanh((m-1)/(m+1)).
constexpr double log(double x) {
  if (x == infinity) return infinity;
  if (!(x > 0)) return x == 0 ? -infinity : std::numeric_limits<double>::quiet_NaN();
  int k = 0;
  while (x >= 1.4142135623730950488) x /= 2.0, ++k;
  while (x < 0.70710678118654752440) x *= 2.0, --k;
  const double t = (x - 1.0) / (x + 1.0), t2 = t * t;
  double term = t, sum = 0.0;
  for (int n = 1; n < 200; n += 2) {
    const double add = term / n;
    if (add == 0.0 || sum + add == sum) break;
    sum += add;
    term *= t2;
  }
  return 2.0 * sum + k * ln2;
}

constexpr double floor(double x) {
  if (x != x || x == infinity || x == -infinity) return x;
  const auto i = static_cast<long long>(x);
  return static_cast<double>(i) > x ? static_cast<double>(i - 1) : static_cast<double>(i);
}

/// Exponential: x = k ln2 + r with |r| <= ln2/2, a Taylor series for e^r, then k halvings or
/// doublings (so results in the subnormal range are rounded once per halving).
constexpr double exp(double x) {
  if (x != x) return x;
  if (x > 709.8) return infinity;
  if (x < -745.2) return 0.0;
  const double k = floor(x / ln2 + 0.5);
  const double r = x - k * ln2;
  double term = 1.0, sum = 1.0;
  for (int n = 1; n < 30; ++n) {
    term *= r / n;
    if (sum + term == sum) break;
    sum += term;
  }
  for (long long i = static_cast<long long>(k); i > 0; --i) sum *= 2.0;
  for (long long i = static_cast<long long>(k); i < 0; ++i) sum /= 2.0;
  return sum;
}

constexpr double tanh(double x) {
  if (x != x) return x;
  const double t = exp(-2.0 * abs(x));  // in [0, 1]: no overflow
  const double y = (1.0 - t) / (1.0 + t);
  return x < 0 ? -y : y;
}

constexpr double sigmoid(double x) {
  if (x != x) return x;
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}

}  // namespace cmath

/// Compile-time parser of the `_c` literal: digits with an optional decimal point.
namespace detail {
struct parsed_decimal {
  bool ok = false;
  long long num = 0, den = 1;
};
template <char... Cs>
consteval parsed_decimal parse_decimal() {
  constexpr char text[] = {Cs..., '\0'};
  wide_int num = 0, den = 1;
  bool seen_point = false;
  for (std::size_t i = 0; i + 1 < sizeof(text); ++i) {
    const char c = text[i];
    if (c == '\'') continue;
    if (c == '.' && !seen_point) {
      seen_point = true;
      continue;
    }
    if (c < '0' || c > '9') return {};
    num = num * 10 + (c - '0');
    if (seen_point) den *= 10;
    if (num > (wide_int{1} << 62) || den > (wide_int{1} << 62)) return {};
  }
  const rational r = rational::make(num, den);
  return {true, r.num, r.den};
}
}  // namespace detail

}  // namespace rwd
