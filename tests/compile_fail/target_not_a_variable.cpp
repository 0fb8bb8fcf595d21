// f(x) = ...: the left of an update is a map call, not a state variable (one coded message).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(f(x) = x + f(v), v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = x + f(v), v = v + f(x));
#endif
