#pragma once
/// \file fusegrad/ops/compare.hpp
/// Element-wise comparisons giving 1 or 0 in the operands' element type. They carry no
/// gradient; derivative rules use them as masks.
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct gt_op { static constexpr std::string_view name = "gt";
  template <class V> static constexpr V value(const V& a, const V& b) { return lanes::gt(a, b); } };
struct ge_op { static constexpr std::string_view name = "ge";
  template <class V> static constexpr V value(const V& a, const V& b) { return lanes::ge(a, b); } };
struct lt_op { static constexpr std::string_view name = "lt";
  template <class V> static constexpr V value(const V& a, const V& b) { return lanes::gt(b, a); } };
struct le_op { static constexpr std::string_view name = "le";
  template <class V> static constexpr V value(const V& a, const V& b) { return lanes::ge(b, a); } };
struct eq_op { static constexpr std::string_view name = "eq";
  template <class V> static constexpr V value(const V& a, const V& b) { return lanes::eq(a, b); } };
struct ne_op { static constexpr std::string_view name = "ne";
  template <class V> static constexpr V value(const V& a, const V& b) { return lanes::ne(a, b); } };
}  // namespace ops

template <Operand A, Operand B> constexpr auto gt(const A& a, const B& b) { return apply_op(ops::gt_op{}, a, b); }
template <Operand A, Operand B> constexpr auto ge(const A& a, const B& b) { return apply_op(ops::ge_op{}, a, b); }
template <Operand A, Operand B> constexpr auto lt(const A& a, const B& b) { return apply_op(ops::lt_op{}, a, b); }
template <Operand A, Operand B> constexpr auto le(const A& a, const B& b) { return apply_op(ops::le_op{}, a, b); }
template <Operand A, Operand B> constexpr auto eq(const A& a, const B& b) { return apply_op(ops::eq_op{}, a, b); }
template <Operand A, Operand B> constexpr auto ne(const A& a, const B& b) { return apply_op(ops::ne_op{}, a, b); }
}  // namespace fusegrad
