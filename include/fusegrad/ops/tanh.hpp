#pragma once
/// \file fusegrad/ops/tanh.hpp
/// tanh(x); d/dx = 1 - tanh(x)^2, read from the saved output: `tanh_backward(g, y)`, one op
/// (ATen's `tanh_backward`), so that every path runs tanh's gradient as one pass over memory
/// (eager) or one instruction (a captured backward) instead of three.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
template <Operand G, Operand Y>
constexpr auto tanh_backward(const G& g, const Y& y);

namespace ops {
/// g (1 - y²), rounded after each of its three steps as the three ops `g * (1 - y * y)` round
/// (the gradient's bits are those of the composition, on every path).
struct tanh_backward_op {
  static constexpr std::string_view name = "tanh_backward", grad_fn = "TanhBackwardBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double cost = 0.9;  ///< three arithmetic ops
  template <class V>
  static constexpr V value(const V& g, const V& y) {
    V t = y * y;
    detail::round_here(t);
    V u = V(1) - t;
    detail::round_here(u);
    return g * u;
  }
  // Operands (g, y), this op's result, and the gradient flowing back to it (gg).
  static constexpr auto da(const auto&, const auto& y, const auto&, const auto& gg) { return tanh_backward(gg, y); }
  static constexpr auto db(const auto& g, const auto& y, const auto&, const auto& gg) { return -2.0 * (gg * g * y); }
};

struct tanh_op {
  static constexpr std::string_view name = "tanh", grad_fn = "TanhBackward0";
  static constexpr bool uses_input = false, uses_output = true;
  static constexpr double cost = 4.2;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V>
  static constexpr V value(const V& x) {
    return lanes::tanh(x);
  }
  static constexpr auto derivative(const auto&, const auto& y, const auto& g) { return tanh_backward(g, y); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto tanh(const X& x) {
  return apply_op(ops::tanh_op{}, x);
}
/// tanh's gradient from its output: g (1 - y²).
template <Operand G, Operand Y>
constexpr auto tanh_backward(const G& g, const Y& y) {
  return apply_op(ops::tanh_backward_op{}, g, y);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_TANH(X) X(U, plain, tanh_op) X(B, plain, tanh_backward_op)
