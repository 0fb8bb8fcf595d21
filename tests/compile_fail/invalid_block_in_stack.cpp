// A stack of several blocks in which one block is invalid (rule 5).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto n = rwd::stack<8>(rwd::chain(rwd::momentum(x, v, 0.9_c, f), rwd::block(w = w + rwd::tanh(w), v = v + f(w)), rwd::leapfrog(x, v, 1_c, g)));
#else
inline constexpr auto n = rwd::stack<8>(rwd::chain(rwd::momentum(x, v, 0.9_c, f), rwd::block(w = w + rwd::tanh(v), v = v + f(w)), rwd::leapfrog(x, v, 1_c, g)));
#endif
