// rewind command-line program: the transition of --net staged chosen at run time (host code only:
// the CUDA side of the program does not build the staged network).
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "reference.hpp"

namespace rewind_cli::ref::staged {

/// Calls fn with the transition type of `name`: rwd::squeeze_boundary, or strided_t.
template <class Fn>
decltype(auto) with_transition(const std::string& name, Fn&& fn) {
  if (name == "strided") return fn(std::type_identity<strided_t>{});
  if (name != "squeeze") throw rwd::error("rewind: --transition is squeeze or strided, not " + name);
  return fn(std::type_identity<rwd::squeeze_boundary>{});
}
/// The stages' shapes (at any depth) with transition `name`.
inline std::vector<rwd::tensor_shape> shapes(const std::string& name) {
  return with_transition(name, [](auto down) { return rwd::staged_layout<stem_t, block_t, typename decltype(down)::type>(stages(1), classes).shapes; });
}

}  // namespace rewind_cli::ref::staged
