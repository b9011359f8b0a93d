#pragma once
/// \file fusegrad/ops/mul.hpp
/// a * b (broadcasting) and x * s.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct mul_op {
  static constexpr std::string_view name = "mul", grad_fn = "MulBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return a * b;
  }
  static constexpr auto da(const auto&, const auto& b, const auto&, const auto& g) { return g * b; }
  static constexpr auto db(const auto& a, const auto&, const auto&, const auto& g) { return g * a; }
};
template <Element T>
struct mul_scalar_op {
  static constexpr std::string_view name = "mul", grad_fn = "MulBackward1";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  T s;
  template <class V>
  constexpr V value(const V& x) const {
    return x * V(s);
  }
  static constexpr bool scalar_is_input = true;  // see detail::scalar_is_input
  static constexpr auto derivative_by(const auto&, const auto&, const auto& g, const auto& s) { return g * s; }
  constexpr auto derivative(const auto& x, const auto& y, const auto& g) const { return derivative_by(x, y, g, s); }
};
}  // namespace ops

template <Operand A, Operand B>
constexpr auto operator*(const A& a, const B& b) {
  return apply_op(ops::mul_op{}, a, b);
}
template <Operand A, Scalar S>
constexpr auto operator*(const A& a, S s) {
  return apply_op(ops::mul_scalar_op<element_of<A>>{static_cast<element_of<A>>(s)}, a);
}
template <Scalar S, Operand A>
constexpr auto operator*(S s, const A& a) {
  return a * s;
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_MUL(X) X(B, plain, mul_op) X(U, scalar, mul_scalar_op)
