#pragma once
/// \file fusegrad/ops/trig.hpp
/// tan, asin, acos, atan and atan2(a, b) (the angle of the point (b, a); C's atan2, lane by
/// lane, for its special values: xsimd's gives NaN at (±0, ±0) and (±inf, ±inf)). Derivative
/// rules as PyTorch's: 1 + y², 1/√(1 - x²), -1/√(1 - x²), 1/(1 + x²), and for atan2
/// (b, -a)/(a² + b²) (NaN at the origin, as PyTorch).
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/reciprocal.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad {
namespace ops {
struct tan_op {
  static constexpr std::string_view name = "tan", grad_fn = "TanBackward0";
  static constexpr double cost = 4.2;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = false, uses_output = true;
  template <class V>
  static V value(const V& x) {
    return lanes::tan(x);
  }
  static auto derivative(const auto&, const auto& y, const auto& g) { return g * (y * y + 1.0); }
};
struct asin_op {
  static constexpr std::string_view name = "asin", grad_fn = "AsinBackward0";
  static constexpr double cost = 1.7;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::asin;
    return asin(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * rsqrt(1.0 - x * x); }
};
struct acos_op {
  static constexpr std::string_view name = "acos", grad_fn = "AcosBackward0";
  static constexpr double cost = 4.2;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::acos;
    return acos(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * -rsqrt(1.0 - x * x); }
};
struct atan_op {
  static constexpr std::string_view name = "atan", grad_fn = "AtanBackward0";
  static constexpr double cost = 2.9;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    using std::atan;
    return atan(x);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g / (x * x + 1.0); }
};
struct atan2_op {
  static constexpr std::string_view name = "atan2", grad_fn = "Atan2Backward0";
  static constexpr double cost = 62;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& a, const V& b) {
    return lanes::per_lane(a, b, [](auto y, auto x) { return std::atan2(y, x); });
  }
  static auto da(const auto& a, const auto& b, const auto&, const auto& g) { return g * b * reciprocal(a * a + b * b); }
  static auto db(const auto& a, const auto& b, const auto&, const auto& g) {
    return g * -a * reciprocal(a * a + b * b);
  }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto tan(const X& x) {
  return apply_op(ops::tan_op{}, x);
}
template <OperandOrNumber X>
constexpr auto asin(const X& x) {
  return apply_op(ops::asin_op{}, x);
}
template <OperandOrNumber X>
constexpr auto acos(const X& x) {
  return apply_op(ops::acos_op{}, x);
}
template <OperandOrNumber X>
constexpr auto atan(const X& x) {
  return apply_op(ops::atan_op{}, x);
}
template <Operand A, Operand B>
constexpr auto atan2(const A& a, const B& b) {
  return apply_op(ops::atan2_op{}, a, b);
}
template <Element T>
constexpr T atan2(T a, T b) {
  return apply_op(ops::atan2_op{}, a, b);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
// clang-format off
#define FUSEGRAD_OPS_IN_TRIG(X)                                                      \
  X(U, plain, tan_op) X(U, plain, asin_op) X(U, plain, acos_op) X(U, plain, atan_op) \
  X(B, plain, atan2_op)
// clang-format on
