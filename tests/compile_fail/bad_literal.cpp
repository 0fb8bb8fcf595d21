// A hexadecimal literal is not a decimal constant.
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto c = 0x1F_c;
#else
inline constexpr auto c = 0.5_c;
#endif
