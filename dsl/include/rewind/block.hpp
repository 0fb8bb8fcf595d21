// rewind: blocks (sequences of updates), ready-made blocks, and stacks of blocks.
//
// A block's state is the set of variables its updates write, in order of first write. Every
// variable an update reads must be in that state (rule 4). `block(...)` checks rules 1 to 3 for
// every update and stops at the first violation with one `rewind E0xx` message. Rule 4 is a
// property of the block that runs, so it is checked where a block is used (stack, budget,
// explain, the models): `chain(momentum, block(w = w + g(x)))` is valid although the second
// block alone reads x without writing it.
#pragma once

#include <cstddef>
#include <string>

#include "diagnostics.hpp"
#include "map.hpp"
#include "update.hpp"

namespace rwd {

template <class... Updates>
struct block_t {
  static constexpr std::size_t size = sizeof...(Updates);
  static constexpr auto updates() { return hana::make_tuple(Updates{}...); }
  /// The state variables (hana types), in order of first write.
  static constexpr auto state() {
    return hana::fold_left(hana::make_tuple(hana::type_c<typename Updates::target>...),
                           hana::make_tuple(),
                           [](auto acc, auto t) { return detail::insert_unique(acc, t); });
  }
  static constexpr std::size_t state_size = decltype(hana::length(state()))::value;
  /// The distinct learned maps of the block (hana types).
  static constexpr auto maps() {
    return hana::fold_left(updates(), hana::make_tuple(), [](auto acc, auto u) {
      using U = decltype(u);
      auto calls = detail::insert_all(calls_of(typename U::alpha{}), calls_of(typename U::g{}));
      return hana::fold_left(calls, acc, [](auto a, auto c) {
        return detail::insert_unique(a, hana::type_c<typename decltype(c)::type::map_type>);
      });
    });
  }
  /// The runtime scalars the block reads (hana types).
  static constexpr auto params() {
    return hana::fold_left(updates(), hana::make_tuple(), [](auto acc, auto u) {
      using U = decltype(u);
      return detail::insert_all(detail::insert_all(acc, params_of(typename U::alpha{})),
                                params_of(typename U::g{}));
    });
  }
  static constexpr bool has_runtime_scalars = decltype(hana::length(params()))::value > 0;
  static constexpr bool is_inverse = (Updates::is_inverse && ... && true);
};

namespace detail {
template <class T> inline constexpr bool is_block = false;
template <class... U> inline constexpr bool is_block<block_t<U...>> = true;

/// Rules 1 to 4 for a canonical update (or inverse update) U of a block whose state is `state`:
/// its target is a state variable, alpha is not zero whatever the data, neither alpha nor g reads
/// the target, and they read only the block's state.
template <class U, class State>
constexpr bool canonical_update_is_invertible(State state) {
  using T = typename U::target;
  using A = typename U::alpha;
  using G = typename U::g;
  if constexpr (!state_variable<T>) return false;
  else {
    const auto read = insert_all(variables_of(A{}), variables_of(G{}));
    return !identically_zero(A{}) && !reads<T>(A{}) && !reads<T>(G{}) &&
           decltype(hana::all_of(read, [&](auto v) { return hana::contains(state, v); }))::value;
  }
}
template <class B>
constexpr bool updates_are_invertible() {
  return hana::unpack(B::updates(), [](auto... u) { return (canonical_update_is_invertible<decltype(u)>(B::state()) && ...); });
}

/// Rule 4 for an assignment within a block whose state is `state`.
template <class Assignment, class State>
constexpr bool reads_only_state(State state) {
  auto read = variables_of(typename Assignment::rhs{});
  return hana::all_of(read, [&](auto v) { return hana::contains(state, v); });
}

template <class Assignment>
constexpr void check_rules_1_to_3() {
  constexpr diagnosis d = diagnose<Assignment>();
  // one static_assert fires, and only one: the compiler stops after one readable message
  if constexpr (d == diagnosis::e001_map_reads_target) static_assert(d == diagnosis::ok, REWIND_E001);
  else if constexpr (d == diagnosis::e002_alpha_zero) static_assert(d == diagnosis::ok, REWIND_E002);
  else if constexpr (d == diagnosis::e003_overwrite) static_assert(d == diagnosis::ok, REWIND_E003);
  else if constexpr (d == diagnosis::e004_function_reads_target)
    static_assert(d == diagnosis::ok, REWIND_E004);
  else if constexpr (d == diagnosis::e005_not_affine) static_assert(d == diagnosis::ok, REWIND_E005);
}

template <class... Assignments>
constexpr auto state_of_assignments() {
  return hana::fold_left(hana::make_tuple(hana::type_c<typename Assignments::target>...),
                         hana::make_tuple(),
                         [](auto acc, auto t) { return insert_unique(acc, t); });
}

/// Rule 4 for a block as a whole: every variable its updates read is one they write.
template <class B>
constexpr bool reads_only_its_state() {
  return hana::unpack(B::updates(), [](auto... u) {
    return (reads_only_state<decltype(u)>(B::state()) && ... && true);
  });
}
}  // namespace detail

/// Rules 1 to 4 for every assignment of a would-be block: usable in static_assert and requires.
template <class... Assignments>
inline constexpr bool invertible_assignments =
    sizeof...(Assignments) > 0 && (invertible_update<Assignments> && ...) &&
    (detail::reads_only_state<Assignments>(detail::state_of_assignments<Assignments...>()) && ...);

namespace detail {
/// block(...) once every target is a state variable: rules 1 to 3, the first violation one message.
template <class... Assignments>
constexpr auto checked_block(Assignments...) {
  constexpr bool ok_1_to_3 = (invertible_update<Assignments> && ...);
  if constexpr (!ok_1_to_3) {
    (detail::check_rules_1_to_3<Assignments>(), ...);
    return block_t<>{};
  } else {
    return block_t<decltype(canonical_update(Assignments{}))...>{};
  }
}

/// A block that passes rules 1 to 3 but reads a variable none of its updates writes: chain()
/// can still close it; used on its own it is refused.
template <class B>
inline constexpr bool is_open_block = is_block<B> && (B::size > 0) && !reads_only_its_state<B>();
}  // namespace detail

/// A block of updates, checked against rules 1 to 3: `block(v = 0.9_c*v + f(x), x = x + v)`.
template <class... Assignments>
constexpr auto block(Assignments...) {
  static_assert(sizeof...(Assignments) > 0, REWIND_E009);
  constexpr bool targets_are_state = (state_variable<typename Assignments::target> && ...);
  if constexpr (!targets_are_state) {
    static_assert(targets_are_state, REWIND_E013);
    return block_t<>{};  // one message: no rule is checked on such an update
  } else {
    return detail::checked_block(Assignments{}...);
  }
}


/// Several blocks run one after the other, as one block. Each was checked against rules 1 to 3
/// when it was made; rule 4 holds for the chain as a whole, where it is used.
template <class... Blocks>
constexpr auto chain(Blocks... bs) {
  static_assert(sizeof...(Blocks) > 0, REWIND_E009);
  static_assert((detail::is_block<Blocks> && ...), "rewind: chain(...) takes blocks");
  return hana::unpack(hana::flatten(hana::make_tuple(bs.updates()...)),
                      [](auto... us) { return block_t<decltype(us)...>{}; });
}

/// Is B a block that can be run backward? (rule 5: every update of it is, by rules 1 to 4; a
/// block made by hand from update<...> types is checked too).
template <class B>
concept invertible = detail::is_block<B> && (B::size > 0) && detail::updates_are_invertible<B>();

namespace detail {
/// The check of a block where it is used: E006 for an open block (and only that message), else
/// whether the block is invertible, for the caller's own static_assert.
template <class B>
constexpr bool usable_block() {
  if constexpr (is_open_block<B>) {
    static_assert(!is_open_block<B>, REWIND_E006);
    return true;
  } else {
    return invertible<B>;
  }
}
}  // namespace detail

// --- the primitives of physics-style blocks ------------------------------------------------------

/// kick: v <- v + h*F(x)
template <state_variable V, expression H, class F, state_variable X>
constexpr auto kick(V v, H h, F force, X x) {
  return v += h * force(x);
}
/// drift: x <- x + h*v
template <state_variable X, expression H, state_variable V>
constexpr auto drift(X x, H h, V v) {
  return x += h * v;
}

// --- ready-made blocks ---------------------------------------------------------------------------

/// Momentum (Sander et al. 2021): v <- mu*v + f(x); x <- x + v. Rewind amplification 1/mu.
template <state_variable X, state_variable V, expression Mu, class F>
constexpr auto momentum(X x, V v, Mu mu, F f) {
  return block(v = mu * v + f(x), x = x + v);
}
/// Leapfrog (kick h/2, drift h, kick h/2): conservative, every alpha is 1.
template <state_variable X, state_variable V, expression H, class F>
constexpr auto leapfrog(X x, V v, H h, F force) {
  const auto half = h / constant<2>{};
  return block(kick(v, half, force, x), drift(x, h, v), kick(v, half, force, x));
}
/// Additive coupling (RevNet): x1 <- x1 + F(x2); x2 <- x2 + G(x1). Conservative.
template <state_variable X1, state_variable X2, class F, class G>
constexpr auto additive_coupling(X1 x1, X2 x2, F f, G g) {
  return block(x1 += f(x2), x2 += g(x1));
}

// --- stacks --------------------------------------------------------------------------------------

inline constexpr std::size_t dynamic_depth = 0;

/// A block stacked to a depth; each layer has its own parameters. Depth is in the type when
/// known at compile time (`stack<64>(b)`), else a runtime value (`stack(b, 64)`).
template <class Block, std::size_t Depth = dynamic_depth>
struct stack_t {
  using block_type = Block;
  static constexpr std::size_t static_depth = Depth;
  std::size_t depth = Depth;
};

template <std::size_t Depth, class Block>
constexpr stack_t<Block, Depth> stack(Block) {
  static_assert(detail::usable_block<Block>(), "rewind: stack<N>(b) takes a block made by rwd::block(...)");
  static_assert(Depth > 0, "rewind: a stack needs a depth of at least one layer");
  return {};
}

template <class Block>
constexpr stack_t<Block> stack(Block, std::size_t depth) {
  static_assert(detail::usable_block<Block>(), "rewind: stack(b, depth) takes a block made by rwd::block(...)");
  if (depth == 0) throw error("rewind: a stack needs a depth of at least one layer");
  return {depth};
}

}  // namespace rwd
