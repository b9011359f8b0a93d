#pragma once
/// \file fusegrad/ops/sigmoid.hpp
/// 1 / (1 + exp(-x)); d/dx = y (1 - y), read from the saved output.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct sigmoid_op {
  static constexpr std::string_view name = "sigmoid", grad_fn = "SigmoidBackward0";
  static constexpr bool uses_input = false, uses_output = true;
  static constexpr double cost = 2.35;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V> static constexpr V value(const V& x) {
    using std::exp;
    return V(1) / (V(1) + exp(-x));
  }
  static constexpr auto derivative(const auto&, const auto& y, const auto& g) { return g * (y * (1.0 - y)); }
};
}  // namespace ops

template <Operand X> constexpr auto sigmoid(const X& x) { return apply_op(ops::sigmoid_op{}, x); }
}  // namespace fusegrad
