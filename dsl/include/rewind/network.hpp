// rewind: a network is a stack of a block with a scalar type and a policy for the budget.
//
// A network deeper than the rewind budget L* of its scalar type would train on rounding noise,
// and one whose budget is unknown (an alpha from the data that may come near zero) may do so at
// any depth. With a compile-time depth and a block without runtime scalars, either is a compile
// error (E007, E014); otherwise building the network throws the same message. Policies say
// otherwise on purpose:
//   policy::strict   (default) depth <= L*, checked
//   policy::lossy    over budget on purpose (to measure the cliff, say); nothing is checked
//   policy::checkpointed  store the state every k <= L*/2 layers and rewind inside segments:
//                    exact to float precision at any depth, memory O(depth / k)
//   policy::exact    hold the state in fixed point and multiply by each rational alpha through an
//                    information ledger: a bit-exact rewind at any depth, the ledger growing by
//                    log2(d/n) bits per element per layer (exact_ledger_bits below)
#pragma once

#include <cstddef>
#include <string>

#include "budget.hpp"

namespace rwd {

namespace policy {
struct strict {
  static constexpr std::string_view name = "strict";
  static constexpr bool checks_budget = true;
};
struct lossy {
  static constexpr std::string_view name = "lossy";
  static constexpr bool checks_budget = false;
};
struct checkpointed {
  static constexpr std::string_view name = "checkpointed";
  static constexpr bool checks_budget = false;  // segments keep every rewind inside the budget
};
struct exact {
  static constexpr std::string_view name = "exact";
  static constexpr bool checks_budget = false;  // the rewind is bit-exact at any depth
};
}  // namespace policy

template <class Scalar, class Policy, class Block, std::size_t Depth>
struct network_t {
  using scalar = Scalar;
  using policy_type = Policy;
  using block_type = Block;
  static constexpr std::size_t static_depth = Depth;
  std::size_t depth = Depth;
  env bindings{};
  budget_report budget{};
};

namespace detail {
template <class Block>
constexpr bool budget_is_static() {
  return !Block::has_runtime_scalars;
}

template <class Block>
constexpr void check_runtime_coefficients(const env& bindings) {
  hana::for_each(Block::params(), [&](auto t) {  // every runtime scalar is bound, and finite
    using P = typename decltype(t)::type;
    const double value = scalar_value(P{}, bindings);
    if (!(value - value == 0))  // NaN or infinite
      throw error("rewind: the runtime scalar '" + std::string(P::name) + "' is " + format_double(value, 6) +
                  "; a block's scalars must be finite");
  });
  hana::for_each(Block::updates(), [&](auto u) {
    using U = decltype(u);
    if constexpr (coefficient_kind_of<U>() == coefficient_kind::runtime) {
      const print_context ctx{&bindings};
      const double alpha = scalar_value(typename U::alpha{}, bindings);
      if (alpha == 0) throw error(e002_runtime(U::text(ctx)));
      if (!(alpha - alpha == 0))
        throw error("rewind: the coefficient alpha of the target is " + format_double(alpha, 6) + " in " + U::text(ctx) +
                    " (its runtime scalars overflow); the update cannot be inverted");
    }
  });
}

inline std::string e007_runtime(std::string_view scalar, std::size_t depth, const budget_report& b) {
  return std::string(REWIND_E007) + " (depth " + std::to_string(depth) + ", L* = " +
         std::to_string(b.layers) + " layers in " + std::string(scalar) + ", rate " +
         format_double(b.rate, 6) + " per layer)";
}

/// E014 with the update whose alpha may come near zero, and its range.
template <class Block>
std::string e014_runtime(const budget_report& b, const env& bindings) {
  std::string which;
  std::size_t i = 0;
  hana::for_each(Block::updates(), [&](auto u) {
    using U = decltype(u);
    const print_context ctx{&bindings};
    if (i++ == b.unbounded_update)
      which = "alpha = " + to_string(typename U::alpha{}, ctx) + " in " + U::text(ctx) + " ranges over [" +
              format_double(b.unbounded_range.lo, 6) + ", " + format_double(b.unbounded_range.hi, 6) + "]";
  });
  return std::string(REWIND_E014) + " (" + which + ")";
}

/// The strict policy's run-time check, for a network and at a model's mode::reversible: refuses an
/// unknown budget (E014) and a depth past the budget (E007); a model names what else it offers
/// past them (`instead`: for E007; `instead_of_unknown`: for E014).
template <class Scalar, class Block>
constexpr void check_rewind_budget(const budget_report& b, std::size_t depth, const env& bindings, std::string_view instead = {},
                         std::string_view instead_of_unknown = {}) {
  const auto in_model = [](std::string_view what) { return what.empty() ? std::string() : "; in this model: " + std::string(what); };
  if (!b.known()) throw error(e014_runtime<Block>(b, bindings) + in_model(instead_of_unknown));
  if (static_cast<long long>(depth) > b.layers) throw error(e007_runtime(scalar_traits<Scalar>::name, depth, b) + in_model(instead));
}

/// The compile-time E014, in a function named after the update whose alpha may come near zero
/// (the compiler prints the update's type beside the message).
template <class Update>
constexpr void refuse_alpha_near_zero() {
  static_assert(!std::is_same_v<Update, Update>, REWIND_E014);
}
}  // namespace detail

/// Bits the information ledger of policy::exact gains per layer, summed over the state variables
/// (per element of each): log2(d/n) for every update s <- (n/d) s + g with n < d.
template <class Block>
constexpr double exact_ledger_bits(Block, const env& bindings = {}) {
  double bits = 0;
  hana::for_each(Block::updates(), [&](auto u) {
    using U = decltype(u);
    if constexpr (coefficient_kind_of<U>() != coefficient_kind::data_dependent) {
      const double a = cmath::abs(scalar_value(typename U::alpha{}, bindings));
      if (a < 1) bits += cmath::log(1 / a) / cmath::ln2;
    }
  });
  return bits;
}

/// 16-bit words one element's ledger holds after `depth` layers gaining `bits_per_layer`, at
/// most: while its stack holds h words its head is at least L, so its number (below
/// (L + 1) 2^(depth bits_per_layer)) gives 16 h < depth bits_per_layer + 2^-32; one word more for
/// blocks that also shrink the same ledger. Beside them each element has an 8-byte head.
constexpr std::size_t exact_ledger_words(double bits_per_layer, std::size_t depth) {
  return static_cast<std::size_t>((static_cast<double>(depth) * bits_per_layer + 1) / 16.0) + 1;
}

namespace detail {
/// The run-time checks of a network: runtime scalars, and the depth against the budget.
template <class Scalar, class Policy, class Block, std::size_t Depth>
constexpr network_t<Scalar, Policy, Block, Depth> checked_network(stack_t<Block, Depth> s, const env& bindings) {
  check_runtime_coefficients<Block>(bindings);
  network_t<Scalar, Policy, Block, Depth> n{s.depth, bindings, budget<Scalar>(Block{}, bindings)};
  if (Policy::checks_budget) check_rewind_budget<Scalar, Block>(n.budget, n.depth, bindings);
  return n;
}
}  // namespace detail

/// A network of `stack` in scalar type Scalar under Policy, runtime scalars from `bindings`.
template <class Scalar, class Policy = policy::strict, class Block, std::size_t Depth>
constexpr auto network(stack_t<Block, Depth> s, const env& bindings = {}) {
  constexpr bool checked_statically = Depth != dynamic_depth && Policy::checks_budget && detail::budget_is_static<Block>();
  constexpr budget_report static_report = [] {
    if constexpr (checked_statically) return budget<Scalar>(Block{});
    else return budget_report{};
  }();
  if constexpr (!static_report.known()) {
    detail::refuse_alpha_near_zero<std::remove_cvref_t<decltype(hana::at_c<static_report.unbounded_update>(Block::updates()))>>();
    return network_t<Scalar, Policy, Block, Depth>{};  // one message: nothing below is evaluated
  } else if constexpr (static_report.layers < static_cast<long long>(Depth)) {
    static_assert(static_report.layers >= static_cast<long long>(Depth), REWIND_E007);
    return network_t<Scalar, Policy, Block, Depth>{};
  } else {
    return detail::checked_network<Scalar, Policy>(s, bindings);
  }
}


}  // namespace rwd
