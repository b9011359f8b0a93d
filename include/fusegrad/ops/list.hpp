#pragma once
/// \file fusegrad/ops/list.hpp
/// The one list of built-in element-wise ops, as an X-macro: `FUSEGRAD_OP_LIST(X)` expands
/// `X(arity, form, op)` once per op, in the order of the run-time op table. Everything that
/// enumerates the ops expands it: the forward declarations and `ops::table` (ops/table.hpp),
/// the checks that each op is complete and declares its cost (ops/all.hpp), the precompiled
/// runtime's explicit instantiations (runtime/eager.hpp) and the cost benchmarks
/// (bench/bench_op_costs.cpp).
///
/// - `arity`: `U` for an op with one operand, `B` for one with two;
/// - `form`: `plain` for a struct, `scalar` for a template on the element type holding one
///   scalar (`ops::add_scalar_op<T>`);
/// - `op`: the struct's name in `fusegrad::ops`.
///
/// A new op goes at the end: the run-time IR names an op by its index in this list, and
/// cached programs and the precompiled runtime's instantiations assume the order stays.

// One line per group of ops, as the table has always been read:
// clang-format off
#define FUSEGRAD_OP_LIST(X)                                                                                  \
  X(U, plain, neg_op) X(U, plain, exp_op) X(U, plain, log_op) X(U, plain, sin_op) X(U, plain, cos_op)        \
  X(U, plain, tanh_op) X(U, plain, sigmoid_op) X(U, plain, relu_op) X(U, plain, abs_op) X(U, plain, sqrt_op) \
  X(U, plain, step_op) X(U, plain, sign_op)                                                                  \
  X(B, plain, add_op) X(B, plain, sub_op) X(B, plain, mul_op) X(B, plain, div_op) X(B, plain, maximum_op)    \
  X(B, plain, pow_op)                                                                                        \
  X(B, plain, gt_op) X(B, plain, ge_op) X(B, plain, lt_op) X(B, plain, le_op) X(B, plain, eq_op)             \
  X(B, plain, ne_op)                                                                                         \
  X(U, scalar, add_scalar_op) X(U, scalar, sub_scalar_op) X(U, scalar, rsub_scalar_op)                       \
  X(U, scalar, mul_scalar_op) X(U, scalar, div_scalar_op) X(U, scalar, rdiv_scalar_op)                       \
  X(U, scalar, pow_scalar_op)                                                                                \
  /* the op library */                                                                                       \
  X(U, plain, zeros_like_op) X(U, plain, floor_op) X(U, plain, ceil_op) X(U, plain, round_op)                \
  X(U, plain, trunc_op) X(U, plain, logical_not_op) X(U, plain, square_op) X(U, plain, reciprocal_op)        \
  X(U, plain, rsqrt_op) X(U, plain, log1p_op) X(U, plain, expm1_op) X(U, plain, log2_op)                     \
  X(U, plain, exp2_op) X(U, plain, tan_op) X(U, plain, asin_op) X(U, plain, acos_op) X(U, plain, atan_op)    \
  X(U, plain, sinh_op) X(U, plain, cosh_op) X(U, plain, asinh_op) X(U, plain, acosh_op)                      \
  X(U, plain, atanh_op) X(U, plain, erf_op) X(U, plain, erfc_op) X(U, plain, lgamma_op)                      \
  X(U, plain, digamma_op) X(U, plain, softplus_op) X(U, plain, silu_op) X(U, plain, gelu_op)                 \
  X(U, plain, norm_sqrt_op)                                                                                  \
  X(B, plain, minimum_op) X(B, plain, atan2_op) X(B, plain, hypot_op) X(B, plain, fmod_op)                   \
  X(U, scalar, gt_scalar_op) X(U, scalar, ge_scalar_op) X(U, scalar, lt_scalar_op)                           \
  X(U, scalar, le_scalar_op) X(U, scalar, eq_scalar_op) X(U, scalar, ne_scalar_op)                           \
  X(U, scalar, clamp_min_op) X(U, scalar, clamp_max_op) X(U, scalar, fill_op) X(U, scalar, polygamma_op)     \
  X(U, scalar, fmod_scalar_op)                                                                               \
  X(B, scalar, select_op) X(B, scalar, lerp_scalar_op)                                                       \
  X(B, plain, tanh_backward_op) X(B, plain, sigmoid_backward_op) X(U, plain, detach_op)
// clang-format on

/// The type of a listed op for element type `T`: `fusegrad::ops::op` or `fusegrad::ops::op<T>`.
#define FUSEGRAD_OP_TYPE(form, op, T) FUSEGRAD_OP_TYPE_##form(op, T)
#define FUSEGRAD_OP_TYPE_plain(op, T) ::fusegrad::ops::op
#define FUSEGRAD_OP_TYPE_scalar(op, T) ::fusegrad::ops::op<T>
