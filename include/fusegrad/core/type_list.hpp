#pragma once
/// \file fusegrad/core/type_list.hpp
/// A list of types, and the index of a type in it.

#include <cstddef>
#include <type_traits>

namespace fusegrad::detail {

/// A list of types (the op table, the compile-time graph's node types).
template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};

/// The types of `a`, then those of `b`.
template <class... A, class... B>
constexpr type_list<A..., B...> operator+(type_list<A...>, type_list<B...>) {
  return {};
}

/// Index of type `E` in a type list (-1: absent).
template <class E, class... Ts>
constexpr int type_index(type_list<Ts...>) {
  int i = 0, r = -1;
  ((r = (r < 0 && std::is_same_v<E, Ts>) ? i : r, ++i), ...);
  return r;
}

}  // namespace fusegrad::detail
