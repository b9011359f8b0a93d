#pragma once
/// \file fusegrad/ops/minimum.hpp
/// Element-wise min(a, b) with NaN propagation; at ties the gradient is split evenly, as in
/// PyTorch.
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/mul.hpp"

namespace fusegrad {
namespace ops {
struct minimum_op {
  static constexpr std::string_view name = "minimum", grad_fn = "MinimumBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& a, const V& b) {
    return lanes::min(a, b);
  }
  static auto da(const auto& a, const auto& b, const auto&, const auto& g) { return g * (lt(a, b) + eq(a, b) * 0.5); }
  static auto db(const auto& a, const auto& b, const auto&, const auto& g) { return g * (lt(b, a) + eq(a, b) * 0.5); }
};
}  // namespace ops

template <Operand A, Operand B>
constexpr auto minimum(const A& a, const B& b) {
  return apply_op(ops::minimum_op{}, a, b);
}
template <Element T>
constexpr T minimum(T a, T b) {
  return apply_op(ops::minimum_op{}, a, b);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_MINIMUM(X) X(B, plain, minimum_op)
