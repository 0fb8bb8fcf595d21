// x = x * x is not affine in x (rule 1).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = x * x, v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = x * v, v = v + f(x));
#endif
