#pragma once
/// \file fusegrad/ops/log.hpp
/// Natural log; d/dx = 1/x.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct log_op {
  static constexpr std::string_view name = "log", grad_fn = "LogBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double cost = 3.75;  ///< in streamed loads (bench/bench_op_costs.cpp)
  template <class V>
  static constexpr V value(const V& x) {
    using std::log;
    return log(x);
  }
  static constexpr auto derivative(const auto& x, const auto&, const auto& g) { return g / x; }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto log(const X& x) {
  return apply_op(ops::log_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_LOG(X) X(U, plain, log_op)
