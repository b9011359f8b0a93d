#pragma once
/// \file fusegrad/ops/binary_math.hpp
/// hypot(a, b) = √(a² + b²) without overflow; fmod(a, b) (C's: exact, the sign of `a`) with a
/// tensor or a scalar divisor; lerp(a, b, w) = a + w (b - a) with PyTorch's formula (from `b`
/// when |w| >= 1/2), with a scalar or tensor weight. hypot and fmod are C's, lane by lane
/// (xsimd's hypot is NaN at (inf, NaN), its fmod is a - trunc(a/b) b: inexact, and NaN for
/// b = inf). Derivative rules as PyTorch's: hypot (a, b)/y; fmod 1 and -trunc(a/b);
/// lerp 1 - w, w and b - a.
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/abs.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/rounding.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/where.hpp"

namespace fusegrad {
namespace ops {
struct hypot_op {
  static constexpr std::string_view name = "hypot", grad_fn = "HypotBackward0";
  static constexpr double cost = 17.5;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = true;
  template <class V>
  static V value(const V& a, const V& b) {
    return lanes::per_lane(a, b, [](auto x, auto y) { return std::hypot(x, y); });
  }
  static auto da(const auto& a, const auto&, const auto& y, const auto& g) { return g * a / y; }
  static auto db(const auto&, const auto& b, const auto& y, const auto& g) { return g * b / y; }
};
struct fmod_op {
  static constexpr std::string_view name = "fmod", grad_fn = "FmodBackward1";
  static constexpr double cost = 34;  ///< in streamed loads (bench/bench_op_costs.cpp)
  static constexpr bool uses_input = true, uses_output = false;
  template <class V>
  static V value(const V& a, const V& b) {
    return lanes::per_lane(a, b, [](auto x, auto y) { return std::fmod(x, y); });
  }
  static auto da(const auto&, const auto&, const auto&, const auto& g) { return g; }
  static auto db(const auto& a, const auto& b, const auto&, const auto& g) { return -g * trunc(a / b); }
};
template <Element T>
struct fmod_scalar_op {
  static constexpr std::string_view name = "fmod", grad_fn = "FmodBackward0";
  static constexpr double cost = 34;  ///< in streamed loads (bench/bench_op_costs.cpp, as fmod)
  static constexpr bool uses_input = false, uses_output = false;
  T s;
  template <class V>
  V value(const V& x) const {
    const T d = s;
    return lanes::per_lane(x, [d](auto v) { return std::fmod(v, d); });
  }
  static constexpr bool scalar_is_input = true;  // (its derivative does not read s)
  static auto derivative_by(const auto&, const auto&, const auto& g, const auto&) { return g; }
  auto derivative(const auto& x, const auto& y, const auto& g) const { return derivative_by(x, y, g, s); }
};
/// lerp(a, b) with the weight `w` as its constant.
template <Element T>
struct lerp_scalar_op {
  static constexpr std::string_view name = "lerp", grad_fn = "LerpBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = false;
  T w;
  template <class V>
  V value(const V& a, const V& b) const {
    using std::abs;
    return abs(w) < T(0.5) ? a + V(w) * (b - a) : b - (b - a) * V(T(1) - w);
  }
  auto da(const auto&, const auto&, const auto&, const auto& g) const { return g * (T(1) - w); }
  auto db(const auto&, const auto&, const auto&, const auto& g) const { return g * w; }
};
}  // namespace ops

template <Operand A, Operand B>
constexpr auto hypot(const A& a, const B& b) {
  return apply_op(ops::hypot_op{}, a, b);
}
template <Element T>
constexpr T hypot(T a, T b) {
  return apply_op(ops::hypot_op{}, a, b);
}
template <Operand A, Operand B>
constexpr auto fmod(const A& a, const B& b) {
  return apply_op(ops::fmod_op{}, a, b);
}
template <Operand A, Scalar S>
constexpr auto fmod(const A& a, S s) {
  return apply_op(ops::fmod_scalar_op<element_of<A>>{static_cast<element_of<A>>(s)}, a);
}
template <Operand A, Operand B, Scalar S>
constexpr auto lerp(const A& a, const B& b, S w) {
  return apply_op(ops::lerp_scalar_op<element_of<A>>{static_cast<element_of<A>>(w)}, a, b);
}
/// lerp with a tensor weight: PyTorch's two formulas, chosen per element by |w| < 1/2.
template <Operand A, Operand B, Operand W>
constexpr auto lerp(const A& a, const B& b, const W& w) {
  return where(lt(abs(w), 0.5), a + w * (b - a), b - (b - a) * (1.0 - w));
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
// clang-format off
#define FUSEGRAD_OPS_IN_BINARY_MATH(X)                                    \
  X(B, plain, hypot_op) X(B, plain, fmod_op) X(U, scalar, fmod_scalar_op) \
  X(B, scalar, lerp_scalar_op)
// clang-format on
