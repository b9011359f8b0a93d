#pragma once
/// \file fusegrad/ops/relu.hpp
/// max(x, 0), NaN staying NaN (as PyTorch's relu); d/dx = 1 where the output is positive,
/// else 0 (PyTorch's convention at 0, and at NaN).
#include "fusegrad/ops/step.hpp"

namespace fusegrad {
namespace ops {
struct relu_op {
  static constexpr std::string_view name = "relu", grad_fn = "ReluBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = true;
  template <class V>
  static constexpr V value(const V& x) {
    return lanes::select_gt(V(0), x, V(0), x);
  }
  static constexpr auto derivative(const auto&, const auto& y, const auto& g) { return g * step(y); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto relu(const X& x) {
  return apply_op(ops::relu_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_RELU(X) X(U, plain, relu_op)
