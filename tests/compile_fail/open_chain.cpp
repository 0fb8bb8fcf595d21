// Rule 4 holds for a chain as a whole: a block that reads x may be chained after one that writes
// it, but a chain in which nothing writes x is refused where it is used.
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto n = rwd::stack<8>(rwd::chain(rwd::block(w = w + g(x)), rwd::block(v = v + f(w))));
#else
inline constexpr auto n = rwd::stack<8>(rwd::chain(rwd::momentum(x, v, 0.9_c, f), rwd::block(w = w + g(x))));
#endif
