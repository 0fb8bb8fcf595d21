// rewind: compile-time names of state variables, runtime scalars and maps.
//
// Users write `var<"x">`; the string is turned into a type holding its characters as a pack,
// `name<'x'>`, so that no class-type template argument ever appears in an expression type.
// (nvcc's generated kernel stubs cannot spell class-type template arguments, and expression
// types are the template arguments of the CUDA kernels.)
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>

namespace rwd {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(const char (&s)[N]) {  // NOLINT: implicit on purpose, var<"x">
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  constexpr std::string_view view() const { return {chars, N - 1}; }
  constexpr bool operator==(const fixed_string&) const = default;
};

/// A name as a type: name<'m', 'u'>.
template <char... Cs>
struct name {
  static constexpr char chars[] = {Cs..., '\0'};
  static constexpr std::string_view view() { return {chars, sizeof...(Cs)}; }
};

namespace detail {
template <fixed_string S, std::size_t... I>
constexpr auto make_name(std::index_sequence<I...>) {
  return name<S.chars[I]...>{};
}
}  // namespace detail

/// The name type of a string: name_of<"mu"> is name<'m', 'u'>.
template <fixed_string S>
using name_of = decltype(detail::make_name<S>(std::make_index_sequence<sizeof(S.chars) - 1>{}));

}  // namespace rwd
