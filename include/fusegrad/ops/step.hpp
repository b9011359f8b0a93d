#pragma once
/// \file fusegrad/ops/step.hpp
/// step(x) = 1 where x > 0, else 0; sign(x) = -1, 0 or +1. Piecewise constant, so they carry
/// no gradient (like PyTorch's comparison results); derivative rules use them as masks.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct step_op {
  static constexpr std::string_view name = "step";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& x) {
    return lanes::gt(x, V(0));
  }
};
struct sign_op {
  static constexpr std::string_view name = "sign";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& x) {
    return lanes::sign(x);
  }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto step(const X& x) {
  return apply_op(ops::step_op{}, x);
}
template <OperandOrNumber X>
constexpr auto sign(const X& x) {
  return apply_op(ops::sign_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_STEP(X) X(U, plain, step_op) X(U, plain, sign_op)
