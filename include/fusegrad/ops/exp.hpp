#pragma once
/// \file fusegrad/ops/exp.hpp
/// exp(x); d/dx = exp(x), read from the saved output.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct exp_op {
  static constexpr std::string_view name = "exp", grad_fn = "ExpBackward0";
  static constexpr bool uses_input = false, uses_output = true;
  static constexpr double cost = 1.75;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V>
  static constexpr V value(const V& x) {
    return lanes::exp(x);
  }
  static constexpr auto derivative(const auto&, const auto& y, const auto& g) { return g * y; }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto exp(const X& x) {
  return apply_op(ops::exp_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_EXP(X) X(U, plain, exp_op)
