// A float32 momentum network at mu = 0.9 and depth 200 is over its budget of 151 layers.
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto n = rwd::network<float>(rwd::stack<200>(rwd::momentum(x, v, 0.9_c, f)));
#else
inline constexpr auto n = rwd::network<float>(rwd::stack<151>(rwd::momentum(x, v, 0.9_c, f)));
#endif
