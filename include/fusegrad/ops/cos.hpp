#pragma once
/// \file fusegrad/ops/cos.hpp
/// cos(x); d/dx = -sin(x), computed with the cosine where a graph needs both (`sincos`).
#include <utility>

#include "fusegrad/ops/op.hpp"
#include "fusegrad/ops/sin.hpp"  // the derivative

namespace fusegrad {
namespace ops {
struct sin_op;
struct cos_op {
  static constexpr std::string_view name = "cos", grad_fn = "CosBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double cost = 5.3;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V>
  static constexpr V value(const V& x) {
    return lanes::cos(x);
  }
  using sibling = sin_op;
  static constexpr double sibling_cost = 0.6;  ///< sin(x) once cos(x) is computed: a select and a sign
  template <class V>
  static std::pair<V, V> with_sibling(const V& x) {
    const auto [s, c] = lanes::sincos(x);
    return {c, s};
  }
  static constexpr auto derivative_with_sibling(const auto&, const auto&, const auto& s, const auto& g) {
    return g * -s;
  }
  static constexpr auto derivative(const auto& x, const auto& y, const auto& g) {
    return derivative_with_sibling(x, y, sin(x), g);
  }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto cos(const X& x) {
  return apply_op(ops::cos_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_COS(X) X(U, plain, cos_op)
