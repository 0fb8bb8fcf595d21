// rewind: the smallest eigenvalue modulus of a small real matrix, at compile time, for the budget
// analysis (budget.hpp): the rate at which one linearised layer's inverse amplifies error.
#pragma once

#include <array>
#include <cstddef>

#include "../rational.hpp"

namespace rwd::detail {

struct complex {
  double re = 0, im = 0;
  friend constexpr complex operator+(complex a, complex b) { return {a.re + b.re, a.im + b.im}; }
  friend constexpr complex operator-(complex a, complex b) { return {a.re - b.re, a.im - b.im}; }
  friend constexpr complex operator*(complex a, complex b) {
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
  }
  friend constexpr complex operator/(complex a, complex b) {
    const double d = b.re * b.re + b.im * b.im;
    return {(a.re * b.re + a.im * b.im) / d, (a.im * b.re - a.re * b.im) / d};
  }
  constexpr double abs() const { return cmath::sqrt(re * re + im * im); }
};

template <std::size_t N>
using matrix = std::array<std::array<double, N>, N>;

template <std::size_t N>
constexpr matrix<N> identity() {
  matrix<N> m{};
  for (std::size_t i = 0; i < N; ++i) m[i][i] = 1;
  return m;
}

template <std::size_t N>
constexpr matrix<N> product(const matrix<N>& a, const matrix<N>& b) {
  matrix<N> c{};
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t k = 0; k < N; ++k)
      for (std::size_t j = 0; j < N; ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

/// The smallest modulus of the eigenvalues of m: closed form for 1x1 and 2x2; otherwise the
/// characteristic polynomial (Faddeev-LeVerrier) and its roots (Durand-Kerner).
template <std::size_t N>
constexpr double min_eigen_modulus(const matrix<N>& m) {
  if constexpr (N == 1) return cmath::abs(m[0][0]);
  else if constexpr (N == 2) {
    const double tr = m[0][0] + m[1][1], det = m[0][0] * m[1][1] - m[0][1] * m[1][0];
    const double disc = tr * tr - 4 * det;
    if (disc < 0) return cmath::sqrt(cmath::abs(det));  // a complex pair: |l|^2 = det
    const double r = cmath::sqrt(disc);
    const double big = tr >= 0 ? (tr + r) / 2 : (tr - r) / 2;  // no cancellation
    if (big == 0) return 0;
    return cmath::abs(det / big) < cmath::abs(big) ? cmath::abs(det / big) : cmath::abs(big);
  } else {
    // p(l) = l^N + c[1] l^(N-1) + ... + c[N]
    std::array<double, N + 1> c{};
    c[0] = 1;
    matrix<N> mk{};  // M_k of Faddeev-LeVerrier
    for (std::size_t k = 1; k <= N; ++k) {
      matrix<N> prev = mk;
      for (std::size_t i = 0; i < N; ++i) prev[i][i] += c[k - 1];
      mk = product(m, prev);
      double tr = 0;
      for (std::size_t i = 0; i < N; ++i) tr += mk[i][i];
      c[k] = -tr / static_cast<double>(k);
    }
    std::array<complex, N> z{};
    complex seed{0.4, 0.9}, p{1, 0};
    double scale = 1;
    for (std::size_t i = 1; i <= N; ++i)
      scale = cmath::abs(c[i]) > scale ? cmath::abs(c[i]) : scale;
    for (std::size_t i = 0; i < N; ++i, p = p * seed) z[i] = complex{p.re * scale, p.im * scale};
    for (int iter = 0; iter < 2000; ++iter) {
      double change = 0;
      for (std::size_t i = 0; i < N; ++i) {
        complex num{1, 0};  // Horner
        complex v{c[0], 0};
        for (std::size_t k = 1; k <= N; ++k) v = v * z[i] + complex{c[k], 0};
        num = v;
        complex den{1, 0};
        for (std::size_t j = 0; j < N; ++j)
          if (j != i) den = den * (z[i] - z[j]);
        const complex step = num / den;
        z[i] = z[i] - step;
        change += step.abs();
      }
      if (change < 1e-15) break;
    }
    double least = cmath::infinity;
    for (const auto& r : z) least = r.abs() < least ? r.abs() : least;
    return least;
  }
}

}  // namespace rwd::detail
