#pragma once
/// \file fusegrad/ops/rounding.hpp
/// floor, ceil, round (half to even, as PyTorch and C's nearbyint) and trunc. Piecewise
/// constant: their gradient is zero everywhere (PyTorch's rule), so, unlike `sign` and `step`,
/// their results require grad when their input does.
#include "fusegrad/ops/zeros_like.hpp"

namespace fusegrad {
namespace ops {
struct floor_op {
  static constexpr std::string_view name = "floor", grad_fn = "FloorBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::floor;
    return floor(x);
  }
  static auto derivative(const auto&, const auto&, const auto& g) { return apply_op(zeros_like_op{}, g); }
};
struct ceil_op {
  static constexpr std::string_view name = "ceil", grad_fn = "CeilBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::ceil;
    return ceil(x);
  }
  static auto derivative(const auto&, const auto&, const auto& g) { return apply_op(zeros_like_op{}, g); }
};
struct round_op {
  static constexpr std::string_view name = "round", grad_fn = "RoundBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::nearbyint;
    return nearbyint(x);
  }
  static auto derivative(const auto&, const auto&, const auto& g) { return apply_op(zeros_like_op{}, g); }
};
struct trunc_op {
  static constexpr std::string_view name = "trunc", grad_fn = "TruncBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::trunc;
    return trunc(x);
  }
  static auto derivative(const auto&, const auto&, const auto& g) { return apply_op(zeros_like_op{}, g); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto floor(const X& x) {
  return apply_op(ops::floor_op{}, x);
}
template <OperandOrNumber X>
constexpr auto ceil(const X& x) {
  return apply_op(ops::ceil_op{}, x);
}
template <OperandOrNumber X>
constexpr auto round(const X& x) {
  return apply_op(ops::round_op{}, x);
}
template <OperandOrNumber X>
constexpr auto trunc(const X& x) {
  return apply_op(ops::trunc_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
// clang-format off
#define FUSEGRAD_OPS_IN_ROUNDING(X)                                                      \
  X(U, plain, floor_op) X(U, plain, ceil_op) X(U, plain, round_op) X(U, plain, trunc_op)
// clang-format on
