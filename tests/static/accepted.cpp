// Compile-only: the accepted blocks and their analysis, entirely in static_assert.
#include "../dsl/blocks.hpp"

using namespace test_blocks;

static_assert(rwd::invertible<std::remove_cv_t<decltype(momentum)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(long_sum)>>);
static_assert(rwd::budget<float>(momentum).layers == 151);
static_assert(rwd::budget<float>(coupling).unlimited());
static_assert(rwd::network<float>(rwd::stack<151>(momentum)).budget.layers == 151);
static_assert(rwd::network<double>(rwd::stack<342>(momentum)).budget.layers == 342);
static_assert(rwd::network<float>(rwd::stack<100000>(leapfrog)).budget.unlimited());
static_assert(rwd::network<float, rwd::policy::lossy>(rwd::stack<1000>(momentum)).budget.layers == 151);
// the README's quick start block, as written there
namespace readme {
inline constexpr auto momentum = rwd::block(v = 0.9_c * v + f(x), x = x + v);
static_assert(rwd::budget<float>(momentum).layers == 151);
}  // namespace readme

// many maps in one block: the analysis handles up to 32 slope variables (E015 past that, a
// compile-fail test). x <- x + S(v), v <- v + F(x) with S the sum of 31 slopes in [-0.01, 0.01]
// and F in [-0.01, 0.01] is one layer [[1, S], [F, 1 + F S]]: det 1, trace 2 + F S, worst at
// F S = 0.31 * 0.01, where the rate is the larger root of l^2 - (2 + F S) l + 1 = 0.
#include "../dsl/long_blocks.hpp"
namespace many_maps {
using long_blocks::eight_couplings;
using long_blocks::maps_in_one_update;
static_assert(rwd::invertible<std::remove_cv_t<decltype(eight_couplings)>> && decltype(eight_couplings)::size == 16);
static_assert(decltype(boost::hana::length(decltype(eight_couplings)::maps()))::value == 16);
static_assert(rwd::budget<float>(eight_couplings).unlimited() && rwd::budget<float>(eight_couplings).n_slopes == 16);
constexpr double fs = 0.31 * 0.01;
constexpr double worst = (2 + fs + rwd::cmath::sqrt((2 + fs) * (2 + fs) - 4)) / 2;
constexpr auto r = rwd::budget<float>(maps_in_one_update<31>);
static_assert(r.n_slopes == 32 && !r.assumes_zero_slope());
static_assert(r.rate > worst * (1 - 1e-12) && r.rate < worst * (1 + 1e-12));
}  // namespace many_maps
