// w is read but no update of the block writes it (rule 4), and the block is used on its own.
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto n = rwd::stack<8>(rwd::block(v = v + f(w), x = x + v));
#else
inline constexpr auto n = rwd::stack<8>(rwd::block(v = v + f(x), x = x + v));
#endif
