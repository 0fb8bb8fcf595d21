// The budget analysis takes at most 32 distinct maps and functions in a block.
#include "prelude.hpp"
#include "../dsl/long_blocks.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto r = rwd::budget<float>(long_blocks::maps_in_one_update<32>);
#else
inline constexpr auto r = rwd::budget<float>(long_blocks::maps_in_one_update<31>);
#endif
