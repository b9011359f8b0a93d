#pragma once
/// \file fusegrad/ops/sin.hpp
/// sin(x); d/dx = cos(x), computed with the sine where a graph needs both (`sincos`).
#include <utility>

#include "fusegrad/ops/cos.hpp"  // the derivative
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct cos_op;
struct sin_op {
  static constexpr std::string_view name = "sin", grad_fn = "SinBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double cost = 5.3;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V>
  static constexpr V value(const V& x) {
    return lanes::sin(x);
  }
  using sibling = cos_op;
  static constexpr double sibling_cost = 0.6;  ///< cos(x) once sin(x) is computed: a select and a sign
  template <class V>
  static std::pair<V, V> with_sibling(const V& x) {
    return lanes::sincos(x);
  }
  static constexpr auto derivative_with_sibling(const auto&, const auto&, const auto& c, const auto& g) {
    return g * c;
  }
  static constexpr auto derivative(const auto& x, const auto& y, const auto& g) {
    return derivative_with_sibling(x, y, cos(x), g);
  }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto sin(const X& x) {
  return apply_op(ops::sin_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_SIN(X) X(U, plain, sin_op)
