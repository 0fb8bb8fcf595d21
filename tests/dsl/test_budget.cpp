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
static_assert(budget<float>(affine).kind == rwd::block_class::data_dependent && !budget<float>(affine).known());

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
