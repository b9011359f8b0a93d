#pragma once
/// \file fusegrad/ops/cos.hpp
/// cos(x); d/dx = -sin(x).
#include "fusegrad/ops/op.hpp"
#include "fusegrad/ops/sin.hpp"  // the derivative

namespace fusegrad {
namespace ops {
struct cos_op {
  static constexpr std::string_view name = "cos", grad_fn = "CosBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double cost = 5.3;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V> static constexpr V value(const V& x) { return lanes::cos(x); }
  static constexpr auto derivative(const auto& x, const auto&, const auto& g) { return g * -sin(x); }
};
}  // namespace ops

template <OperandOrNumber X> constexpr auto cos(const X& x) { return apply_op(ops::cos_op{}, x); }
}  // namespace fusegrad
