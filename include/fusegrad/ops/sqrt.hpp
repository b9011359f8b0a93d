#pragma once
/// \file fusegrad/ops/sqrt.hpp
/// sqrt(x); d/dx = 1 / (2 sqrt(x)), read from the saved output.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct sqrt_op {
  static constexpr std::string_view name = "sqrt", grad_fn = "SqrtBackward0";
  static constexpr bool uses_input = false, uses_output = true;
  static constexpr double cost = 1.05;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V>
  static constexpr V value(const V& x) {
    using std::sqrt;
    return sqrt(x);
  }
  static constexpr auto derivative(const auto&, const auto& y, const auto& g) { return g / (y * 2.0); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto sqrt(const X& x) {
  return apply_op(ops::sqrt_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_SQRT(X) X(U, plain, sqrt_op)
