#pragma once
/// \file fusegrad/ops/where.hpp
/// where(cond, a, b): `a` where `cond` is nonzero, else `b` (broadcasting all three), with
/// masks from the comparisons (`gt`, `le`, ...) and `logical_not`; masked_fill(x, mask, v).
///
/// The IR's ops have one or two operands, so `where` is two of them: select(c, a) keeps `a`
/// where `c` is nonzero and puts -0 elsewhere, select(not c, b) the same for `b`, and their
/// sum is `a` or `b` exactly (-0 is the identity of +: -0 + -0 = -0, -0 + +0 = +0). A NaN
/// condition counts as true (C's truth; PyTorch's conditions are bool and cannot be NaN). The
/// gradient flows to the selected operand only (`where(c, g, 0)`, as PyTorch), never to the
/// condition.
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/zeros_like.hpp"

namespace fusegrad {
namespace ops {
/// select(c, a) = a where c != 0, else the op's `fill` (-0 inside `where`, +0 in gradients).
template <Element T>
struct select_op {
  static constexpr std::string_view name = "select", grad_fn = "WhereBackward0";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = true, uses_output = false;
  T fill;
  template <class V>
  V value(const V& c, const V& a) const {
    return lanes::select_nonzero(c, a, V(fill));
  }
  static auto da(const auto&, const auto&, const auto&, const auto& g) { return apply_op(zeros_like_op{}, g); }
  static auto db(const auto& c, const auto&, const auto&, const auto& g) { return apply_op(select_op{T(0)}, c, g); }
};
/// fill(c) = the op's constant where c != 0, else -0 (where's scalar operand). No gradient.
template <Element T>
struct fill_op {
  static constexpr std::string_view name = "fill";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  T s;
  template <class V>
  V value(const V& c) const {
    return lanes::select_nonzero(c, V(s), V(T(-0.0)));
  }
};
/// 1 where x == 0, else 0 (NaN counts as true, so gives 0). No gradient.
struct logical_not_op {
  static constexpr std::string_view name = "logical_not";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static V value(const V& x) {
    return lanes::eq(x, V(0));
  }
};
}  // namespace ops

template <OperandOrNumber X>
constexpr auto logical_not(const X& x) {
  return apply_op(ops::logical_not_op{}, x);
}

/// `a` where `cond` is nonzero, else `b` (see this header's comment).
template <Operand C, Operand A, Operand B>
constexpr auto where(const C& cond, const A& a, const B& b) {
  using T = element_of<A>;
  return apply_op(ops::select_op<T>{T(-0.0)}, cond, a) + apply_op(ops::select_op<T>{T(-0.0)}, logical_not(cond), b);
}
template <Operand C, Operand A, Scalar S>
constexpr auto where(const C& cond, const A& a, S b) {
  using T = element_of<A>;
  return apply_op(ops::select_op<T>{T(-0.0)}, cond, a) +
         apply_op(ops::fill_op<T>{static_cast<T>(b)}, logical_not(cond));
}
template <Operand C, Scalar S, Operand B>
constexpr auto where(const C& cond, S a, const B& b) {
  using T = element_of<B>;
  return apply_op(ops::fill_op<T>{static_cast<T>(a)}, cond) +
         apply_op(ops::select_op<T>{T(-0.0)}, logical_not(cond), b);
}
/// `x` with `value` where `mask` is nonzero (PyTorch's `masked_fill`).
template <Operand X, Operand M, Scalar S>
constexpr auto masked_fill(const X& x, const M& mask, S value) {
  return where(mask, value, x);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_WHERE(X) X(U, plain, logical_not_op) X(U, scalar, fill_op) X(B, scalar, select_op)
