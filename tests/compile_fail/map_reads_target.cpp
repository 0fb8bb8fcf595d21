// x = x + f(x) reads x through f (rule 3).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = x + f(x), v = v + g(x));
#else
inline constexpr auto b = rwd::block(x = x + f(v), v = v + g(x));
#endif
