// rewind: the rewind budget of a block.
//
// Inverting an update s <- alpha*s + g divides by alpha, so the rewind multiplies the rounding
// error of the state by about 1/|alpha|. Per layer the napkin amplification is
//     A = prod over updates of max(1, 1/|alpha|),
// and with machine epsilon e of the scalar type the exact rewind holds to about
//     L* = ln(1/e) / ln(A)                 (unlimited when A == 1: a conservative block).
// The napkin assumes the maps have slope 0. With each map's Jacobian replaced by a scalar slope
// s, one layer is a small matrix M(s) over the state variables (momentum: [[1+s, mu], [s, mu]]
// on (x, v)), and the rewind amplifies error by the spectral radius of M(s)^-1, i.e.
// 1 / min |eigenvalue of M(s)|. A map may declare its slope interval; the analysis takes the
// worst case over the box of declared intervals (a grid that includes every corner). Elementwise
// functions applied directly to state use their known slope range (tanh [0, 1], sigmoid
// [0, 1/4], relu [0, 1]; exp is linearised at 0).
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string_view>

#include "block.hpp"
#include "rational.hpp"

namespace rwd {

/// The 16-bit brain float, for budgets (the DSL does no arithmetic in it).
struct bfloat16 {};
/// IEEE half precision, for budgets.
struct float16 {};

template <class Scalar>
struct scalar_traits;
template <>
struct scalar_traits<float> {
  static constexpr double epsilon = 1.0 / (1 << 23);  // numeric_limits<float>::epsilon()
  static constexpr std::string_view name = "float32";
};
template <>
struct scalar_traits<double> {
  static constexpr double epsilon = 1.0 / (1ull << 52);
  static constexpr std::string_view name = "float64";
};
template <>
struct scalar_traits<bfloat16> {
  static constexpr double epsilon = 1.0 / (1 << 7);
  static constexpr std::string_view name = "bfloat16";
};
template <>
struct scalar_traits<float16> {
  static constexpr double epsilon = 1.0 / (1 << 10);
  static constexpr std::string_view name = "float16";
};

enum class block_class {
  conservative,    // every |alpha| == 1: the rewind does not amplify (A == 1)
  dissipative,     // some |alpha| < 1, none > 1: A > 1, finite budget
  expansive,       // some |alpha| > 1: the forward pass amplifies instead
  data_dependent,  // some alpha is computed from the data: no static budget, audit at run time
};

constexpr std::string_view to_string(block_class c) {
  switch (c) {
    case block_class::conservative: return "conservative";
    case block_class::dissipative: return "dissipative";
    case block_class::expansive: return "expansive";
    case block_class::data_dependent: return "data-dependent";
  }
  return "?";
}

/// One slope variable of the linearisation: a learned map or an elementwise function.
struct slope_range {
  std::string_view name;
  double lo = 0, hi = 0;
  bool declared = false;  // by the map's type or an env; false: the napkin's slope 0
  bool is_map = true;
};

struct budget_report {
  static constexpr long long unlimited_layers = std::numeric_limits<long long>::max();
  static constexpr std::size_t max_slopes = 8;

  block_class kind = block_class::conservative;
  double epsilon = 0;
  double napkin_rate = 1;  // prod max(1, 1/|alpha|): slope 0
  double rate = 1;         // worst case over the slope box of rho(M(s)^-1)
  double depth = cmath::infinity;  // L* = ln(1/eps) / ln(rate)
  long long layers = unlimited_layers;
  std::array<slope_range, max_slopes> slopes{};
  std::size_t n_slopes = 0;
  std::array<double, max_slopes> worst_slope{};  // where the worst case is reached

  constexpr bool unlimited() const { return layers == unlimited_layers; }
  constexpr bool known() const { return kind != block_class::data_dependent; }
  /// True when some map has no declared slope: the figure then assumes slope 0 for it.
  constexpr bool assumes_zero_slope() const {
    for (std::size_t i = 0; i < n_slopes; ++i)
      if (slopes[i].is_map && !slopes[i].declared) return true;
    return false;
  }
};

/// Rates within this distance of 1 count as 1 (eigenvalues of defective matrices are found to
/// about sqrt(double eps)); L* would be over 10^7 layers there anyway.
inline constexpr double conservative_tolerance = 1e-6;

/// The elementwise functions an expression applies outside learned maps (hana types).
template <expression E>
constexpr auto functions_of(E) {
  auto inner = hana::fold_left(E::children(), hana::make_tuple(), [](auto acc, auto c) {
    return detail::insert_all(acc, functions_of(c));
  });
  if constexpr (detail::is_apply<E>)
    return detail::insert_unique(inner, hana::type_c<typename E::function>);
  else return inner;
}

namespace detail {

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

/// The slope variables of a block: its maps, then the elementwise functions applied to state.
template <class Block>
constexpr auto slope_sources() {
  auto fns = hana::fold_left(Block::updates(), hana::make_tuple(), [](auto acc, auto u) {
    using U = decltype(u);
    return insert_all(insert_all(acc, functions_of(typename U::alpha{})),
                      functions_of(typename U::g{}));
  });
  return hana::concat(Block::maps(), fns);
}

/// d(E)/d(state) at the linearisation: each map and function replaced by slope * identity.
template <class State, std::size_t N, class Sources, expression E>
constexpr std::array<double, N> linear_row(E, const std::array<double, budget_report::max_slopes>& s,
                                           const env& bindings) {
  std::array<double, N> row{};
  if constexpr (state_variable<E>) {
    row[index_in<E>(State{})] = 1;
  } else if constexpr (is_scalar(E{})) {
    // constants and runtime scalars: no dependence on the state
  } else if constexpr (is_neg<E>) {
    row = linear_row<State, N, Sources>(typename E::negated{}, s, bindings);
    for (auto& r : row) r = -r;
  } else if constexpr (is_call<E> || is_apply<E>) {
    constexpr std::size_t k = [] {
      if constexpr (is_call<E>) return index_in<typename E::map_type>(Sources{});
      else return index_in<typename E::function>(Sources{});
    }();
    row = linear_row<State, N, Sources>(hana::front(E::children()), s, bindings);
    for (auto& r : row) r *= s[k];
  } else {
    hana::unpack(E::children(), [&](auto a, auto b) {
      if constexpr (is_add<E> || is_sub<E>) {
        const auto ra = linear_row<State, N, Sources>(a, s, bindings);
        const auto rb = linear_row<State, N, Sources>(b, s, bindings);
        for (std::size_t i = 0; i < N; ++i) row[i] = is_add<E> ? ra[i] + rb[i] : ra[i] - rb[i];
      } else if constexpr (is_scalar(a)) {
        row = linear_row<State, N, Sources>(b, s, bindings);
        const double c = scalar_value(a, bindings);
        for (auto& r : row) r *= c;
      } else if constexpr (is_scalar(b)) {
        row = linear_row<State, N, Sources>(a, s, bindings);
        const double c = scalar_value(b, bindings);
        for (auto& r : row) r *= c;
      }
      // a product of two state-dependent factors vanishes at the linearisation point 0
    });
  }
  return row;
}

/// M(s): one layer of the block, linearised, as a matrix over its state.
template <class Block>
constexpr auto layer_matrix(const std::array<double, budget_report::max_slopes>& s, const env& bindings) {
  constexpr auto state = Block::state();
  using State = std::remove_const_t<decltype(state)>;
  constexpr std::size_t n = Block::state_size;
  using Sources = decltype(slope_sources<Block>());
  matrix<n> m = identity<n>();
  hana::for_each(Block::updates(), [&](auto u) {
    using U = decltype(u);
    const std::size_t t = index_in<typename U::target>(state);
    auto row = linear_row<State, n, Sources>(typename U::g{}, s, bindings);
    row[t] += scalar_value(typename U::alpha{}, bindings);
    matrix<n> step = identity<n>();
    step[t] = row;
    m = product(step, m);
  });
  return m;
}

}  // namespace detail

/// The class of a block, from its coefficients (runtime scalars from `bindings`).
template <class Block>
constexpr block_class classify(Block, const env& bindings = {}) {
  bool data = false, expands = false, dissipates = false;
  hana::for_each(Block::updates(), [&](auto u) {
    using U = decltype(u);
    if constexpr (coefficient_kind_of<U>() == coefficient_kind::data_dependent) data = true;
    else {
      const double a = cmath::abs(scalar_value(typename U::alpha{}, bindings));
      expands = expands || a > 1;
      dissipates = dissipates || a < 1;
    }
  });
  return data ? block_class::data_dependent
              : expands ? block_class::expansive
                        : dissipates ? block_class::dissipative : block_class::conservative;
}

/// Does some update of the block compute its alpha from the state (affine coupling)?
template <class Block>
constexpr bool has_data_dependent_coefficient() {
  return hana::unpack(Block::updates(), [](auto... u) {
    return ((coefficient_kind_of<decltype(u)>() == coefficient_kind::data_dependent) || ... || false);
  });
}

namespace detail {
template <class Block>
constexpr budget_report static_budget(budget_report r, const env& bindings);
}  // namespace detail

/// The rewind budget of a block in the scalar type Scalar (see the top of this file).
template <class Scalar, class Block>
constexpr budget_report budget(Block b, const env& bindings = {}) {
  static_assert(detail::usable_block<Block>(), "rewind: budget() takes a block");
  budget_report r;
  r.kind = classify(b, bindings);
  r.epsilon = scalar_traits<Scalar>::epsilon;
  if constexpr (has_data_dependent_coefficient<Block>()) {
    r.rate = r.napkin_rate = cmath::infinity;
    r.depth = 0;
    r.layers = 0;
    return r;
  } else {
    return detail::static_budget<Block>(r, bindings);
  }
}

namespace detail {
template <class Block>
constexpr budget_report static_budget(budget_report r, const env& bindings) {
  hana::for_each(Block::updates(), [&](auto u) {
    const double a = cmath::abs(scalar_value(typename decltype(u)::alpha{}, bindings));
    r.napkin_rate *= a < 1 ? 1 / a : 1;
  });
  // the slope box
  using Sources = decltype(detail::slope_sources<Block>());
  hana::for_each(Sources{}, [&](auto t) {
    using S = typename decltype(t)::type;
    slope_range range;
    range.name = S::name;
    if constexpr (detail::is_map<S>) {
      range.lo = S::slope_lo();
      range.hi = S::slope_hi();
      range.declared = S::slope_declared;
      if (const auto o = bindings.find_slope(S::name)) {
        range.lo = o->lo;
        range.hi = o->hi;
        range.declared = true;
      }
    } else {
      range = {S::name, S::slope_lo, S::slope_hi, true, false};
    }
    if (r.n_slopes == budget_report::max_slopes)
      throw error("rewind: a block with more than 8 maps and functions is not analysed");
    r.slopes[r.n_slopes++] = range;
  });
  // grid over the box, corners included; points per varying axis shrink with the dimension
  std::size_t varying = 0;
  for (std::size_t i = 0; i < r.n_slopes; ++i) varying += r.slopes[i].lo < r.slopes[i].hi;
  const std::size_t per_axis = varying <= 1 ? 257 : varying == 2 ? 33 : varying == 3 ? 9 : 5;
  std::size_t total = 1;
  for (std::size_t i = 0; i < r.n_slopes; ++i)
    total *= r.slopes[i].lo < r.slopes[i].hi ? per_axis : 1;
  double worst = 0;
  for (std::size_t point = 0; point < total; ++point) {
    std::array<double, budget_report::max_slopes> s{};
    std::size_t rest = point;
    for (std::size_t i = 0; i < r.n_slopes; ++i) {
      const auto& range = r.slopes[i];
      if (range.lo < range.hi) {
        const std::size_t k = rest % per_axis;
        rest /= per_axis;
        s[i] = range.lo + (range.hi - range.lo) * static_cast<double>(k) / static_cast<double>(per_axis - 1);
      } else {
        s[i] = range.lo;
      }
    }
    const double least = detail::min_eigen_modulus(detail::layer_matrix<Block>(s, bindings));
    const double rate = least > 0 ? 1 / least : cmath::infinity;
    if (rate > worst) {
      worst = rate;
      r.worst_slope = s;
    }
  }
  r.rate = worst;
  if (r.rate <= 1 + conservative_tolerance) {
    r.depth = cmath::infinity;
    r.layers = budget_report::unlimited_layers;
  } else {
    r.depth = cmath::log(1 / r.epsilon) / cmath::log(r.rate);
    r.layers = static_cast<long long>(cmath::floor(r.depth));
  }
  return r;
}
}  // namespace detail

/// The closed form of the napkin: ln(1/eps) / ln(1/mu), for comparison in tests and tables.
template <class Scalar>
constexpr double napkin_depth(double mu) {
  return cmath::log(1 / scalar_traits<Scalar>::epsilon) / cmath::log(1 / mu);
}

}  // namespace rwd
