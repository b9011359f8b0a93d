#pragma once
/// \file fusegrad/value/dual.hpp
/// Forward mode: `dual<X>` is a value `p` with a tangent `t`, both of an operand type `X`
/// (`num<double>`, `num<fg::simd<float>>`, another `dual`: a dual of duals carries second
/// derivatives). An op on duals computes its value with the op on `p`, and pushes the tangent
/// through the op's one derivative rule: the rules of fusegrad's ops are linear in the
/// incoming gradient and element-wise, so the rule that pulls a cotangent back
/// (`derivative(x, y, g)`, `da`, `db`) also pushes a tangent forward: `t_y = rule(x, y, t_x)`,
/// `t_y = da(a, b, y, t_a) + db(a, b, y, t_b)`. No op has a second derivative written for it.

#include <tuple>
#include <utility>

#include "fusegrad/value/num.hpp"

namespace fusegrad {

/// A value with a tangent (forward-mode automatic differentiation), over any operand `X`.
template <Operand X>
struct dual {
  using element_type = element_of<X>;
  X p{}, t{};
};

template <class X>
struct operand_traits<dual<X>> {
  static constexpr bool value = true;
  using element_type = element_of<X>;
};

namespace detail {
template <class X>
constexpr dual<X> zero_like(const dual<X>& x) {
  return {zero_like(x.p), zero_like(x.p)};
}
}  // namespace detail

template <class X, class Op>
requires UnaryOp<Op, element_of<X>>
constexpr dual<X> apply_op(const Op& op, const dual<X>& x) {
  if constexpr (requires { apply_with_sibling(op, x.p); }) {  // the derivative reads the sibling: one reduction
    const auto [y, s] = apply_with_sibling(op, x.p);
    return {y, X(op.derivative_with_sibling(x.p, y, s, x.t))};
  } else {
    X y = apply_op(op, x.p);
    if constexpr (detail::has_unary_derivative<Op, X>) return {y, X(op.derivative(x.p, y, x.t))};
    else return {y, detail::zero_like(y)};  // piecewise constant (step, sign, comparisons)
  }
}
template <class X, class Op>
requires BinaryOp<Op, element_of<X>>
constexpr dual<X> apply_op(const Op& op, const dual<X>& a, const dual<X>& b) {
  X y = apply_op(op, a.p, b.p);
  if constexpr (detail::has_binary_derivative<Op, X>) return {y, X(op.da(a.p, b.p, y, a.t) + op.db(a.p, b.p, y, b.t))};
  else return {y, detail::zero_like(y)};
}

/// A custom op (`fg::function<F>`) on duals: `F::forward` on the values; the tangent through
/// `F::backward` (element-wise, so linear and diagonal in each input: the tangent is the sum
/// over inputs of `backward` given that input's tangent).
template <class F, class X, class... Xs>
constexpr auto apply_function(function_tag<F>, const dual<X>& x0, const dual<Xs>&... xs) {
  const X y = F::forward(x0.p, xs.p...);
  auto saved = [&] {
    if constexpr (requires { F::setup_context(x0.p, xs.p..., y); }) return F::setup_context(x0.p, xs.p..., y);
    else return std::tuple{x0.p, xs.p...};
  }();
  const std::tuple<const X&, const Xs&...> tangents{x0.t, xs.t...};
  auto t = [&]<std::size_t... I>(std::index_sequence<I...>) {
    if constexpr (sizeof...(Xs) == 0) return X(F::backward(std::as_const(saved), x0.t));
    else return X((std::get<I>(F::backward(std::as_const(saved), std::get<I>(tangents))) + ...));
  }
  (std::index_sequence_for<X, Xs...>{});
  return dual<X>{y, t};
}

}  // namespace fusegrad
