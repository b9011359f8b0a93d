#pragma once
/// \file fusegrad/ops/abs.hpp
/// |x|; d/dx = sign(x) (0 at 0, like PyTorch).
#include "fusegrad/ops/step.hpp"

namespace fusegrad {
namespace ops {
struct abs_op {
  static constexpr std::string_view name = "abs", grad_fn = "AbsBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static constexpr V value(const V& x) {
    using std::abs;
    return abs(x);
  }
  static constexpr auto derivative(const auto& x, const auto&, const auto& g) { return g * sign(x); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto abs(const X& x) {
  return apply_op(ops::abs_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_ABS(X) X(U, plain, abs_op)
