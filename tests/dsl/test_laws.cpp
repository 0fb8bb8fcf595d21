// The laws of the derived transforms, checked numerically on random data for every block with a
// small reference interpreter (maps replaced by elementwise functions phi(u) = a*tanh(u) + b*u,
// so that the test needs no backend):
//   inverse(b)(b(s)) == s
//   <J u, w> == <u, adjoint(b)(w)>      (J u by central differences, in double)
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include <rewind/pointwise.hpp>

#include "blocks.hpp"

using namespace test_blocks;
namespace hana = boost::hana;

namespace {

constexpr std::size_t n = 7;  // elements per state variable
using vec = std::vector<double>;

// phi for map M: a*tanh(u) + b*u with a, b fixed per map name
template <class M>
double phi_a() {
  return 0.5 + 0.1 * static_cast<double>(M::name[0] % 7);
}
template <class M>
double phi(double u) {
  return phi_a<M>() * std::tanh(u) + 0.3 * u;
}
template <class M>
double phi_slope(double u) {
  const double t = std::tanh(u);
  return phi_a<M>() * (1 - t * t) + 0.3;
}

template <class Block>
struct interpreter {
  static constexpr std::size_t ns = Block::state_size;
  using State = std::remove_const_t<decltype(Block::state())>;
  using Params = std::remove_const_t<decltype(Block::params())>;
  rwd::env bindings;
  std::array<vec, ns> s, bars;

  template <class U>
  struct update_context {
    using Calls = std::remove_const_t<decltype(rwd::calls_of(typename U::rhs{}))>;
    using Steps = std::remove_const_t<decltype(decltype(rwd::adjoint(U{}))::map_steps())>;
    using Layout = rwd::pointwise_layout<State, Calls, Params, Steps>;
    static constexpr std::size_t nc = Layout::n_calls;
    typename Layout::template frame<double> frame{};
    std::array<vec, nc> calls;
    std::array<vec, Layout::n_steps> vjps;

    explicit update_context(interpreter& in) {
      for (std::size_t k = 0; k < ns; ++k) frame.state[k] = in.s[k].data(), frame.bars[k] = in.bars[k].data();
      std::size_t p = 0;
      hana::for_each(Params{}, [&](auto t) { frame.params[p++] = rwd::scalar_value(typename decltype(t)::type{}, in.bindings); });
      std::size_t c = 0;
      hana::for_each(Calls{}, [&](auto t) {  // innermost first: arguments are ready in order
        using C = typename decltype(t)::type;
        calls[c].resize(n);
        frame.calls[c] = calls[c].data();
        for (std::size_t i = 0; i < n; ++i)
          calls[c][i] = phi<typename C::map_type>(rwd::evaluate<Layout, typename C::argument, double>(frame, i));
        ++c;
      });
      for (std::size_t j = 0; j < Layout::n_steps; ++j) {
        vjps[j].assign(n, 0);
        frame.vjps[j] = vjps[j].data();
      }
    }
    template <class E>
    double at(std::size_t i) const {
      return rwd::evaluate<Layout, E, double>(frame, i);
    }
  };

  void forward() {
    hana::for_each(Block::updates(), [&](auto u) {
      using U = decltype(u);
      update_context<U> ctx(*this);
      vec next(n);
      for (std::size_t i = 0; i < n; ++i) next[i] = ctx.template at<typename U::rhs>(i);
      s[rwd::detail::index_in<typename U::target>(State{})] = next;
    });
  }

  // the reversible backward pass: per update from the last, the derived inverse's right-hand side
  // (each element reads only itself: in place), then the adjoint
  void backward() {
    hana::for_each(hana::reverse(Block::updates()), [&](auto u) {
      using U = decltype(u);
      const std::size_t t = rwd::detail::index_in<typename U::target>(State{});
      {
        update_context<U> ctx(*this);  // g does not read the target: its calls are the forward's
        for (std::size_t i = 0; i < n; ++i) s[t][i] = ctx.template at<typename decltype(rwd::invert(u))::rhs>(i);
      }
      update_context<U> ctx(*this);
      hana::for_each(rwd::adjoint(u).steps(), [&](auto step) {
        using S = decltype(step);
        if constexpr (rwd::detail::is_map_step<S>) {
          using C = typename S::call_type;
          constexpr std::size_t j =
              std::remove_reference_t<decltype(ctx)>::Layout::template vjp_index<rwd::map_vjp<C, typename S::cotangent>>;
          for (std::size_t i = 0; i < n; ++i)
            ctx.vjps[j][i] = phi_slope<typename C::map_type>(ctx.template at<typename C::argument>(i)) *
                             ctx.template at<typename S::cotangent>(i);
        } else {
          const std::size_t k = rwd::detail::index_in<typename S::variable>(State{});
          vec value(n);
          for (std::size_t i = 0; i < n; ++i) value[i] = ctx.template at<typename S::value>(i);
          for (std::size_t i = 0; i < n; ++i) {
            if constexpr (rwd::detail::is_accumulate_step<S>) bars[k][i] += value[i];
            else bars[k][i] = value[i];
          }
        }
      });
    });
  }
};

template <class Block>
void check_laws(Block, const rwd::env& bindings = {}) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> uni(-1, 1);
  interpreter<Block> in{bindings, {}, {}};
  auto random_state = [&] {
    std::array<vec, Block::state_size> a;
    for (auto& x : a) {
      x.resize(n);
      for (auto& e : x) e = uni(rng);
    }
    return a;
  };
  const auto s0 = random_state(), u = random_state(), w = random_state();

  // inverse(b)(b(s)) == s
  in.s = s0;
  for (auto& b : in.bars) b.assign(n, 0);
  in.forward();
  const auto s1 = in.s;
  in.bars = w;
  in.backward();
  double worst = 0, moved = 0;
  for (std::size_t k = 0; k < Block::state_size; ++k)
    for (std::size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::abs(in.s[k][i] - s0[k][i]));
      moved = std::max(moved, std::abs(s1[k][i] - s0[k][i]));
    }
  CHECK(worst < 1e-12);
  CHECK(moved > 1e-3);  // the forward pass did move the state: the law above is not a no-op's

  // <J u, w> == <u, adjoint(w)>
  double lhs = 0, rhs = 0;
  const double h = 1e-5;
  auto run = [&](double sign) {
    interpreter<Block> p{bindings, {}, {}};
    for (std::size_t k = 0; k < Block::state_size; ++k) {
      p.s[k] = s0[k];
      for (std::size_t i = 0; i < n; ++i) p.s[k][i] += sign * h * u[k][i];
    }
    p.forward();
    return p.s;
  };
  const auto plus = run(1), minus = run(-1);
  for (std::size_t k = 0; k < Block::state_size; ++k)
    for (std::size_t i = 0; i < n; ++i) {
      lhs += (plus[k][i] - minus[k][i]) / (2 * h) * w[k][i];
      rhs += u[k][i] * in.bars[k][i];
    }
  CAPTURE(lhs);
  CAPTURE(rhs);
  CHECK(std::abs(lhs - rhs) <= 1e-7 * (std::abs(lhs) + 1));
}

}  // namespace

TEST_CASE("laws: momentum") { check_laws(momentum); }
TEST_CASE("laws: leapfrog") { check_laws(leapfrog); }
TEST_CASE("laws: additive coupling") { check_laws(coupling); }
TEST_CASE("laws: three state variables") { check_laws(three); }
TEST_CASE("laws: runtime mu") { check_laws(runtime_mu, rwd::env{}.set("mu", 0.7)); }
TEST_CASE("laws: two maps") { check_laws(two_maps); }
TEST_CASE("laws: expansive") { check_laws(expansive); }
TEST_CASE("laws: long sum") { check_laws(long_sum); }
TEST_CASE("laws: affine coupling (data-dependent alpha)") { check_laws(affine); }
TEST_CASE("laws: a gate exp(v) (data-dependent alpha)") { check_laws(gated); }
TEST_CASE("laws: a gate bounded away from zero (data-dependent alpha in [1/2, 1])") { check_laws(half_gate); }
TEST_CASE("laws: the same call twice in one update (two map steps, one call)") {
  check_laws(rwd::block(v = v + f(x) + 0.5_c * rwd::tanh(f(x)) * v, x = x + v));
}
TEST_CASE("laws: nested maps and elementwise products") {
  constexpr auto nested = rwd::block(x = x + f(g(v) + 0.5_c * v) * rwd::sigmoid(v), v = 0.8_c * v - w * f(x), w = w + x * v);
  check_laws(nested);
}
