#pragma once
/// \file fusegrad/ops/table.hpp
/// The one list of built-in element-wise ops (declarations only): the run-time IR names a
/// node's op by its index here, eager ops tell a tracer which op they are by it, and the
/// precompiled runtime (fusegrad/runtime.hpp) instantiates each.

#include <cstddef>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/type_list.hpp"

namespace fusegrad::ops {

// The ops of one kind on one line:
// clang-format off
struct neg_op; struct exp_op; struct log_op; struct sin_op; struct cos_op; struct tanh_op;
struct sigmoid_op; struct relu_op; struct abs_op; struct sqrt_op; struct step_op; struct sign_op;
struct add_op; struct sub_op; struct mul_op; struct div_op; struct maximum_op; struct pow_op;
struct gt_op; struct ge_op; struct lt_op; struct le_op; struct eq_op; struct ne_op;
struct zeros_like_op; struct floor_op; struct ceil_op; struct round_op; struct trunc_op; struct logical_not_op;
struct square_op; struct reciprocal_op; struct rsqrt_op; struct log1p_op; struct expm1_op; struct log2_op;
struct exp2_op; struct tan_op; struct asin_op; struct acos_op; struct atan_op; struct sinh_op; struct cosh_op;
struct asinh_op; struct acosh_op; struct atanh_op; struct erf_op; struct erfc_op; struct lgamma_op;
struct digamma_op; struct softplus_op; struct silu_op; struct gelu_op;
struct norm_sqrt_op; struct minimum_op; struct atan2_op; struct hypot_op; struct fmod_op;
struct tanh_backward_op; struct sigmoid_backward_op; struct detach_op;
template <Element T> struct add_scalar_op;
template <Element T> struct sub_scalar_op;
template <Element T> struct rsub_scalar_op;
template <Element T> struct mul_scalar_op;
template <Element T> struct div_scalar_op;
template <Element T> struct rdiv_scalar_op;
template <Element T> struct pow_scalar_op;
template <Element T> struct gt_scalar_op;
template <Element T> struct ge_scalar_op;
template <Element T> struct lt_scalar_op;
template <Element T> struct le_scalar_op;
template <Element T> struct eq_scalar_op;
template <Element T> struct ne_scalar_op;
template <Element T> struct clamp_min_op;
template <Element T> struct clamp_max_op;
template <Element T> struct fill_op;
template <Element T> struct polygamma_op;
template <Element T> struct fmod_scalar_op;
template <Element T> struct select_op;
template <Element T> struct lerp_scalar_op;
// clang-format on

/// Every built-in element-wise op, in one list: a run-time IR node names its op by its index
/// here, and the precompiled runtime instantiates each. Ops with state hold exactly one scalar
/// of the element type (the node's `scalar`).
// clang-format off
template <Element T>
using table = detail::type_list<
    ops::neg_op, ops::exp_op, ops::log_op, ops::sin_op, ops::cos_op, ops::tanh_op, ops::sigmoid_op,
    ops::relu_op, ops::abs_op, ops::sqrt_op, ops::step_op, ops::sign_op,                   //
    ops::add_op, ops::sub_op, ops::mul_op, ops::div_op, ops::maximum_op, ops::pow_op,      //
    ops::gt_op, ops::ge_op, ops::lt_op, ops::le_op, ops::eq_op, ops::ne_op,                //
    ops::add_scalar_op<T>, ops::sub_scalar_op<T>, ops::rsub_scalar_op<T>, ops::mul_scalar_op<T>,
    ops::div_scalar_op<T>, ops::rdiv_scalar_op<T>, ops::pow_scalar_op<T>,                   //
    // the op library
    ops::zeros_like_op, ops::floor_op, ops::ceil_op, ops::round_op, ops::trunc_op, ops::logical_not_op,
    ops::square_op, ops::reciprocal_op, ops::rsqrt_op, ops::log1p_op, ops::expm1_op, ops::log2_op, ops::exp2_op,
    ops::tan_op, ops::asin_op, ops::acos_op, ops::atan_op, ops::sinh_op, ops::cosh_op, ops::asinh_op,
    ops::acosh_op, ops::atanh_op, ops::erf_op, ops::erfc_op, ops::lgamma_op, ops::digamma_op, ops::softplus_op,
    ops::silu_op, ops::gelu_op, ops::norm_sqrt_op,                                          //
    ops::minimum_op, ops::atan2_op, ops::hypot_op, ops::fmod_op,                            //
    ops::gt_scalar_op<T>, ops::ge_scalar_op<T>, ops::lt_scalar_op<T>, ops::le_scalar_op<T>,
    ops::eq_scalar_op<T>, ops::ne_scalar_op<T>, ops::clamp_min_op<T>, ops::clamp_max_op<T>, ops::fill_op<T>,
    ops::polygamma_op<T>, ops::fmod_scalar_op<T>,                                           //
    ops::select_op<T>, ops::lerp_scalar_op<T>,                                              //
    ops::tanh_backward_op, ops::sigmoid_backward_op, ops::detach_op>;
// clang-format on

/// Index of `Op` in `table<T>` (-1 for ops not in it, e.g. a user's own).
template <class Op, Element T>
inline constexpr int table_index = detail::type_index<Op>(table<T>{});

/// An op of `table<T>` (the run-time IR can hold it).
// clang-format 14 misreads a parenthesis after && in a concept:
// clang-format off
template <class Op, class T>
concept TableOp = Element<T> && (table_index<Op, T> >= 0);
// clang-format on
}  // namespace fusegrad::ops
