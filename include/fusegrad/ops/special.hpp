#pragma once
/// \file fusegrad/ops/special.hpp
/// erf, erfc, lgamma (log|Γ|), digamma (ψ) and polygamma(n, x) (ψ⁽ⁿ⁾). Their values are the C
/// library's (erf, erfc, lgamma_r) or PyTorch's algorithms (core/special.hpp), lane by lane:
/// xsimd's lgamma is wrong for floats (one lane's branch overwrites another's) and loses all
/// relative accuracy near its zeros 1 and 2; its erf is 68 ulps off near 2.2 and NaN at
/// ±DBL_MAX, and its erfc loses relative accuracy in the tail. Derivative rules as
/// PyTorch's: 2/√π e^(-x²), -2/√π e^(-x²), ψ(x), ψ'(x) = polygamma(1, x), ψ⁽ⁿ⁺¹⁾(x).
#include <numbers>

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/special.hpp"
#include "fusegrad/ops/exp.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"

namespace fusegrad {
namespace ops {
/// 2/√π, in double (the derivative rules' constant).
inline constexpr double two_over_sqrt_pi = 2.0 * std::numbers::inv_sqrtpi;
struct erf_op {
  static constexpr std::string_view name = "erf", grad_fn = "ErfBackward0";
  static constexpr double cost = 80;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    return lanes::per_lane(x, [](auto v) { return std::erf(v); });
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * (exp(-(x * x)) * two_over_sqrt_pi); }
};
struct erfc_op {
  static constexpr std::string_view name = "erfc", grad_fn = "ErfcBackward0";
  static constexpr double cost = 83;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    return lanes::per_lane(x, [](auto v) { return std::erfc(v); });
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * (exp(-(x * x)) * -two_over_sqrt_pi); }
};
struct lgamma_op {
  static constexpr std::string_view name = "lgamma", grad_fn = "LgammaBackward0";
  static constexpr double cost = 47;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    return lanes::per_lane(x, [](auto v) { return special::lgamma(v); });
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * digamma(x); }
};
struct digamma_op {
  static constexpr std::string_view name = "digamma", grad_fn = "DigammaBackward0";
  static constexpr double cost = 56;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    return lanes::per_lane(x, [](auto v) { return special::digamma(v); });
  }
  static auto derivative(const auto& x, const auto&, const auto& g) { return g * polygamma(1, x); }
};
/// ψ⁽ⁿ⁾(x), n ≥ 1 (n = 0 is digamma_op); `n` is held as the element type (the IR's one scalar).
template <Element T>
struct polygamma_op {
  static constexpr std::string_view name = "polygamma", grad_fn = "PolygammaBackward0";
  static constexpr double cost = 56;  ///< in streamed loads (bench/bench_op_costs.cpp, as digamma)
  static constexpr bool uses_input = true, uses_output = false;
  T n;
  template <class V>
  V value(const V& x) const {
    const int k = static_cast<int>(n);
    return lanes::per_lane(x, [k](auto v) { return special::polygamma(k, v); });
  }
  auto derivative(const auto& x, const auto&, const auto& g) const { return g * apply_op(polygamma_op{n + T(1)}, x); }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto erf(const X& x) {
  return apply_op(ops::erf_op{}, x);
}
template <OperandOrNumber X>
constexpr auto erfc(const X& x) {
  return apply_op(ops::erfc_op{}, x);
}
template <OperandOrNumber X>
constexpr auto lgamma(const X& x) {
  return apply_op(ops::lgamma_op{}, x);
}
template <OperandOrNumber X>
constexpr auto digamma(const X& x) {
  return apply_op(ops::digamma_op{}, x);
}
/// ψ⁽ⁿ⁾(x), the n-th derivative of digamma (n ≥ 0; polygamma(0, x) is digamma(x)).
template <Operand X>
constexpr auto polygamma(int n, const X& x) {
  using T = element_of<X>;
  if (n < 0 || n > 1000) detail::fail("polygamma", "n = ", n, "; expected 0 <= n <= 1000");
  return apply_op(ops::polygamma_op<T>{static_cast<T>(n)}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
// clang-format off
#define FUSEGRAD_OPS_IN_SPECIAL(X)                                                        \
  X(U, plain, erf_op) X(U, plain, erfc_op) X(U, plain, lgamma_op) X(U, plain, digamma_op) \
  X(U, scalar, polygamma_op)
// clang-format on
