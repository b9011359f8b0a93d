#pragma once
/// \file fusegrad/ops/sub.hpp
/// a - b (broadcasting), x - s and s - x.
#include "fusegrad/ops/neg.hpp"

namespace fusegrad {
namespace ops {
struct sub_op {
  static constexpr std::string_view name = "sub", grad_fn = "SubBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return a - b;
  }
  static constexpr auto da(const auto&, const auto&, const auto&, const auto& g) { return g; }
  static constexpr auto db(const auto&, const auto&, const auto&, const auto& g) { return -g; }
};
template <Element T>
struct sub_scalar_op {  // x - s
  static constexpr std::string_view name = "sub", grad_fn = "SubBackward1";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  T s;
  template <class V>
  constexpr V value(const V& x) const {
    return x - V(s);
  }
  static constexpr bool scalar_is_input = true;  // (its derivative does not read s)
  static constexpr auto derivative_by(const auto&, const auto&, const auto& g, const auto&) { return g; }
  constexpr auto derivative(const auto& x, const auto& y, const auto& g) const { return derivative_by(x, y, g, s); }
};
template <Element T>
struct rsub_scalar_op {  // s - x
  static constexpr std::string_view name = "rsub", grad_fn = "RsubBackward1";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  T s;
  template <class V>
  constexpr V value(const V& x) const {
    return V(s) - x;
  }
  static constexpr bool scalar_is_input = true;  // (its derivative does not read s)
  static constexpr auto derivative_by(const auto&, const auto&, const auto& g, const auto&) { return -g; }
  constexpr auto derivative(const auto& x, const auto& y, const auto& g) const { return derivative_by(x, y, g, s); }
};
}  // namespace ops

template <Operand A, Operand B>
constexpr auto operator-(const A& a, const B& b) {
  return apply_op(ops::sub_op{}, a, b);
}
template <Operand A, Scalar S>
constexpr auto operator-(const A& a, S s) {
  return apply_op(ops::sub_scalar_op<element_of<A>>{static_cast<element_of<A>>(s)}, a);
}
template <Scalar S, Operand A>
constexpr auto operator-(S s, const A& a) {
  return apply_op(ops::rsub_scalar_op<element_of<A>>{static_cast<element_of<A>>(s)}, a);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_SUB(X) X(B, plain, sub_op) X(U, scalar, sub_scalar_op) X(U, scalar, rsub_scalar_op)
