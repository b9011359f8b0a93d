#pragma once
/// \file fusegrad/ops/neg.hpp
/// -x.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct neg_op {
  static constexpr std::string_view name = "neg", grad_fn = "NegBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  template <class V>
  static constexpr V value(const V& x) {
    return -x;
  }
  static constexpr auto derivative(const auto&, const auto&, const auto& g) { return -g; }
};
}  // namespace ops

template <Operand X>
constexpr auto operator-(const X& x) {
  return apply_op(ops::neg_op{}, x);
}
template <OperandOrNumber X>
constexpr auto neg(const X& x) {
  return apply_op(ops::neg_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_NEG(X) X(U, plain, neg_op)
