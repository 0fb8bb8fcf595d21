// x = 0*x + f(v): alpha is the constant zero (rule 2).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = 0_c * x + f(v), v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = 1_c * x + f(v), v = v + f(x));
#endif
