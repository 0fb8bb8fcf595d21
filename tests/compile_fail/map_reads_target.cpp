// x = x + f(x) reads x through f (rule 3).
#include <rewind/rewind.hpp>

using namespace rwd::literals;
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr rwd::var<"w"> w;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
inline constexpr auto g = rwd::map<"g">(rwd::dense<8>, rwd::relu, rwd::dense_same);

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = x + f(x), v = v + g(x));
#else
inline constexpr auto b = rwd::block(x = x + f(v), v = v + g(x));
#endif
