// rewind: small helpers to print numbers and rationals the way a reader writes them.
#pragma once

#include <cstdio>
#include <string>

#include "../rational.hpp"

namespace rwd::detail {

/// Shortest round-tripping decimal of a double for display ("0.9", "1.4625", "1e-07").
inline std::string format_double(double x, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return buf;
}

/// 9/10 -> "0.9", 1/2 -> "0.5", 1/3 -> "1/3", -2 -> "-2".
inline std::string format_rational(rational r) {
  long long d = r.den;
  while (d % 2 == 0) d /= 2;
  while (d % 5 == 0) d /= 5;
  if (r.den == 1) return std::to_string(r.num);
  if (d == 1) {  // a terminating decimal: print it exactly
    long long den = r.den, scale = 1;
    int places = 0;
    while (scale % den != 0) scale *= 10, ++places;
    const long long scaled = r.num * (scale / den);
    const bool negative = scaled < 0;
    const std::string digits = std::to_string(negative ? -scaled : scaled);
    std::string whole = digits.size() > static_cast<std::size_t>(places)
                            ? digits.substr(0, digits.size() - places)
                            : "0";
    std::string frac = std::string(places > static_cast<int>(digits.size())
                                       ? places - digits.size()
                                       : 0,
                                   '0') +
                       digits.substr(digits.size() > static_cast<std::size_t>(places)
                                         ? digits.size() - places
                                         : 0);
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    return (negative ? "-" : "") + whole + (frac.empty() ? "" : "." + frac);
  }
  return std::to_string(r.num) + "/" + std::to_string(r.den);
}

}  // namespace rwd::detail
