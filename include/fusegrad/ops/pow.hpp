#pragma once
/// \file fusegrad/ops/pow.hpp
/// pow(x, p) with a scalar exponent, and pow(a, b) with a tensor exponent (broadcasting).
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad {
namespace ops {
template <Element T>
struct pow_scalar_op {
  static constexpr std::string_view name = "pow", grad_fn = "PowBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  T p;
  template <class V> V value(const V& x) const {
    if constexpr (detail::is_scalar_v<V>) return std::pow(x, p);
    else if (p == T(2)) return x * x;
    else return xsimd::pow(x, V(p));
  }
  /// p x^(p-1); for p == 0 it is 0 * x (so x = 0 gives 0, not 0 * inf).
  auto derivative(const auto& x, const auto&, const auto& g) const {
    return g * (pow(x, p == T(0) ? T(1) : p - T(1)) * p);
  }
};
struct pow_op {
  static constexpr std::string_view name = "pow", grad_fn = "PowBackward1";
  static constexpr bool uses_input = true, uses_output = true;
  template <class V> static V value(const V& a, const V& b) {
    using std::pow;
    return pow(a, b);
  }
  static auto da(const auto& a, const auto& b, const auto&, const auto& g) {
    return g * (b * pow(a, b - 1.0));
  }
  static auto db(const auto& a, const auto&, const auto& y, const auto& g) {
    return g * (y * log(a));
  }
};
}  // namespace ops

template <Operand X, Scalar S> auto pow(const X& x, S p) {
  return apply_op(ops::pow_scalar_op<element_of<X>>{static_cast<element_of<X>>(p)}, x);
}
template <Operand A, Operand B> auto pow(const A& a, const B& b) { return apply_op(ops::pow_op{}, a, b); }
}  // namespace fusegrad
