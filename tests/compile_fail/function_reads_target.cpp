// x = x + tanh(x) reads x through an elementwise function (rule 3).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = x + rwd::tanh(x), v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = x + rwd::tanh(v), v = v + f(x));
#endif
