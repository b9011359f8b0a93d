#pragma once
/// \file fusegrad/core/element.hpp
/// The element types a tensor may hold.

#include <concepts>
#include <string_view>
#include <type_traits>

namespace fusegrad {

/// `float` or `double`: the element types fusegrad tensors, kernels and gradients support.
template <class T>
concept Element = std::same_as<T, float> || std::same_as<T, double>;

/// Scalars accepted beside a tensor in arithmetic (`x * 2`, `1.0 - x`).
template <class S>
concept Scalar = std::is_arithmetic_v<S>;

template <Element T>
constexpr std::string_view dtype_name() noexcept {
  if constexpr (std::same_as<T, float>) return "float32";
  else return "float64";
}

namespace detail {
/// The one element type that is not `T` (what a tracer of one type leaves to the other).
template <Element T>
using other_element_t = std::conditional_t<std::same_as<T, float>, double, float>;
}  // namespace detail

}  // namespace fusegrad
