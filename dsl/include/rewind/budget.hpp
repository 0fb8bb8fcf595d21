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
// worst case over the box of declared intervals (a grid that includes every corner while the box
// has few varying axes, then a coordinate search; see worst_rate). Elementwise functions applied
// directly to state use their known slope range (tanh [0, 1], sigmoid [0, 1/4], relu [0, 1]; exp
// is linearised at 0).
// An alpha computed from the data enters with the value of its range nearest zero (range.hpp):
// 0.5 + 0.5*sigmoid(s(w)) lies in [0.5, 1] and counts as 0.5. When its range contains zero
// (exp(v) for a state variable v, a sigmoid that may underflow) the budget is unknown: the
// rewind may amplify without bound, and the strict policy refuses to rewind such a block (E014).
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string_view>

#include "block.hpp"
#include "detail/eigenvalues.hpp"
#include "range.hpp"
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
  data_dependent,  // some alpha is computed from the data: a budget from its range, if bounded
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
  static constexpr std::size_t max_slopes = 32;
  static constexpr std::size_t no_update = std::numeric_limits<std::size_t>::max();

  block_class kind = block_class::conservative;
  double epsilon = 0;
  double napkin_rate = 1;  // prod max(1, 1/|alpha|): slope 0
  double rate = 1;         // worst case over the slope box of rho(M(s)^-1)
  double depth = cmath::infinity;  // L* = ln(1/eps) / ln(rate)
  long long layers = unlimited_layers;
  std::array<slope_range, max_slopes> slopes{};
  std::size_t n_slopes = 0;
  std::array<double, max_slopes> worst_slope{};  // where the worst case is reached
  /// The first update (in the block's order) whose alpha, computed from the data, has a range
  /// that contains zero, and that range: the budget is then unknown.
  std::size_t unbounded_update = no_update;
  interval unbounded_range{};

  constexpr bool unlimited() const { return layers == unlimited_layers; }
  constexpr bool known() const { return unbounded_update == no_update; }
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
  } else if constexpr (is_call<E> || is_apply<E>) {
    constexpr std::size_t k = [] {
      if constexpr (is_call<E>) return index_in<typename E::map_type>(Sources{});
      else return index_in<typename E::function>(Sources{});
    }();
    row = linear_row<State, N, Sources>(hana::front(E::children()), s, bindings);
    for (auto& r : row) r *= s[k];
  } else {
    // a node: its operands' rows times its partials at the linearisation point, where a
    // state-dependent operand is 0 (a product of two of them vanishes there)
    static_assert(states_partials<E>(),
                  "rewind: no linearisation for this node kind: it states no partials rule (a quotient belongs to the derived inverse only)");
    hana::unpack(E::children(), [&](auto... operand) {
      const auto point = [&](auto x) {
        if constexpr (is_scalar(x)) return scalar_value(x, bindings);
        else return 0.0;
      };
      const std::array<double, sizeof...(operand)> partial =
          hana::unpack(E::partials(point(operand)..., 1.0), [](auto... p) { return std::array<double, sizeof...(p)>{p...}; });
      std::size_t k = 0;
      const auto add = [&](auto x) {
        const auto r = linear_row<State, N, Sources>(x, s, bindings);
        for (std::size_t i = 0; i < N; ++i) row[i] += partial[k] * r[i];
        ++k;
      };
      (add(operand), ...);
    });
  }
  return row;
}

/// The alpha an update contributes to the analysis: its value, or for an alpha computed from the
/// data the value of its range nearest zero (0 when the range contains zero).
template <class U>
constexpr double alpha_for_budget(const env& bindings) {
  if constexpr (coefficient_kind_of<U>() == coefficient_kind::data_dependent)
    return range_of(typename U::alpha{}, bindings).nearest_zero();
  else return scalar_value(typename U::alpha{}, bindings);
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
    row[t] += alpha_for_budget<U>(bindings);
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
  constexpr std::size_t sources = decltype(hana::length(detail::slope_sources<Block>()))::value;
  budget_report r;
  if constexpr (!invertible<Block>) {
    return r;  // refused above, in one message
  } else if constexpr (sources > budget_report::max_slopes) {
    static_assert(sources <= budget_report::max_slopes, REWIND_E015);
    return r;
  } else {
    r.kind = classify(b, bindings);
    r.epsilon = scalar_traits<Scalar>::epsilon;
    std::size_t i = 0;
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      if constexpr (coefficient_kind_of<U>() == coefficient_kind::data_dependent) {
        const interval a = range_of(typename U::alpha{}, bindings);
        if (a.contains_zero() && r.known()) r.unbounded_update = i, r.unbounded_range = a;
      }
      ++i;
    });
    if (!r.known()) {
      r.rate = r.napkin_rate = cmath::infinity;
      r.depth = 0;
      r.layers = 0;
      return r;
    }
    return detail::static_budget<Block>(r, bindings);
  }
}

namespace detail {
/// The worst rate 1 / min |eigenvalue of M(s)| over the box of slopes, and where it is reached
/// (into r.worst_slope). With k axes that vary: a grid that includes every corner (257, 33, 9, 5
/// points per axis for k = 1 to 4, the 2^k corners for k = 5 to 8), then for k > 4 a coordinate
/// search: sweeps that move one axis at a time to each of its points and keep any move that is
/// worse, until a sweep makes none (at most 4). It starts from the worst corner with 5 points per
/// axis for k <= 8; past that, from the low and the high corner, moving between an axis's two
/// ends. Under a thousand points for up to max_slopes axes: a 32-map block is analysed at
/// compile time in seconds, within clang's default constexpr step limit.
template <class Block>
constexpr double worst_rate(budget_report& r, const env& bindings) {
  using point = std::array<double, budget_report::max_slopes>;
  std::size_t varying = 0;
  for (std::size_t i = 0; i < r.n_slopes; ++i) varying += r.slopes[i].lo < r.slopes[i].hi;
  double worst = -1;
  const auto visit = [&](const point& s) {
    const double least = min_eigen_modulus(layer_matrix<Block>(s, bindings));
    const double rate = least > 0 ? 1 / least : cmath::infinity;
    if (rate > worst) {
      worst = rate;
      r.worst_slope = s;
      return true;
    }
    return false;
  };
  const auto at = [&](std::size_t i, std::size_t k, std::size_t per_axis) {  // k-th of per_axis points
    const auto& range = r.slopes[i];
    return range.lo + (range.hi - range.lo) * static_cast<double>(k) / static_cast<double>(per_axis - 1);
  };
  point lo{}, hi{};
  for (std::size_t i = 0; i < r.n_slopes; ++i) lo[i] = r.slopes[i].lo, hi[i] = r.slopes[i].hi;
  const auto search = [&](point s, std::size_t per_axis) {
    visit(s);
    for (int sweep = 0; sweep < 4; ++sweep) {
      bool worse = false;
      for (std::size_t i = 0; i < r.n_slopes; ++i) {
        if (!(r.slopes[i].lo < r.slopes[i].hi)) continue;
        for (std::size_t k = 0; k < per_axis; ++k) {
          if (at(i, k, per_axis) == s[i]) continue;
          point t = s;
          t[i] = at(i, k, per_axis);
          if (visit(t)) s = t, worse = true;
        }
      }
      if (!worse) break;
    }
  };
  if (varying > 8) {
    search(lo, 2);
    search(hi, 2);
    return worst;
  }
  const std::size_t per_axis = varying <= 1 ? 257 : varying == 2 ? 33 : varying == 3 ? 9 : varying == 4 ? 5 : 2;
  std::size_t total = 1;
  for (std::size_t i = 0; i < varying; ++i) total *= per_axis;
  for (std::size_t index = 0; index < total; ++index) {
    point s = lo;
    std::size_t rest = index;
    for (std::size_t i = 0; i < r.n_slopes; ++i)
      if (r.slopes[i].lo < r.slopes[i].hi) s[i] = at(i, rest % per_axis, per_axis), rest /= per_axis;
    visit(s);
  }
  if (varying > 4) search(r.worst_slope, 5);
  return worst;
}

template <class Block>
constexpr budget_report static_budget(budget_report r, const env& bindings) {
  hana::for_each(Block::updates(), [&](auto u) {
    const double a = cmath::abs(detail::alpha_for_budget<decltype(u)>(bindings));
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
    r.slopes[r.n_slopes++] = range;
  });
  r.rate = worst_rate<Block>(r, bindings);
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
