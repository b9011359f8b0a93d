#pragma once
/// \file fusegrad/ops/exp_log.hpp
/// log1p(x) = log(1 + x) and expm1(x) = exp(x) - 1, accurate near 0; log2, exp2. Derivative
/// rules as PyTorch's: 1/(x + 1), y + 1, 1/(x ln 2), y ln 2.
#include <numbers>

#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"

namespace fusegrad {
namespace ops {
struct log1p_op {
  static constexpr std::string_view name = "log1p", grad_fn = "Log1PBackward0";
  static constexpr double cost = 4.5;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::log1p;
    return lanes::select_nonzero(x, log1p(x), x);  // log1p(-0) = -0 (xsimd's is +0)
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g / (x + 1.0); }
};
struct expm1_op {
  static constexpr std::string_view name = "expm1", grad_fn = "Expm1Backward0";
  static constexpr double cost = 3.3;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = false, uses_output = true;
  template <class V>
  static V value(const V& x) {
    return lanes::select_nonzero(x, lanes::expm1(x), x);  // expm1(-0) = -0 (xsimd's is +0)
  }
  static auto derivative(const auto&, const auto& y, const auto& g) { return g * (y + 1.0); }
};
struct log2_op {
  static constexpr std::string_view name = "log2", grad_fn = "Log2Backward0";
  static constexpr double cost = 3.5;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::log2;
    return log2(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g / (x * std::numbers::ln2); }
};
struct exp2_op {
  static constexpr std::string_view name = "exp2", grad_fn = "Exp2Backward0";
  static constexpr double cost = 1.45;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = false, uses_output = true;
  template <class V>
  static V value(const V& x) {
    return lanes::exp2(x);
  }
  static auto derivative(const auto&, const auto& y, const auto& g) { return g * y * std::numbers::ln2; }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto log1p(const X& x) {
  return apply_op(ops::log1p_op{}, x);
}
template <OperandOrNumber X>
constexpr auto expm1(const X& x) {
  return apply_op(ops::expm1_op{}, x);
}
template <OperandOrNumber X>
constexpr auto log2(const X& x) {
  return apply_op(ops::log2_op{}, x);
}
template <OperandOrNumber X>
constexpr auto exp2(const X& x) {
  return apply_op(ops::exp2_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_EXP_LOG(X) X(U, plain, log1p_op) X(U, plain, expm1_op) X(U, plain, log2_op) X(U, plain, exp2_op)
