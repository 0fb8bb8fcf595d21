// A function and a node kind the library lacks, each stated once, here: the analyses (range,
// budget, affine decomposition, printing, the derived inverse and adjoint) and every executor
// on the host (the reference, the CPU's Eigen lowering and map primitives, the CUDA functors)
// take them from that one statement, and the step laws hold for blocks that use them.
#include <string>

#include "laws.hpp"

#include "../dsl/blocks.hpp"

namespace {

using namespace rwd::literals;
using laws::check_laws;
using test_blocks::f;
using test_blocks::v;
using test_blocks::x;

/// A leaky relu (slope 1/8 below zero): its value, derivative, slopes and range, once.
struct leaky_fn {
  static constexpr std::string_view name = "leaky";
  static constexpr double slope_lo = 0.125, slope_hi = 1;
  static constexpr double bound(double u) { return u > 0 ? u : 0.125 * u; }
  template <class X>
  REWIND_HOST_DEVICE static auto value(const X& u) {
    using M = rwd::fn::math<X>;
    return M::positive(u) - rwd::fn::scalar_of<X>(0.125) * M::positive(-u);
  }
  template <class Y>
  REWIND_HOST_DEVICE static auto derivative_from_output(const Y& y) {
    using T = rwd::fn::scalar_of<Y>;
    return T(0.125) + T(0.875) * rwd::fn::math<Y>::heaviside(y);
  }
};
inline constexpr rwd::elementwise<leaky_fn> leaky{};

/// a^2, elementwise: its printing, value, range and partials, once.
template <rwd::expression A>
struct square : rwd::node<A> {
  using rwd::expr_node::operator=;
  static int precedence(const rwd::print_context&) { return rwd::detail::prec_atom; }
  static std::string text(const rwd::print_context& c) { return "sq(" + A::text(c) + ")"; }
  template <class X>
  REWIND_HOST_DEVICE static constexpr auto value(const X& a) {
    return a * a;
  }
  static constexpr rwd::interval range(rwd::interval a) {
    const double l = a.lo * a.lo, h = a.hi * a.hi, top = l > h ? l : h;
    return {a.contains_zero() ? 0.0 : (l < h ? l : h), top};
  }
  template <class X, class C>  // d(a^2) = 2a da
  static constexpr auto partials(const X& a, const C& c) {
    return boost::hana::make_tuple((a + a) * c);
  }
};
template <rwd::expression A>
constexpr square<A> sq(A) {
  return {};
}

inline constexpr auto h = rwd::map<"h">(rwd::dense<8>, leaky, rwd::dense_same);

// the function applied to the state, outside a map: slopes [1/8, 1] enter the budget
inline constexpr auto leaky_outside = rwd::block(v = 0.9_c * v + f(x) + 0.25_c * leaky(x), x = x + v);
// the function as a map's activation
inline constexpr auto leaky_inside = rwd::block(v = 0.9_c * v + h(x), x = x + v);
// the node in a data-dependent alpha (range [0.5, 1.5]: the budget of alpha = 0.5, and
// an inverse that divides by it) and in an update's g
inline constexpr auto squared = rwd::block(x = (0.5_c + sq(rwd::tanh(v))) * x + f(v), v = v + f(x) - 0.25_c * sq(x));
inline constexpr auto halved = rwd::block(x = 0.5_c * x + f(v), v = v + f(x) - 0.25_c * sq(x));

constexpr bool is(rwd::interval r, double lo, double hi) { return r.lo == lo && r.hi == hi; }

// the analyses
static_assert(is(rwd::range_of(leaky(v), {}), -rwd::cmath::infinity, rwd::cmath::infinity));
static_assert(is(rwd::range_of(leaky(rwd::tanh(v)), {}), -0.125, 1));
static_assert(is(rwd::range_of(sq(rwd::tanh(v)), {}), 0, 1));
static_assert(is(rwd::range_of(1_c + sq(2_c + rwd::sigmoid(v)), {}), 5, 10));
static_assert(rwd::scalar_value(sq(0.5_c), {}) == 0.25);
static_assert(rwd::diagnose<decltype(x = sq(x))>() == rwd::diagnosis::e005_not_affine);  // not affine in x
static_assert(rwd::diagnose<decltype(x = x + sq(v))>() == rwd::diagnosis::ok);
static_assert(rwd::coefficient_kind_of<std::remove_cvref_t<decltype(boost::hana::front(squared.updates()))>>() == rwd::coefficient_kind::data_dependent);

TEST_CASE("a node kind and a function stated once: printing, the inverse, the adjoint, the budget") {
  CHECK(rwd::to_string(sq(leaky(v)) * x) == "sq(leaky(v))*x");
  const auto inverse_text = std::remove_cvref_t<decltype(boost::hana::back(rwd::inverse(squared).updates()))>::text();
  CHECK(inverse_text == "x <- (x - f(v)) / (0.5 + sq(tanh(v)))");
  // the adjoint differentiates the node by its partials rule, the function by its derivative
  const auto steps = rwd::adjoint(squared);
  std::string text;
  boost::hana::for_each(steps, [&](auto a) {
    boost::hana::for_each(a.steps(), [&](auto s) { text += decltype(s)::text() + "\n"; });
  });
  CAPTURE(text);
  CHECK(text.find("(x + x)") != std::string::npos);
  CHECK(text.find("tanh'(v)") != std::string::npos);
  // budgets: the function's slope box; the node's range in alpha (nearest zero: 0.5)
  const auto outside = rwd::budget<float>(leaky_outside);
  CHECK(outside.n_slopes == 2);
  CHECK(outside.slopes[1].name == "leaky");
  CHECK(outside.slopes[1].lo == 0.125);
  const auto gated = rwd::budget<float>(squared);
  CHECK(gated.layers < rwd::budget_report::unlimited_layers);
  CHECK(gated.layers == rwd::budget<float>(halved).layers);
}

TEST_CASE("step laws: a function the library lacks, applied to the state") { check_laws(leaky_outside); }
TEST_CASE("step laws: a function the library lacks, as a map's activation") { check_laws(leaky_inside); }
TEST_CASE("step laws: a node kind the library lacks, in alpha and in g") { check_laws(squared); }

}  // namespace
