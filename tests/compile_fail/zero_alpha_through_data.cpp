// x = (v - v)*x + f(v): alpha is data, but zero whatever the data (rule 2).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = (v - v) * x + f(v), v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = (v - w) * x + f(v), v = v + f(x), w = w + g(x));
#endif
