#pragma once
/// \file fusegrad/ops/tanh.hpp
/// tanh(x); d/dx = 1 - tanh(x)^2, read from the saved output.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct tanh_op {
  static constexpr std::string_view name = "tanh", grad_fn = "TanhBackward0";
  static constexpr bool uses_input = false, uses_output = true;
  static constexpr double cost = 4.2;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V> static constexpr V value(const V& x) { using std::tanh; return tanh(x); }
  static constexpr auto derivative(const auto&, const auto& y, const auto& g) { return g * (1.0 - y * y); }
};
}  // namespace ops

template <Operand X> constexpr auto tanh(const X& x) { return apply_op(ops::tanh_op{}, x); }
}  // namespace fusegrad
