// A map applied to its own target deep inside a longer sum (rule 3).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(x = x + 0.5_c * v + g(v) - f(x), v += x, w += v);
#else
inline constexpr auto b = rwd::block(x = x + 0.5_c * v + g(v) - f(w), v += x, w += v);
#endif
