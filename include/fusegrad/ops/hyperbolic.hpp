#pragma once
/// \file fusegrad/ops/hyperbolic.hpp
/// sinh, cosh, asinh, acosh, atanh. Derivative rules as PyTorch's: cosh(x), sinh(x),
/// 1/√(x² + 1), 1/√(x² - 1), 1/(1 - x²).
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/reciprocal.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad {
namespace ops {
struct sinh_op {
  static constexpr std::string_view name = "sinh", grad_fn = "SinhBackward0";
  static constexpr double cost = 4.5;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    return lanes::sinh(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * cosh(x); }
};
struct cosh_op {
  static constexpr std::string_view name = "cosh", grad_fn = "CoshBackward0";
  static constexpr double cost = 3.7;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    return lanes::cosh(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * sinh(x); }
};
struct asinh_op {
  static constexpr std::string_view name = "asinh", grad_fn = "AsinhBackward0";
  static constexpr double cost = 7.7;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::asinh;
    return asinh(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * rsqrt(x * x + 1.0); }
};
struct acosh_op {
  static constexpr std::string_view name = "acosh", grad_fn = "AcoshBackward0";
  static constexpr double cost = 7.7;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::acosh;
    return acosh(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * rsqrt(x * x - 1.0); }
};
struct atanh_op {
  static constexpr std::string_view name = "atanh", grad_fn = "AtanhBackward0";
  static constexpr double cost = 7.6;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::atanh;
    return atanh(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g / (1.0 - x * x); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto sinh(const X& x) {
  return apply_op(ops::sinh_op{}, x);
}
template <OperandOrNumber X>
constexpr auto cosh(const X& x) {
  return apply_op(ops::cosh_op{}, x);
}
template <OperandOrNumber X>
constexpr auto asinh(const X& x) {
  return apply_op(ops::asinh_op{}, x);
}
template <OperandOrNumber X>
constexpr auto acosh(const X& x) {
  return apply_op(ops::acosh_op{}, x);
}
template <OperandOrNumber X>
constexpr auto atanh(const X& x) {
  return apply_op(ops::atanh_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
// clang-format off
#define FUSEGRAD_OPS_IN_HYPERBOLIC(X)                                                   \
  X(U, plain, sinh_op) X(U, plain, cosh_op) X(U, plain, asinh_op) X(U, plain, acosh_op) \
  X(U, plain, atanh_op)
// clang-format on
