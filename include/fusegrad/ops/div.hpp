#pragma once
/// \file fusegrad/ops/div.hpp
/// a / b (broadcasting), x / s and s / x.
#include "fusegrad/ops/neg.hpp"

namespace fusegrad {
namespace ops {
struct div_op {
  static constexpr std::string_view name = "div", grad_fn = "DivBackward0";
  static constexpr bool uses_input = true, uses_output = true;
  static constexpr double cost = 0.62;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return a / b;
  }
  static constexpr auto da(const auto&, const auto& b, const auto&, const auto& g) { return g / b; }
  static constexpr auto db(const auto&, const auto& b, const auto& y, const auto& g) { return -(g * y) / b; }
};
template <Element T>
struct div_scalar_op {  // x / s
  static constexpr std::string_view name = "div", grad_fn = "DivBackward1";
  static constexpr bool uses_input = false, uses_output = false;
  static constexpr double cost = 0.62;  ///< in streamed loads (bench/bench_op_costs.cpp)
  T s;
  template <class V>
  constexpr V value(const V& x) const {
    return x / V(s);
  }
  static constexpr bool scalar_is_input = true;  // see detail::scalar_is_input
  static constexpr auto derivative_by(const auto&, const auto&, const auto& g, const auto& s) { return g / s; }
  constexpr auto derivative(const auto& x, const auto& y, const auto& g) const { return derivative_by(x, y, g, s); }
};
template <Element T>
struct rdiv_scalar_op {  // s / x
  static constexpr std::string_view name = "rdiv", grad_fn = "RdivBackward1";
  static constexpr bool uses_input = true, uses_output = true;
  static constexpr double cost = 0.62;  ///< in streamed loads (bench/bench_op_costs.cpp)
  T s;
  template <class V>
  constexpr V value(const V& x) const {
    return V(s) / x;
  }
  static constexpr bool scalar_is_input = true;  // (its derivative does not read s)
  static constexpr auto derivative_by(const auto& x, const auto& y, const auto& g, const auto&) { return -(g * y) / x; }
  constexpr auto derivative(const auto& x, const auto& y, const auto& g) const { return derivative_by(x, y, g, s); }
};
}  // namespace ops

template <Operand A, Operand B>
constexpr auto operator/(const A& a, const B& b) {
  return apply_op(ops::div_op{}, a, b);
}
template <Operand A, Scalar S>
constexpr auto operator/(const A& a, S s) {
  return apply_op(ops::div_scalar_op<element_of<A>>{static_cast<element_of<A>>(s)}, a);
}
template <Scalar S, Operand A>
constexpr auto operator/(S s, const A& a) {
  return apply_op(ops::rdiv_scalar_op<element_of<A>>{static_cast<element_of<A>>(s)}, a);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_DIV(X) X(B, plain, div_op) X(U, scalar, div_scalar_op) X(U, scalar, rdiv_scalar_op)
