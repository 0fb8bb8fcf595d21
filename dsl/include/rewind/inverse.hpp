// rewind: the inverse of a block, derived from its type.
//
// Law: inverse(b)(b(s)) == s for every state s (exactly in exact arithmetic; in floating point
// up to the rewind budget). The inverse runs the inverted updates in reverse order:
//   update s <- alpha*s + g   becomes   s <- (s - g) / alpha.
// inverse(inverse(b)) has the type of b (a test checks it).
#pragma once

#include "block.hpp"

namespace rwd {

template <class... Updates>
constexpr auto inverse(block_t<Updates...> b) {
  return hana::unpack(hana::reverse(b.updates()),
                      [](auto... us) { return block_t<decltype(invert(us))...>{}; });
}

}  // namespace rwd
