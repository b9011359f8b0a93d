#pragma once
/// \file fusegrad/ops/reciprocal.hpp
/// square(x) = x²; reciprocal(x) = 1/x; rsqrt(x) = 1/√x (exactly rounded division and square
/// root: not the approximate hardware reciprocals). Derivative rules as PyTorch's:
/// 2x, -y², -y³/2 (from the saved output).
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"

namespace fusegrad {
namespace ops {
struct square_op {
  static constexpr std::string_view name = "square", grad_fn = "PowBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    return x * x;
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * (x * 2.0); }
};
struct reciprocal_op {
  static constexpr std::string_view name = "reciprocal", grad_fn = "ReciprocalBackward0";
  static constexpr double cost = 0.63;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = false, uses_output = true;
  template <class V>
  static V value(const V& x) {
    return V(1) / x;
  }
  static auto derivative(const auto&, const auto& y, const auto& g) { return -g * (y * y); }
};
struct rsqrt_op {
  static constexpr std::string_view name = "rsqrt", grad_fn = "RsqrtBackward0";
  static constexpr double cost = 1.75;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = false, uses_output = true;
  template <class V>
  static V value(const V& x) {
    using std::sqrt;
    return V(1) / sqrt(x);
  }
  static auto derivative(const auto&, const auto& y, const auto& g) { return (g * -0.5) * (y * y * y); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto square(const X& x) {
  return apply_op(ops::square_op{}, x);
}
template <OperandOrNumber X>
constexpr auto reciprocal(const X& x) {
  return apply_op(ops::reciprocal_op{}, x);
}
template <OperandOrNumber X>
constexpr auto rsqrt(const X& x) {
  return apply_op(ops::rsqrt_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_RECIPROCAL(X) X(U, plain, square_op) X(U, plain, reciprocal_op) X(U, plain, rsqrt_op)
