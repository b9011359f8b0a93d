#pragma once
/// \file fusegrad/ops/sin.hpp
/// sin(x); d/dx = cos(x).
#include "fusegrad/ops/cos.hpp"  // the derivative
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct sin_op {
  static constexpr std::string_view name = "sin", grad_fn = "SinBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double cost = 5.3;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V> static constexpr V value(const V& x) { return lanes::sin(x); }
  static constexpr auto derivative(const auto& x, const auto&, const auto& g) { return g * cos(x); }
};
}  // namespace ops

template <OperandOrNumber X> constexpr auto sin(const X& x) { return apply_op(ops::sin_op{}, x); }
}  // namespace fusegrad
