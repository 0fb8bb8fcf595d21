// rewind cpu: the exact mode's update. The engine's map calls and adjoint (rwd::step_engine)
// around a state held in fixed point, each multiplication by alpha = n/d made invertible by the
// information ledger (ledger.hpp): s <- alpha*s + round(g) forward, its mirror in the rewind, so
// the rewind gives back every bit at any depth (g a state variable in the same fixed point is
// added as it is, not rounded from its float shadow). The state in T is the fixed-point state's
// shadow (what the maps, the adjoint and the head read), kept for the variables they read.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <rewind/engine.hpp>
#include <rewind/engine/step.hpp>
#include <rewind/rewind.hpp>

#include "exact.hpp"
#include "executor.hpp"
#include "memory.hpp"
#include "threads.hpp"

namespace rwd::cpu {

template <class T, class Block>
class exact_step {
  using State = std::remove_const_t<decltype(Block::state())>;
  static constexpr std::size_t ns = Block::state_size;

 public:
  using engine_type = step_engine<T, Block, executor<T>>;
  using lane = typename engine_type::lane_type;

  /// The fixed-point state of a whole batch and its ledger (slots only for the state variables
  /// some update scales).
  struct state {
    std::array<buffer<std::int64_t>, ns> s;
    ledger book;
    state(memory_tracker& tracker, const exact_step& rules, std::size_t whole)
        : book(tracker, rules.scaled_variables() * whole, rules.ledger_ratios()) {
      for (auto& b : s) {
        b = buffer<std::int64_t>(tracker, whole);
        std::fill_n(b.data(), b.size(), std::int64_t{0});
      }
    }
  };

  /// Each state variable's fixed point (options.exact_fraction_bits, or its entry in
  /// exact_fraction_bits_of) and ledger slot.
  exact_step(const options& o, const env& bindings) : bindings_(bindings) {
    radix_.fill(fixed_point::of(o.exact_fraction_bits));
    for (const auto& [name, bits] : o.exact_fraction_bits_of) radix_[state_index_of<State>(name)] = fixed_point::of(bits);
    std::array<bool, ns> scaled{};  // updates whose alpha reads the data have no slot (and no exact mode)
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      if constexpr (coefficient_kind_of<U>() != coefficient_kind::data_dependent) {
        const rational a = coefficient<U>();
        if (a.num != a.den) scaled[rwd::detail::index_in<typename U::target>(State{})] = true;
      }
    });
    std::size_t next = 0;
    for (std::size_t k = 0; k < ns; ++k) slot_[k] = scaled[k] ? next++ : ns;
    // The float shadows a step reads: of the variables in an update's g (a map's argument, an
    // expression) or alpha, and of the output (the head's input). A g that is a variable alone,
    // added with alpha = 1 in the target's fixed point, is added as its fixed point
    // (add_state_exact): not a read. The other shadows are not written.
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      const std::size_t t = rwd::detail::index_in<typename U::target>(State{});
      std::size_t k = 0;
      hana::for_each(State{}, [&](auto v) {
        using V = typename decltype(v)::type;
        bool as_fixed_point = false;
        if constexpr (std::is_same_v<typename U::g, V> && coefficient_kind_of<U>() != coefficient_kind::data_dependent) {
          const rational a = coefficient<U>();
          as_fixed_point = a.num == a.den && radix_[k].bits == radix_[t].bits;
        }
        shadowed_[k] = shadowed_[k] || (rwd::reads<V>(typename U::g{}) && !as_fixed_point) || rwd::reads<V>(typename U::alpha{});
        ++k;
      });
    });
    shadowed_[state_index_of<State>(o.output)] = true;
  }

  /// State variables some update scales: each has a ledger slot per element.
  std::size_t scaled_variables() const {
    std::size_t n = 0;
    for (std::size_t s : slot_) n += s < ns;
    return n;
  }

  /// Every scaling coefficient of the block, exactly: what the ledger's arithmetic is sized for.
  std::vector<rational> ledger_ratios() const {
    std::vector<rational> ratios;
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      if constexpr (coefficient_kind_of<U>() != coefficient_kind::data_dependent) {
        const rational a = coefficient<U>();
        if (a.num < 1 || a.num > ledger::max_base || a.den > ledger::max_base)
          throw error("rewind: exact mode: " + U::text() + ": alpha = " + std::to_string(a.num) + "/" + std::to_string(a.den) +
                      " must be positive with a numerator and denominator of at most 65536");
        if (a.num != a.den) ratios.push_back(a);
      }
    });
    return ratios;
  }

  /// x in state variable k's fixed point, or the error that names the value and the variable.
  std::int64_t to_fixed(double x, std::size_t k) const {
    std::int64_t out;
    const std::int64_t v = radix_[k].round(x, out);
    if (out) [[unlikely]]
      throw error("rewind: exact mode: a value of " + variable_name(k) + " (" + std::to_string(x) +
                  ") leaves the fixed-point range +-2^" + std::to_string(51 - radix_[k].bits) + " of " +
                  std::to_string(radix_[k].bits) +
                  " fractional bits (lower options.exact_fraction_bits or its entry in exact_fraction_bits_of, or scale the data)");
    return v;
  }
  T from_fixed(std::int64_t v, std::size_t k) const { return radix_[k].template value<T>(v); }

  /// Every update of layer l forward on a lane, nothing kept. An update that adds a scaled
  /// variable to another right after its scaling (x <- x + v after v <- mu v + f) runs in the
  /// same pass over the tiles, while v's new fixed point is still in the cache.
  void forward_layer(const engine_type& eng, std::size_t l, lane& ln, state& fx) const {
    bool done = false;  // the update was fused into the one before
    hana::for_each(hana::make_range(hana::size_c<0>, hana::size_c<Block::size>), [&](auto k) {
      constexpr std::size_t i = decltype(k)::value;
      using U = std::remove_cvref_t<decltype(hana::at_c<i>(Block::updates()))>;
      if (std::exchange(done, false)) return;
      if constexpr (i + 1 < Block::size) {
        using Next = std::remove_cvref_t<decltype(hana::at_c<i + 1>(Block::updates()))>;
        if constexpr (adds_target_of<U, Next>()) {
          done = update<U, Next>(eng, {l, i, false}, ln, fx, true, false);
          return;
        }
      }
      update<U>(eng, {l, i, false}, ln, fx, true, false);
    });
  }

  /// Update U at `at` (its layer and index) on a lane in fixed point, forward (s <- alpha*s + round(g)) or rewound,
  /// and then, when asked, its adjoint. Next, where given, adds U's target to another variable
  /// (adds_target_of): forward, it is fused into U's pass where U scales and the fixed points
  /// agree. Returns whether Next was done.
  template <class U, class Next = void>
  bool update(const engine_type& eng, update_site at, lane& ln, state& fx, bool forward, bool with_adjoint) const {
    using Layout = typename engine_type::template plan<U>::Layout;
    const std::size_t width = eng.dims().width(), nb = ln.count, count = width * nb, whole = width * eng.dims().batch;
    auto uf = eng.template frame_of<U>(ln);
    T* steps = uf.place_calls(eng.buffers(ln), eng.dims().state, nb);
    eng.template compute_calls<U>(at, uf, ln);  // from the shadow of the state; g does not read the target
    const T* g = nullptr;  // g itself where it is already a buffer: a map call's output, or a variable
    if constexpr (engine_type::template g_needs_buffer<U>()) {
      g = steps;
      steps += count;
      eng.executor().template assign<Layout, typename U::g>(uf.f, const_cast<T*>(g), count);
    } else if constexpr (state_variable<typename U::g>) g = uf.f.state[Layout::template state_index<typename U::g>];
    else g = uf.f.calls[Layout::template call_index<typename U::g>];
    const rational a = coefficient<U>();
    constexpr std::size_t t = Layout::template state_index<typename U::target>;
    std::int64_t* s = fx.s[t].data() + ln.first * width;
    T* shadow = shadowed_[t] ? ln.s[t].data() : nullptr;
    const int threads = detail::in_team() ? 1 : Eigen::nbThreads();  // a team's chunks; a step on one thread has set 1
    then_add<T> then{};  // Next, fused
    std::size_t then_target = 0;
    if constexpr (!std::is_void_v<Next>) {
      then_target = rwd::detail::index_in<typename Next::target>(State{});
      if (forward && a.num != a.den && radix_[then_target].bits == radix_[t].bits)
        then = {fx.s[then_target].data() + ln.first * width, shadowed_[then_target] ? ln.s[then_target].data() : nullptr,
                radix_[then_target]};
    }
    const bool in_range = [&] {
      if (a.num != a.den)
        return scale_add_exact(s, g, shadow, count, radix_[t], exact_ratio(a.num, a.den, fx.book), fx.book,
                               slot_[t] * whole + ln.first * width, forward, threads, then);
      if constexpr (state_variable<typename U::g>) {  // x <- x + v: v's fixed point itself, where the radixes agree
        constexpr std::size_t k = Layout::template state_index<typename U::g>;
        if (radix_[k].bits == radix_[t].bits)
          return add_state_exact(s, fx.s[k].data() + ln.first * width, shadow, count, radix_[t], forward, threads);
      }
      return add_exact(s, g, shadow, count, radix_[t], forward, threads);
    }();
    if (!in_range) [[unlikely]] {  // say which value: a map output, or the state it made
      for (std::size_t i = 0; i < count; ++i) to_fixed(static_cast<double>(g[i]), t);
      for (std::size_t i = 0; i < count; ++i) to_fixed(static_cast<double>(s[i]) * radix_[t].unit, t);
      for (std::size_t i = 0; then.s && i < count; ++i) to_fixed(static_cast<double>(then.s[i]) * then.fp.unit, then_target);
      throw error("rewind: exact mode: a value of " + variable_name(t) + " left the fixed-point range");  // not reached
    }
    if (with_adjoint) {
      uf.place_steps(steps, eng.dims().state, nb);
      eng.apply_adjoint(at, uf, ln);
    }
    return then.s != nullptr;
  }

 private:
  /// Whether update Next adds update U's target, as it is, to another variable (x <- x + v).
  template <class U, class Next>
  static constexpr bool adds_target_of() {
    if constexpr (state_variable<typename Next::g> && constant_expression<typename Next::alpha>)
      return std::is_same_v<typename Next::g, typename U::target> && !std::is_same_v<typename Next::target, typename U::target> &&
             Next::alpha::value.num == Next::alpha::value.den;
    else return false;
  }

  /// alpha = n/d of update U, exactly: its rational constant, or its runtime value rationalised.
  template <class U>
  rational coefficient() const {
    if constexpr (constant_expression<typename U::alpha>) return U::alpha::value;
    else if constexpr (coefficient_kind_of<U>() == coefficient_kind::runtime)
      return rationalise(scalar_value(typename U::alpha{}, bindings_), ledger::max_base);
    else throw error("rewind: exact mode needs constant or runtime-scalar coefficients; " + U::text() + " computes alpha from the data");
  }

  std::string variable_name(std::size_t k) const {
    std::string name;
    std::size_t j = 0;
    hana::for_each(State{}, [&](auto t) {
      if (j++ == k) name = std::string(decltype(t)::type::name);
    });
    return name;
  }

  env bindings_;
  std::array<fixed_point, ns> radix_{};
  std::array<std::size_t, ns> slot_{};
  std::array<bool, ns> shadowed_{};  // the float shadow is read: written by the updates
};

}  // namespace rwd::cpu
