#pragma once
/// \file fusegrad/ops/zeros_like.hpp
/// zeros_like(x): 0 everywhere (NaN and inf included), no gradient. The zero gradient of the
/// piecewise-constant ops (floor, ceil, round, trunc) and of a `where`'s condition, written
/// once for every algebra (`g * 0` would be NaN where `g` is inf or NaN).
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct zeros_like_op {
  static constexpr std::string_view name = "zeros_like";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static V value(const V&) {
    return V(0);
  }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto zeros_like(const X& x) {
  return apply_op(ops::zeros_like_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_ZEROS_LIKE(X) X(U, plain, zeros_like_op)
