// An alpha computed from the data whose range contains zero (exp(v) for a state variable v) has
// no rewind budget: the strict policy refuses the network at compile time.
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto n = rwd::network<float>(rwd::stack<64>(rwd::block(x = rwd::exp(v) * x + f(v), v = v + g(x))));
#else
inline constexpr auto n = rwd::network<float>(rwd::stack<20>(rwd::block(x = (0.5_c + 0.5_c * rwd::sigmoid(v)) * x + f(v), v = v + g(x))));
#endif
