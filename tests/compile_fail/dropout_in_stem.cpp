// A stem (or a transition) is recomputed by its backward pass outside the step's dropout key: a
// dropout layer in it is refused; in a block's map it is not.
#include "prelude.hpp"

#ifdef REWIND_SHOULD_FAIL
inline constexpr auto s = rwd::transition<"down">(rwd::squeeze, rwd::conv<8, 1>, rwd::dropout(0.1_c));
#else
inline constexpr auto s = rwd::transition<"down">(rwd::squeeze, rwd::conv<8, 1>);
inline constexpr auto fd = rwd::map<"fd">(rwd::conv<8, 3>, rwd::dropout(0.1_c), rwd::conv_same<3>);
#endif
