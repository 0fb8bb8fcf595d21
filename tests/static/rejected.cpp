// Compile-only negatives, written in the language: each rejected pattern is diagnosed by the
// rule concept it breaks. (The compile-fail tests check the messages users see.)
#include "../dsl/blocks.hpp"

using namespace test_blocks;
inline constexpr rwd::var<"y"> y;

template <class... A>
inline constexpr bool accepted = rwd::invertible_assignments<A...>;

static_assert(!accepted<decltype(x = x + f(x))>);
static_assert(!accepted<decltype(x = x + rwd::tanh(x))>);
static_assert(!accepted<decltype(x = x * x)>);
static_assert(!accepted<decltype(x = f(v)), decltype(v = v + f(x))>);
static_assert(!accepted<decltype(x = 0_c * x + f(v)), decltype(v = v + f(x))>);
static_assert(!accepted<decltype(x = x - x + f(v)), decltype(v = v + f(x))>);
static_assert(!accepted<decltype(x = x + f(y))>);
static_assert(!accepted<decltype(x = x + 0.5_c * v + g(v) - f(x)), decltype(v += x)>);
static_assert(!accepted<decltype(v = v + f(x)), decltype(x = x * rwd::exp(x))>);
static_assert(accepted<decltype(v = v + f(x)), decltype(x = x * rwd::exp(v))>);  // data-dependent, fine
static_assert(!rwd::rhs_does_not_read_target<decltype(x = x + f(0.5_c * x))>);
static_assert(!rwd::coefficient_nonzero<decltype(x = 2_c * (x - x) + v)>);

// an alpha that is zero whatever the data: seen through products with a zero factor and sums that
// cancel, not only a literal 0
static_assert(!rwd::coefficient_nonzero<decltype(x = (0_c * v) * x + f(v))>);
static_assert(!rwd::coefficient_nonzero<decltype(x = (v - v) * x + f(v))>);
static_assert(!rwd::coefficient_nonzero<decltype(x = (2_c * v - v - v) * x + f(v))>);
static_assert(!rwd::coefficient_nonzero<decltype(x = (v + f(v) - f(v) - v) * x + f(v))>);
static_assert(!rwd::coefficient_nonzero<decltype(x = (rwd::tanh(v) * (w - w)) * x + f(v))>);
static_assert(!rwd::coefficient_nonzero<decltype(x = x * (v + 1_c - v) - x + f(v))>);
static_assert(!accepted<decltype(x = (v - v) * x + f(v)), decltype(v = v + f(x))>);
// and what is not zero stays accepted
static_assert(rwd::coefficient_nonzero<decltype(x = (v - w) * x + f(v))>);
static_assert(rwd::coefficient_nonzero<decltype(x = (2_c * v - v) * x + f(v))>);
static_assert(rwd::coefficient_nonzero<decltype(x = (v * w - w * v) * x + f(v))>);  // products compared as written
static_assert(rwd::identically_zero(v - v) && rwd::identically_zero(0_c * f(v)) && !rwd::identically_zero(v - w));

// invertible<B> is the rules, not the shape: blocks made by hand from canonical updates
namespace hand_made {
using X = std::remove_cv_t<decltype(x)>;
using V = std::remove_cv_t<decltype(v)>;
using W = std::remove_cv_t<decltype(w)>;
using FX = decltype(f(x));
using FV = decltype(f(v));
static_assert(rwd::invertible<rwd::block_t<rwd::update<X, rwd::one, FV>, rwd::update<V, rwd::one, FX>>>);
static_assert(!rwd::invertible<rwd::block_t<rwd::update<X, rwd::one, FX>>>);                               // g reads x
static_assert(!rwd::invertible<rwd::block_t<rwd::update<X, rwd::zero, FV>, rwd::update<V, rwd::one, FX>>>);  // alpha 0
static_assert(!rwd::invertible<rwd::block_t<rwd::update<X, decltype(v - v), FV>, rwd::update<V, rwd::one, FX>>>);
static_assert(!rwd::invertible<rwd::block_t<rwd::update<X, X, FV>, rwd::update<V, rwd::one, FX>>>);         // alpha reads x
static_assert(!rwd::invertible<rwd::block_t<rwd::update<X, rwd::one, W>>>);                                // w is not state
static_assert(!rwd::invertible<rwd::block_t<>>);
static_assert(!rwd::invertible<int>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(rwd::inverse(momentum))>>);
}  // namespace hand_made

// rule 4 holds for the block that runs: a block that reads a variable it does not write is open,
// not invertible on its own, and a chain in which another block writes that variable closes it
namespace open_blocks {
using open_t = std::remove_cv_t<decltype(rwd::block(w = w + g(x)))>;
static_assert(rwd::detail::is_open_block<open_t> && !rwd::invertible<open_t>);
static_assert(rwd::invertible<decltype(rwd::chain(momentum, rwd::block(w = w + g(x))))>);
static_assert(rwd::invertible<decltype(rwd::chain(rwd::block(w = w + g(x)), momentum))>);  // the order does not matter
static_assert(!rwd::invertible<decltype(rwd::chain(rwd::block(w = w + g(x)), rwd::block(v = v + f(w))))>);
static_assert(rwd::budget<float>(rwd::chain(momentum, rwd::block(w = w + g(x)))).layers == 151);
}  // namespace open_blocks
