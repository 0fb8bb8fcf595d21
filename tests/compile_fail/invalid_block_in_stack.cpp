// A stack of several blocks in which one block is invalid (rule 5).
#include <rewind/rewind.hpp>

using namespace rwd::literals;
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::var<"w"> w;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto g = rwd::map<"g">(rwd::dense<8>, rwd::relu, rwd::dense_same);

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto n = rwd::stack<8>(rwd::chain(rwd::momentum(x, v, 0.9_c, f), rwd::block(w = w + rwd::tanh(w), v = v + f(w)), rwd::leapfrog(x, v, 1_c, g)));
#else
inline constexpr auto n = rwd::stack<8>(rwd::chain(rwd::momentum(x, v, 0.9_c, f), rwd::block(w = w + rwd::tanh(v), v = v + f(w)), rwd::leapfrog(x, v, 1_c, g)));
#endif
