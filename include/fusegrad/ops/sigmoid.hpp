#pragma once
/// \file fusegrad/ops/sigmoid.hpp
/// 1 / (1 + exp(-x)); d/dx = y (1 - y), read from the saved output: `sigmoid_backward(g, y)`,
/// one op (ATen's `sigmoid_backward`), so that every path runs sigmoid's gradient as one pass
/// over memory (eager) or one instruction (a captured backward) instead of three.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
template <Operand G, Operand Y>
constexpr auto sigmoid_backward(const G& g, const Y& y);

namespace ops {
/// g (y (1 - y)), rounded after each of its three steps as the three ops `g * (y * (1 - y))`
/// round (the gradient's bits are those of the composition, on every path).
struct sigmoid_backward_op {
  static constexpr std::string_view name = "sigmoid_backward", grad_fn = "SigmoidBackwardBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double cost = 0.9;  ///< three arithmetic ops
  template <class V>
  static constexpr V value(const V& g, const V& y) {
    V u = V(1) - y;
    detail::round_here(u);
    V d = y * u;
    detail::round_here(d);
    return g * d;
  }
  // Operands (g, y), this op's result, and the gradient flowing back to it (gg).
  static constexpr auto da(const auto&, const auto& y, const auto&, const auto& gg) { return sigmoid_backward(gg, y); }
  static constexpr auto db(const auto& g, const auto& y, const auto&, const auto& gg) {
    return (gg * g) * (1.0 - 2.0 * y);
  }
};

struct sigmoid_op {
  static constexpr std::string_view name = "sigmoid", grad_fn = "SigmoidBackward0";
  static constexpr bool uses_input = false, uses_output = true;
  static constexpr double cost = 2.35;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V>
  static constexpr V value(const V& x) {
    return V(1) / (V(1) + lanes::exp(-x));
  }
  static constexpr auto derivative(const auto&, const auto& y, const auto& g) { return sigmoid_backward(g, y); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto sigmoid(const X& x) {
  return apply_op(ops::sigmoid_op{}, x);
}
/// sigmoid's gradient from its output: g y (1 - y).
template <Operand G, Operand Y>
constexpr auto sigmoid_backward(const G& g, const Y& y) {
  return apply_op(ops::sigmoid_backward_op{}, g, y);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_SIGMOID(X) X(U, plain, sigmoid_op) X(B, plain, sigmoid_backward_op)
