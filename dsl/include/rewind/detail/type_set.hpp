// rewind: sets of types as hana tuples of hana types (the variables, runtime scalars and map
// calls an expression reads), by pack expansion.
#pragma once

#include <boost/hana.hpp>
#include <cstddef>
#include <type_traits>

namespace rwd::detail {

namespace hana = boost::hana;

// Membership, insertion and position in a tuple of hana types by pack expansion, not by
// hana::contains, hana::append and hana::index_if (each of which instantiates an accessor per
// element): blocks with dozens of maps build and query these tuples hundreds of times.
template <class T, class... Types>
constexpr bool contains_type(const hana::tuple<Types...>&) {
  return (std::is_same_v<typename Types::type, T> || ... || false);
}
/// Append hana::type_c<T> to a tuple of types unless it is there already.
template <class... Types, class T>
constexpr auto insert_unique(const hana::tuple<Types...>& t, hana::basic_type<T>) {
  if constexpr (contains_type<T>(hana::tuple<Types...>{})) return t;
  else return hana::tuple<Types..., hana::type<T>>{};
}
/// Position of the type V in a tuple of hana types (its length when V is not there).
template <class V, class... Types>
constexpr std::size_t index_in(const hana::tuple<Types...>&) {
  std::size_t i = 0;
  bool found = false;
  ((found = found || std::is_same_v<typename Types::type, V>, i += found ? 0 : 1), ...);
  return i;
}
template <class Tuple, class... Ts>
constexpr auto insert_all(Tuple t, hana::tuple<Ts...> xs) {
  return hana::fold_left(xs, t, [](auto acc, auto x) { return insert_unique(acc, x); });
}

}  // namespace rwd::detail
