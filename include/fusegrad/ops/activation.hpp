#pragma once
/// \file fusegrad/ops/activation.hpp
/// softplus(x) = log(1 + eˣ) (x itself above PyTorch's threshold 20), silu(x) = x σ(x) and the
/// exact gelu(x) = x Φ(x) = x (1 + erf(x/√2)) / 2, with PyTorch's formulas and derivative
/// rules: softplus' = σ(x) (1 above the threshold), silu' = σ (1 + x (1 - σ)),
/// gelu' = Φ(x) + x φ(x). As in PyTorch, silu(-inf) and gelu(-inf) are NaN (-inf · 0).
#include <numbers>

#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/exp.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/sigmoid.hpp"
#include "fusegrad/ops/special.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/where.hpp"

namespace fusegrad {
namespace ops {
struct softplus_op {
  static constexpr std::string_view name = "softplus", grad_fn = "SoftplusBackward0";
  static constexpr double cost = 9.4;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double threshold = 20;
  template <class V>
  static V value(const V& x) {
    using std::log1p;
    return lanes::select_gt(x, V(threshold), x, log1p(lanes::exp(x)));
  }
  static auto derivative(const auto& x, const auto&, const auto& g) {
    return g * where(gt(x, threshold), 1.0, sigmoid(x));
  }
};
struct silu_op {
  static constexpr std::string_view name = "silu", grad_fn = "SiluBackward0";
  static constexpr double cost = 2.4;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& x) {
    return x / (V(1) + lanes::exp(-x));
  }
  static auto derivative(const auto& x, const auto&, const auto& g) {
    const auto s = sigmoid(x);
    return g * s * (x * (1.0 - s) + 1.0);
  }
};
struct gelu_op {
  static constexpr std::string_view name = "gelu", grad_fn = "GeluBackward0";
  static constexpr double cost = 72;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  static constexpr double sqrt1_2 = std::numbers::sqrt2 / 2,
                          beta = std::numbers::inv_sqrtpi * sqrt1_2;  // φ(0) = 1/√(2π)
  template <class V>
  static V value(const V& x) {
    using T = detail::lane_type_t<V>;  // (a conditional_t naming V::value_type fails on scalars)
    const V e = lanes::per_lane(V(x * V(T(sqrt1_2))), [](auto v) { return std::erf(v); });
    return x * V(T(0.5)) * (V(1) + e);
  }
  static auto derivative(const auto& x, const auto&, const auto& g) {
    return g * ((erf(x * sqrt1_2) + 1.0) * 0.5 + x * (exp(x * x * -0.5) * beta));
  }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto softplus(const X& x) {
  return apply_op(ops::softplus_op{}, x);
}
template <OperandOrNumber X>
constexpr auto silu(const X& x) {
  return apply_op(ops::silu_op{}, x);
}
template <OperandOrNumber X>
constexpr auto gelu(const X& x) {
  return apply_op(ops::gelu_op{}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_ACTIVATION(X) X(U, plain, softplus_op) X(U, plain, silu_op) X(U, plain, gelu_op)
