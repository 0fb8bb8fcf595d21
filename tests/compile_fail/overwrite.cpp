// x = f(v) overwrites x: alpha is zero (rule 2).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = f(v), v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = x + f(v), v = v + f(x));
#endif
