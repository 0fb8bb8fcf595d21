// rewind cpu: the exact mode's numbers: a fixed point (an int64 per element with F fractional
// bits) and the exact rational a runtime coefficient stands for.
#pragma once

#include <cmath>
#include <bit>
#include <cstdint>
#include <string>

#include <rewind/diagnostics.hpp>
#include <rewind/rational.hpp>

namespace rwd::cpu {

/// A fixed point with F fractional bits: x is held as round(x 2^F) in an int64 below 2^51 in
/// magnitude (so that sums of two and the ledger's arithmetic stay exact in a double).
struct fixed_point {
  static constexpr double limit = 0x1p51;
  /// 1.5 2^52: adding it rounds a double below 2^51 in magnitude to an integer (ties to even), and
  /// the sum's bits are the integer's plus magic_bits (the vector loops convert that way).
  static constexpr double magic = 0x1.8p52;
  static constexpr std::int64_t magic_bits = 0x4338000000000000;
  int bits = 32;
  double scale = 0x1p32, unit = 0x1p-32;  // 2^F, 2^-F
  static fixed_point of(int bits) {
    if (bits < 0 || bits > 51) throw error("rewind: exact_fraction_bits is in [0, 51], not " + std::to_string(bits));
    return {bits, std::ldexp(1.0, bits), std::ldexp(1.0, -bits)};
  }
  /// x rounded to nearest even, without a branch (the loops below vectorise it): adding and
  /// subtracting 1.5 * 2^52 rounds a double below 2^51 to an integer in one exact step. A value
  /// out of range (NaN too) sets `out` to 1 and gives 0.
  std::int64_t round(double x, std::int64_t& out) const {
    double scaled = x * scale;
    out = !(std::abs(scaled) < limit);
    scaled = out ? 0.0 : scaled;
    return static_cast<std::int64_t>((scaled + magic) - magic);
  }
  static std::int64_t outside(std::int64_t v) {
    constexpr auto bound = static_cast<std::int64_t>(limit);
    return v >= bound || v <= -bound;
  }
  template <class T>
  T value(std::int64_t v) const {
    return static_cast<T>(static_cast<double>(v) * unit);
  }
};

static_assert(std::bit_cast<std::int64_t>(fixed_point::magic) == fixed_point::magic_bits);

/// The closest rational with a denominator of at most max_den (continued fractions): how a
/// runtime coefficient such as mu = 0.9 becomes the exact 9/10 of the exact policy.
inline rational rationalise(double x, long long max_den = 1000000) {
  if (!std::isfinite(x)) throw error("rewind: a non-finite coefficient has no rational value");
  long long p0 = 0, q0 = 1, p1 = 1, q1 = 0;
  double v = x;
  for (int i = 0; i < 64; ++i) {
    const double a = std::floor(v);
    const long long ai = static_cast<long long>(a);
    const long long p2 = ai * p1 + p0, q2 = ai * q1 + q0;
    if (q2 > max_den) break;
    p0 = p1, q0 = q1, p1 = p2, q1 = q2;
    if (v - a < 1e-12 || std::abs(static_cast<double>(p1) / q1 - x) < 1e-15 * std::abs(x)) break;
    v = 1 / (v - a);
  }
  return rational::make(p1, q1);
}

}  // namespace rwd::cpu
