// A float32 momentum network at mu = 0.9 and depth 200 is over its budget of 151 layers.
#include <rewind/rewind.hpp>

using namespace rwd::literals;
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::var<"w"> w;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto g = rwd::map<"g">(rwd::dense<8>, rwd::relu, rwd::dense_same);

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto n = rwd::network<float>(rwd::stack<200>(rwd::momentum(x, v, 0.9_c, f)));
#else
inline constexpr auto n = rwd::network<float>(rwd::stack<151>(rwd::momentum(x, v, 0.9_c, f)));
#endif
