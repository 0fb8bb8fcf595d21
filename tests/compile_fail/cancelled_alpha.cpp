// x = x - x + f(v): alpha cancels to zero (rule 2).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = x - x + f(v), v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = x - 0.5_c * x + f(v), v = v + f(x));
#endif
