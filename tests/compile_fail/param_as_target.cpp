// mu = ...: a runtime scalar cannot be assigned to.
#include "prelude.hpp"

inline constexpr rwd::param<"mu"> mu;
#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(mu = x + f(v), v = v + f(x));
#else
inline constexpr auto b = rwd::block(x = mu * x + f(v), v = v + f(x));
#endif
