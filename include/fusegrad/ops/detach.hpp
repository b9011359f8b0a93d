#pragma once
/// \file fusegrad/ops/detach.hpp
/// detach(x): x's value, carrying no gradient (PyTorch's `x.detach()`, JAX's `stop_gradient`),
/// as an element-wise op, so generic code runs it on every path: eager, compiled, traced. The
/// stable forms of the softmax family shift by a detached max: the shift's gradient is zero
/// in exact arithmetic, and without the detach every backward computed it (a sum of the
/// row's gradients, then the max's own rule) to get rounding noise at the max's position.
/// On an eager tensor it makes a new one, where the member `t.detach()` shares `t`'s storage.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct detach_op {
  static constexpr std::string_view name = "detach";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& x) {
    return x;
  }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto detach(const X& x) {
  return apply_op(ops::detach_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_DETACH(X) X(U, plain, detach_op)
