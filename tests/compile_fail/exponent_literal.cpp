// 1e-3_c in an update: a constant with an exponent is refused, with one message (no spurious E002).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = 1e-3_c * x + f(v), v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = 0.001_c * x + f(v), v = v + f(x));
#endif
