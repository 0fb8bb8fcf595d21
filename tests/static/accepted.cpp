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
