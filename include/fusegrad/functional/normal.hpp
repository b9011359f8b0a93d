#pragma once
/// \file fusegrad/functional/normal.hpp
/// `fg::normal_lpdf(x, mu, sigma)` inside a transformed function, for a range `x` and scalar
/// `mu` and `sigma` (numbers, scalar arguments or expressions of them): a statistic of the
/// range (`range_stat_expr`) that the span engine computes with the op's own kernel, one pass
/// over `x` for the sums of x - mu and its square (each call checks `sigma` first), and
/// differentiates in closed form
/// (`ops::normal_lpdf_rule`, ops/distributions.hpp). Any other `x` (an element-wise expression, a
/// range `mu`) takes the op's general form.

#include <type_traits>

#include "fusegrad/functional/eval.hpp"
#include "fusegrad/ops/distributions.hpp"

namespace fusegrad {
namespace detail::fn {
/// A parameter of a statistic of a range: a number or an expression with no range in it.
// clang-format 14 misreads a parenthesis after && in a concept:
// clang-format off
template <class P>
concept scalar_parameter = std::is_arithmetic_v<P> || (Expr<P> && !info<P>::elementwise && info<P>::reds == 0);
// clang-format on

template <Element T, class P>
constexpr auto as_parameter(const P& p) {
  if constexpr (std::is_arithmetic_v<P>) return constant_arg<T>{{}, static_cast<T>(p)};
  else return p;
}
}  // namespace detail::fn

template <std::size_t I, Element T, Parameter M, Parameter S>
requires detail::fn::scalar_parameter<M> && detail::fn::scalar_parameter<S>
constexpr auto normal_lpdf(const span_arg<I, T>& x, const M& mu, const S& sigma) {
  using PM = decltype(detail::fn::as_parameter<T>(mu));
  using PS = decltype(detail::fn::as_parameter<T>(sigma));
  return range_stat_expr<ops::normal_lpdf_rule, I, T, PM, PS>{
      {}, x, {detail::fn::as_parameter<T>(mu), detail::fn::as_parameter<T>(sigma)}};
}

}  // namespace fusegrad
