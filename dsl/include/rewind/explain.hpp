// rewind: the derivation of a block, as text a reader can check by hand.
//
//   std::cout << rwd::explain(momentum);
//
// prints the forward updates, the derived inverse, the derived adjoint, the class, the
// amplification per layer and the budget table (float32, float64, bfloat16).
#pragma once

#include <string>

#include "adjoint.hpp"
#include "budget.hpp"
#include "inverse.hpp"
#include "network.hpp"

namespace rwd {

namespace detail {
inline std::string pad(std::string s, std::size_t n) {
  if (s.size() < n) s.append(n - s.size(), ' ');
  return s;
}
template <class Scalar, class Block>
std::string budget_line(const Block& b, const env& bindings) {
  const budget_report r = budget<Scalar>(b, bindings);
  std::string line = "  " + pad(std::string(scalar_traits<Scalar>::name), 10) + "eps " +
                     pad(format_double(r.epsilon, 3), 10);
  if (!r.known()) return line + "L* unknown (an alpha from the data may come near zero)\n";
  if (r.unlimited()) return line + "L* unlimited\n";
  return line + "L* " + std::to_string(r.layers) + " layers (" + format_double(r.depth, 5) + ")\n";
}
}  // namespace detail

/// The derivation of `b`: forward, inverse, adjoint, class, amplification and budgets.
template <class Block>
std::string explain(Block b, const env& bindings = {}, std::string_view title = "block") {
  static_assert(detail::usable_block<Block>(), "rewind: explain() takes a block");
  const print_context ctx{&bindings};
  std::string out;
  out += std::string(title) + " over state (";
  bool first = true;
  hana::for_each(Block::state(), [&](auto t) {
    out += (first ? "" : ", ") + std::string(decltype(t)::type::name);
    first = false;
  });
  out += ")\n";
  hana::for_each(Block::maps(), [&](auto t) {
    using M = typename decltype(t)::type;
    out += "  map " + std::string(M::name) + ": " + M::describe() + " (W = state width)";
    if constexpr (M::slope_declared)
      out += ", slope in [" + detail::format_rational(M::slope_type::lo) + ", " +
             detail::format_rational(M::slope_type::hi) + "]";
    if constexpr (M::range_declared)
      out += ", output in [" + detail::format_rational(M::range_type::lo) + ", " + detail::format_rational(M::range_type::hi) + "]";
    out += "\n";
  });
  hana::for_each(Block::params(), [&](auto t) {
    using P = typename decltype(t)::type;
    const auto value = bindings.find_scalar(P::name);
    out += "  runtime scalar " + std::string(P::name) +
           (value ? " = " + detail::format_double(*value, 8) : std::string(" (unbound)")) + "\n";
  });

  out += "forward:\n";
  hana::for_each(b.updates(), [&](auto u) { out += "  " + u.text(ctx) + "\n"; });

  out += "inverse (derived; runs the updates backward, last first):\n";
  hana::for_each(inverse(b).updates(), [&](auto u) { out += "  " + u.text(ctx) + "\n"; });

  out += "adjoint (derived vector-Jacobian product; vbar = dloss/dv), last update first:\n";
  hana::for_each(adjoint(b), [&](auto a) {
    using A = decltype(a);
    out += "  [" + A::update_type::text(ctx) + "]\n";
    hana::for_each(A::steps(), [&](auto s) {
      out += "    " + s.text(ctx);
      if constexpr (detail::is_map_step<decltype(s)>) {
        using M = typename decltype(s)::call_type::map_type;
        out += "   (keeps " + std::string(M::name) + "'s input and " +
               std::to_string(M::activation_count) +
               " activation output(s) from the rewind)";
      }
      out += "\n";
    });
  });

  if (Block::has_runtime_scalars) {
    bool bound = true;
    hana::for_each(Block::params(), [&](auto t) {
      bound = bound && bindings.find_scalar(decltype(t)::type::name).has_value();
    });
    if (!bound) {
      out += "class and budget: depend on the runtime scalars; bind them to see the figures\n";
      return out;
    }
  }
  const budget_report r = budget<float>(b, bindings);
  out += "class: " + std::string(to_string(r.kind)) + "\n";
  hana::for_each(b.updates(), [&](auto u) {
    using U = decltype(u);
    if constexpr (coefficient_kind_of<U>() == coefficient_kind::data_dependent) {
      const interval a = range_of(typename U::alpha{}, bindings);
      out += "  alpha = " + to_string(typename U::alpha{}, ctx) + " of " + std::string(U::target::name) +
             " (from the data) ranges over [" + detail::format_double(a.lo, 4) + ", " + detail::format_double(a.hi, 4) + "]" +
             (a.contains_zero() ? ", which contains zero\n" : "; the analysis takes " + detail::format_double(a.nearest_zero(), 4) + "\n");
    }
  });
  if (!r.known()) {
    out += "amplification per layer: unbounded (an alpha from the data may come near zero); no budget:\n"
           "  the strict policy refuses to rewind the block (E014); policy::checkpointed remains, and\n"
           "  every alpha element is checked at run time\n";
    return out;
  }
  out += "amplification of the rewind per layer: napkin (alphas only) " +
         detail::format_double(r.napkin_rate, 6) + "; linearised " +
         detail::format_double(r.rate, 6);
  std::string slopes;
  for (std::size_t i = 0; i < r.n_slopes; ++i) {
    const auto& s = r.slopes[i];
    slopes += std::string(slopes.empty() ? "" : ", ") + std::string(s.name) + "' in [" +
              detail::format_double(s.lo, 4) + ", " + detail::format_double(s.hi, 4) + "]";
    if (s.is_map && !s.declared) slopes += " (no declared slope: assumes slope 0)";
  }
  out += slopes.empty() ? "\n" : " with " + slopes + "\n";
  if (r.kind == block_class::expansive)
    out += "  the forward pass amplifies (some |alpha| > 1); the rewind contracts\n";
  out += "budget (layers of exact rewind, L* = ln(1/eps) / ln(rate)):\n";
  out += detail::budget_line<float>(b, bindings);
  out += detail::budget_line<double>(b, bindings);
  out += detail::budget_line<bfloat16>(b, bindings);
  if (const double bits = exact_ledger_bits(b, bindings); bits > 0)
    out += "exact rewind (policy::exact): the ledger gains " + detail::format_double(bits, 4) +
           " bits per element per layer: " + detail::format_double(bits * 1024 / 8, 5) +
           " bytes per element at depth 1024, held in at most " + std::to_string(8 + 2 * exact_ledger_words(bits, 1024)) +
           " (an 8-byte head and 16-bit words)\n";
  return out;
}

}  // namespace rwd
