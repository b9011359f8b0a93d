#pragma once
/// \file fusegrad/ops/clamp.hpp
/// clamp(x, lo, hi) = min(max(x, lo), hi) (so `hi` wins when lo > hi, as PyTorch), clamp_min,
/// clamp_max, and clip (NumPy's name). NaN stays NaN. The gradient passes where
/// lo <= x <= hi (boundaries included) and is 0 elsewhere and at NaN, as PyTorch.
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/where.hpp"

namespace fusegrad {
namespace ops {
template <Element T>
struct clamp_min_op {
  static constexpr std::string_view name = "clamp_min", grad_fn = "ClampMinBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = true, uses_output = false;
  T lo;
  template <class V>
  V value(const V& x) const {
    return lanes::max(x, V(lo));
  }
  auto derivative(const auto& x, const auto&, const auto& g) const {
    return apply_op(select_op<T>{T(0)}, ge(x, lo), g);
  }
};
template <Element T>
struct clamp_max_op {
  static constexpr std::string_view name = "clamp_max", grad_fn = "ClampMaxBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = true, uses_output = false;
  T hi;
  template <class V>
  V value(const V& x) const {
    return lanes::min(x, V(hi));
  }
  auto derivative(const auto& x, const auto&, const auto& g) const {
    return apply_op(select_op<T>{T(0)}, le(x, hi), g);
  }
};
}  // namespace ops

template <Operand X, Scalar S>
constexpr auto clamp_min(const X& x, S lo) {
  return apply_op(ops::clamp_min_op<element_of<X>>{static_cast<element_of<X>>(lo)}, x);
}
template <Operand X, Scalar S>
constexpr auto clamp_max(const X& x, S hi) {
  return apply_op(ops::clamp_max_op<element_of<X>>{static_cast<element_of<X>>(hi)}, x);
}
template <Operand X, Scalar L, Scalar H>
constexpr auto clamp(const X& x, L lo, H hi) {
  return clamp_max(clamp_min(x, lo), hi);
}
template <Operand X, Scalar L, Scalar H>
constexpr auto clip(const X& x, L lo, H hi) {
  return clamp(x, lo, hi);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_CLAMP(X) X(U, scalar, clamp_min_op) X(U, scalar, clamp_max_op)
