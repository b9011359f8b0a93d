#pragma once
/// \file fusegrad/ops/table.hpp
/// The one list of built-in element-wise ops (declarations only): the run-time IR names a
/// node's op by its index here, eager ops tell a tracer which op they are by it, and the
/// precompiled runtime (fusegrad/runtime.hpp) instantiates each.

#include <cstddef>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/type_list.hpp"

namespace fusegrad::ops {

struct neg_op; struct exp_op; struct log_op; struct sin_op; struct cos_op; struct tanh_op;
struct sigmoid_op; struct relu_op; struct abs_op; struct sqrt_op; struct step_op; struct sign_op;
struct add_op; struct sub_op; struct mul_op; struct div_op; struct maximum_op; struct pow_op;
struct gt_op; struct ge_op; struct lt_op; struct le_op; struct eq_op; struct ne_op;
template <Element T> struct add_scalar_op;
template <Element T> struct sub_scalar_op;
template <Element T> struct rsub_scalar_op;
template <Element T> struct mul_scalar_op;
template <Element T> struct div_scalar_op;
template <Element T> struct rdiv_scalar_op;
template <Element T> struct pow_scalar_op;

/// Every built-in element-wise op, in one list: a run-time IR node names its op by its index
/// here, and the precompiled runtime instantiates each. Ops with state hold exactly one scalar
/// of the element type (the node's `scalar`).
template <Element T>
using table = detail::type_list<
    ops::neg_op, ops::exp_op, ops::log_op, ops::sin_op, ops::cos_op, ops::tanh_op, ops::sigmoid_op,
    ops::relu_op, ops::abs_op, ops::sqrt_op, ops::step_op, ops::sign_op,                   //
    ops::add_op, ops::sub_op, ops::mul_op, ops::div_op, ops::maximum_op, ops::pow_op,      //
    ops::gt_op, ops::ge_op, ops::lt_op, ops::le_op, ops::eq_op, ops::ne_op,                //
    ops::add_scalar_op<T>, ops::sub_scalar_op<T>, ops::rsub_scalar_op<T>, ops::mul_scalar_op<T>,
    ops::div_scalar_op<T>, ops::rdiv_scalar_op<T>, ops::pow_scalar_op<T>>;

/// Index of `Op` in `table<T>` (-1 for ops not in it, e.g. a user's own).
template <class Op, Element T>
inline constexpr int table_index = detail::type_index<Op>(table<T>{});

/// An op of `table<T>` (the run-time IR can hold it).
template <class Op, class T>
concept TableOp = Element<T> && table_index<Op, T> >= 0;
}  // namespace fusegrad::ops
