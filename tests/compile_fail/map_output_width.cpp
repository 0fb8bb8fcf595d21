// A map whose output is 16 wide cannot be added to the state.
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto h = rwd::map<"h">(rwd::dense<16>, rwd::tanh);
#else
inline constexpr auto h = rwd::map<"h">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
#endif
