// w is read but no update of the block writes it (rule 4).
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto b = rwd::block(v = v + f(w), x = x + v);
#else
inline constexpr auto b = rwd::block(v = v + f(x), x = x + v);
#endif
