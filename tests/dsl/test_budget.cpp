// The rewind budget: napkin figures against the closed form, the linearised figures with
// declared slopes, classes, and the network policy checks.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "blocks.hpp"

using namespace test_blocks;
using rwd::bfloat16;
using rwd::budget;

// the napkin at slope 0: 151, 342, 46 for momentum at mu = 0.9
static_assert(budget<float>(momentum).layers == 151);
static_assert(budget<double>(momentum).layers == 342);
static_assert(budget<bfloat16>(momentum).layers == 46);
static_assert(budget<float>(rwd::momentum(x, v, 0.6_c, f)).layers == 31);
static_assert(budget<float>(rwd::momentum(x, v, 0.3_c, f)).layers == 13);
static_assert(budget<float>(momentum).kind == rwd::block_class::dissipative);
static_assert(budget<float>(momentum).assumes_zero_slope());

// conservative blocks have no limit; expansive and data-dependent are classified
static_assert(budget<float>(leapfrog).unlimited() && budget<float>(leapfrog).kind == rwd::block_class::conservative);
static_assert(budget<float>(coupling).unlimited());
static_assert(budget<float>(expansive).kind == rwd::block_class::expansive);
static_assert(budget<float>(expansive).unlimited());  // the rewind contracts
static_assert(budget<float>(affine).kind == rwd::block_class::data_dependent && budget<float>(affine).known());
static_assert(budget<float>(gated).kind == rwd::block_class::data_dependent && !budget<float>(gated).known());

// the range of an alpha computed from the data, by interval arithmetic over its expression
namespace ranges {
constexpr bool is(rwd::interval a, double lo, double hi) { return a.lo == lo && a.hi == hi; }
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double e = 2.718281828459045;
constexpr bool near(double a, double b) { return (a - b) * (a - b) < 1e-28 * b * b; }
static_assert(is(rwd::range_of(v, {}), -inf, inf));                                   // a state variable
static_assert(is(rwd::range_of(rwd::sigmoid(t(v)), {}), 0, 1));                      // open (0, 1), held closed
static_assert(is(rwd::range_of(0.5_c + 0.5_c * rwd::sigmoid(t(v)), {}), 0.5, 1));
static_assert(is(rwd::range_of(rwd::exp(v), {}), 0, inf) && rwd::range_of(rwd::exp(v), {}).contains_zero());
static_assert(is(rwd::range_of(s(v), {}), -1, 1));    // a map that ends with tanh
static_assert(is(rwd::range_of(f(v), {}), -inf, inf));  // one that ends with a dense layer
static_assert(is(rwd::range_of(f.range(-2_c, 0.5_c)(v), {}), -2, 0.5));  // a declared range
static_assert(near(rwd::range_of(rwd::exp(s(x2)), {}).lo, 1 / e) && near(rwd::range_of(rwd::exp(s(x2)), {}).hi, e));
static_assert(is(rwd::range_of(-(2_c - rwd::sigmoid(v)) * rwd::tanh(v), {}), -2, 2));
static_assert(is(rwd::range_of(rwd::relu(v) + 1_c, {}), 1, inf) && rwd::range_of(rwd::relu(v) + 1_c, {}).nearest_zero() == 1);
static_assert(rwd::range_of(-1_c - rwd::relu(v), {}).nearest_zero() == -1);
}  // namespace ranges

// an alpha bounded away from zero has a budget from the value nearest zero: 1/2 -> 23 layers,
// 1/e -> 15; one that may reach zero has none
static_assert(budget<float>(half_gate).known() && budget<float>(half_gate).layers == 23);
static_assert(budget<float>(half_gate).napkin_rate == 2);
static_assert(budget<float>(affine).layers == 15 && budget<double>(affine).layers == 36);
static_assert(budget<float>(rwd::block(x = rwd::exp(f.range(-2_c, 0_c)(v)) * x + f(v), v = v + g(x))).layers == 7);
static_assert(!budget<float>(rwd::block(x = rwd::sigmoid(t(v)) * x + f(v), v = v + g(x))).known());
static_assert(budget<float>(gated).unbounded_update == 0 && budget<float>(gated).layers == 0);
static_assert(rwd::network<float>(rwd::stack<23>(half_gate)).budget.layers == 23);
static_assert(rwd::network<float, rwd::policy::checkpointed>(rwd::stack<100000>(gated)).depth == 100000);

// slopes declared on the map: the linearised budget of DESIGN.md section 1
static_assert(budget<float>(rwd::momentum(x, v, 0.9_c, f.slope(-1_c, -0.1_c))).layers == 302);
static_assert(budget<float>(rwd::momentum(x, v, 0.9_c, f.slope(0.1_c, 0.1_c))).layers == 41);
static_assert(budget<float>(rwd::momentum(x, v, 0.9_c, f.lipschitz(1_c))).layers == 15);
static_assert(budget<float>(rwd::leapfrog(x, v, 1_c, F.slope(0.1_c, 0.1_c))).layers == 50);
static_assert(budget<float>(rwd::leapfrog(x, v, 1_c, F.slope(-0.1_c, -0.1_c))).unlimited());

TEST_CASE("L* against the closed form ln(1/eps)/ln(1/mu), float32 and float64") {
  const double mus[] = {0.3, 0.6, 0.9, 0.99};
  for (double m : mus) {
    const rwd::env e = rwd::env{}.set("mu", m);
    const auto f32 = budget<float>(runtime_mu, e);
    const auto f64 = budget<double>(runtime_mu, e);
    const double c32 = std::log(1 / double(std::numeric_limits<float>::epsilon())) / std::log(1 / m);
    const double c64 = std::log(1 / std::numeric_limits<double>::epsilon()) / std::log(1 / m);
    CAPTURE(m);
    CHECK(f32.depth == doctest::Approx(c32).epsilon(1e-12));
    CHECK(f64.depth == doctest::Approx(c64).epsilon(1e-12));
    CHECK(f32.layers == static_cast<long long>(std::floor(c32)));
    CHECK(f64.layers == static_cast<long long>(std::floor(c64)));
    CHECK(f32.rate == doctest::Approx(1 / m).epsilon(1e-12));
  }
}

TEST_CASE("the linearised rates of DESIGN.md: 1/sqrt(mu), 1.4625, 2.8295, 1.3702") {
  CHECK(budget<float>(rwd::momentum(x, v, 0.9_c, f.slope(-1_c, -0.1_c))).rate ==
        doctest::Approx(1 / std::sqrt(0.9)).epsilon(1e-9));
  CHECK(budget<float>(rwd::momentum(x, v, 0.9_c, f.slope(0.1_c, 0.1_c))).rate == doctest::Approx(1.4625).epsilon(1e-4));
  CHECK(budget<float>(rwd::momentum(x, v, 0.9_c, f.lipschitz(1_c))).rate == doctest::Approx(2.8295).epsilon(1e-4));
  CHECK(budget<float>(rwd::leapfrog(x, v, 1_c, F.slope(0.1_c, 0.1_c))).rate == doctest::Approx(1.3702).epsilon(1e-4));
  CHECK(budget<float>(rwd::leapfrog(x, v, 1_c, F.slope(-0.1_c, -0.1_c))).rate == doctest::Approx(1.0).epsilon(1e-7));
}

TEST_CASE("a slope given at run time overrides the map's") {
  const rwd::env e = rwd::env{}.slope("f", -1, 1);
  const auto r = budget<float>(momentum, e);
  CHECK(r.layers == 15);
  CHECK(!r.assumes_zero_slope());
  CHECK(r.worst_slope[0] == doctest::Approx(1.0));
}

TEST_CASE("three-variable blocks go through the general eigenvalue path") {
  // two momentum-like chains; with slope 0 the rates of the alphas multiply: 1/(0.5)
  const auto r = budget<float>(three);
  CHECK(r.rate == doctest::Approx(2.0).epsilon(1e-9));
  CHECK(r.depth == doctest::Approx(23.0).epsilon(1e-9));  // ln(2^23) / ln(2)
}

TEST_CASE("elementwise functions applied to the state use their slope range") {
  using namespace rwd::literals;
  constexpr auto b = rwd::block(x1 += rwd::tanh(x2), x2 += rwd::tanh(x1));
  // worst case at slopes (1, 1): eigenvalues of [[1, 1], [1, 2]], 1/0.381966 = 2.618
  CHECK(budget<float>(b).rate == doctest::Approx(2.6180339887).epsilon(1e-9));
}

TEST_CASE("networks: compile-time and run-time depth against the budget") {
  constexpr auto ok = rwd::network<float>(rwd::stack<151>(momentum));
  static_assert(ok.budget.layers == 151 && ok.budget.depth >= 151);  // at the budget, accepted
  constexpr auto lossy = rwd::network<float, rwd::policy::lossy>(rwd::stack<500>(momentum));
  static_assert(lossy.budget.layers == 151);  // past it, on purpose: the report still says where the cliff is
  CHECK_THROWS_WITH_AS(rwd::network<float>(rwd::stack(momentum, 200)),
                       doctest::Contains("rewind E007"), rwd::error);
  CHECK_NOTHROW(rwd::network<double>(rwd::stack(momentum, 200)));
  CHECK_NOTHROW(rwd::network<float>(rwd::stack(leapfrog, 100000)));
  CHECK_THROWS_WITH_AS(rwd::network<float>(rwd::stack(runtime_mu, 40), rwd::env{}.set("mu", 0.6)),
                       doctest::Contains("L* = 31"), rwd::error);
  CHECK_THROWS_WITH_AS(rwd::network<float>(rwd::stack(runtime_mu, 4), rwd::env{}.set("mu", 0)),
                       doctest::Contains("rewind E002"), rwd::error);
  CHECK_THROWS_AS(rwd::stack(momentum, 0), rwd::error);
}

namespace {
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const rwd::error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("networks: an alpha from the data with no budget is refused under the strict policy, and says which") {
  const std::string refused = error_of([] { rwd::network<float>(rwd::stack(gated, 10)); });
  CHECK(refused.starts_with("rewind E014"));
  CHECK(refused.ends_with("(alpha = exp(v) in x <- exp(v)*x + f(v) ranges over [0, inf])"));
  CHECK_NOTHROW(rwd::network<float, rwd::policy::checkpointed>(rwd::stack(gated, 10)));
  CHECK_NOTHROW(rwd::network<float, rwd::policy::lossy>(rwd::stack(gated, 10)));
  // a runtime scalar in the alpha: its range is known once it is bound
  constexpr auto shifted = rwd::block(x = (mu + rwd::sigmoid(t(v))) * x + f(v), v = v + g(x));
  CHECK(rwd::network<float>(rwd::stack(shifted, 20), rwd::env{}.set("mu", 0.5)).budget.layers == 23);  // [0.5, 1.5]
  const std::string near_zero = error_of([&] { rwd::network<float>(rwd::stack(shifted, 20), rwd::env{}.set("mu", -0.5)); });
  CHECK(near_zero.starts_with("rewind E014"));
  CHECK(near_zero.ends_with("ranges over [-0.5, 0.5])"));
  CHECK_THROWS_WITH_AS(rwd::network<float>(rwd::stack(half_gate, 24)), doctest::Contains("rewind E007"), rwd::error);
}
