// rewind: values that arrive at run time (or in a constexpr context, as values).
//
// An `env` binds runtime scalars by name (`param<"mu">` gets 0.9) and may override the slope
// interval a learned map declares (`f` has slopes in [-1, 1]). It is a literal type of fixed
// capacity, so the same analysis runs in static_assert and at run time.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "diagnostics.hpp"

namespace rwd {

struct env {
  struct scalar_binding {
    std::string_view name;
    double value = 0;
  };
  struct slope_binding {
    std::string_view map;
    double lo = 0, hi = 0;
  };
  static constexpr std::size_t capacity = 8;

  std::array<scalar_binding, capacity> scalars{};
  std::size_t n_scalars = 0;
  std::array<slope_binding, capacity> slopes{};
  std::size_t n_slopes = 0;

  /// A copy with the runtime scalar `name` bound to `value` (replacing an earlier binding).
  constexpr env set(std::string_view name, double value) const {
    env e = *this;
    for (std::size_t i = 0; i < e.n_scalars; ++i)
      if (e.scalars[i].name == name) {
        e.scalars[i].value = value;
        return e;
      }
    if (e.n_scalars == capacity) throw error("rewind: too many runtime scalars in one env");
    e.scalars[e.n_scalars++] = {name, value};
    return e;
  }
  /// A copy in which map `map` has its Jacobian slope bounded by [lo, hi].
  constexpr env slope(std::string_view map, double lo, double hi) const {
    if (!(lo <= hi)) throw error("rewind: a slope interval needs lo <= hi");
    env e = *this;
    for (std::size_t i = 0; i < e.n_slopes; ++i)
      if (e.slopes[i].map == map) {
        e.slopes[i] = {map, lo, hi};
        return e;
      }
    if (e.n_slopes == capacity) throw error("rewind: too many slope bindings in one env");
    e.slopes[e.n_slopes++] = {map, lo, hi};
    return e;
  }
  /// The value bound to runtime scalar `name`, if any.
  constexpr std::optional<double> find_scalar(std::string_view name) const {
    for (std::size_t i = 0; i < n_scalars; ++i)
      if (scalars[i].name == name) return scalars[i].value;
    return std::nullopt;
  }
  /// The slope interval given for map `map`, if any.
  constexpr std::optional<slope_binding> find_slope(std::string_view map) const {
    for (std::size_t i = 0; i < n_slopes; ++i)
      if (slopes[i].map == map) return slopes[i];
    return std::nullopt;
  }
};

}  // namespace rwd
