#pragma once
/// \file fusegrad/ops/pow.hpp
/// pow(x, p) with a scalar exponent, and pow(a, b) with a tensor exponent (broadcasting).
#include <cmath>

#include "fusegrad/ops/abs.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad {
namespace ops {
template <Element T>
struct pow_scalar_op {
  static constexpr std::string_view name = "pow", grad_fn = "PowBackward0";
  static constexpr bool uses_input = true, uses_output = false;
  /// In streamed loads: a small integer exponent is a few multiplications, any other a call of
  /// C's pow per element (29 loads); the cost is per op type, so a middle value.
  static constexpr double cost = 4.0;
  T p;
  template <class V>
  constexpr V value(const V& x) const {
    // Small integer exponents by repeated squaring: exact for small integers, faster than
    // exp(p log x), and defined for negative bases.
    if (p == std::floor(p) && std::abs(p) <= T(16) && p != T(0)) {
      auto e = static_cast<int>(std::abs(p));
      V base = x, r = V(T(1));
      while (e) {
        if (e & 1) r = r * base;
        base = base * base;
        e >>= 1;
      }
      return p < T(0) ? V(T(1)) / r : r;
    }
    return lanes::pow(x, V(p));
  }
  /// p x^(p-1); for p == 0 it is 0 * x^0 = 0 for every x (x = 0 or ±inf would give 0 * inf).
  constexpr auto derivative(const auto& x, const auto&, const auto& g) const {
    return g * (pow(x, p == T(0) ? T(0) : p - T(1)) * p);
  }
};
struct pow_op {
  static constexpr std::string_view name = "pow", grad_fn = "PowBackward1";
  static constexpr bool uses_input = true, uses_output = true;
  static constexpr double cost = 29.0;  ///< in streamed loads: C's pow per element
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return lanes::pow(a, b);
  }
  /// b a^(b-1); 0 where b == 0 (as PyTorch), through a^0 = 1 for every a (not 0 * 0^-1).
  static constexpr auto da(const auto& a, const auto& b, const auto&, const auto& g) {
    return g * (b * pow(a, b - sign(abs(b))));
  }
  /// y log(a); 0 where a == 0 (as PyTorch: log(a + [a == 0]) avoids 0 * -inf).
  static constexpr auto db(const auto& a, const auto&, const auto& y, const auto& g) {
    return g * (y * log(a + (1.0 - sign(abs(a)))));
  }
};
}  // namespace ops

template <Operand X, Scalar S>
constexpr auto pow(const X& x, S p) {
  return apply_op(ops::pow_scalar_op<element_of<X>>{static_cast<element_of<X>>(p)}, x);
}
template <Operand A, Operand B>
constexpr auto pow(const A& a, const B& b) {
  return apply_op(ops::pow_op{}, a, b);
}
/// Of two numbers (constants of a transformed function): the exponent is a scalar, as in
/// `pow(x, p)` of an operand `x`.
template <Element T>
constexpr T pow(T x, T p) {
  return apply_op(ops::pow_scalar_op<T>{p}, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_POW(X) X(B, plain, pow_op) X(U, scalar, pow_scalar_op)
