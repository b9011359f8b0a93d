#pragma once
/// \file fusegrad/ops/list.hpp
/// The one list of built-in element-wise ops, as an X-macro: `FUSEGRAD_OP_LIST(X)` expands
/// `X(arity, form, op)` once per op, in the order of the run-time op table. Each op header
/// lists its own ops (`FUSEGRAD_OPS_IN_<HEADER>(X)`, at its end), so that a new op of a header
/// is written in that header alone; this file joins the headers' lists. Everything that
/// enumerates the ops expands it: `ops::table` (ops/table.hpp), the checks that each op
/// declares its cost (ops/all.hpp), the precompiled runtime's explicit instantiations
/// (runtime/eager.hpp) and the cost benchmarks (bench/bench_op_costs.cpp).
///
/// - `arity`: `U` for an op with one operand, `B` for one with two;
/// - `form`: `plain` for a struct, `scalar` for a template on the element type holding one
///   scalar (`ops::add_scalar_op<T>`);
/// - `op`: the struct's name in `fusegrad::ops`.
///
/// The run-time IR names an op by its index in this list. Indices live only in one process
/// (no key or program is kept beyond it), so an op added anywhere moves the ones after it
/// and nothing else: the library and the precompiled runtime are built from the same list.
/// A new op header adds its `#include` and its list here.

#include "fusegrad/ops/abs.hpp"
#include "fusegrad/ops/activation.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/binary_math.hpp"
#include "fusegrad/ops/clamp.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/cos.hpp"
#include "fusegrad/ops/detach.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/exp.hpp"
#include "fusegrad/ops/exp_log.hpp"
#include "fusegrad/ops/hyperbolic.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/maximum.hpp"
#include "fusegrad/ops/minimum.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/pow.hpp"
#include "fusegrad/ops/reciprocal.hpp"
#include "fusegrad/ops/reductions.hpp"
#include "fusegrad/ops/relu.hpp"
#include "fusegrad/ops/rounding.hpp"
#include "fusegrad/ops/sigmoid.hpp"
#include "fusegrad/ops/sin.hpp"
#include "fusegrad/ops/special.hpp"
#include "fusegrad/ops/sqrt.hpp"
#include "fusegrad/ops/step.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/tanh.hpp"
#include "fusegrad/ops/trig.hpp"
#include "fusegrad/ops/where.hpp"
#include "fusegrad/ops/zeros_like.hpp"

// clang-format off
#define FUSEGRAD_OP_LIST(X) \
  FUSEGRAD_OPS_IN_NEG(X) FUSEGRAD_OPS_IN_EXP(X) FUSEGRAD_OPS_IN_LOG(X) FUSEGRAD_OPS_IN_SIN(X)                  \
  FUSEGRAD_OPS_IN_COS(X) FUSEGRAD_OPS_IN_TANH(X) FUSEGRAD_OPS_IN_SIGMOID(X) FUSEGRAD_OPS_IN_RELU(X)            \
  FUSEGRAD_OPS_IN_ABS(X) FUSEGRAD_OPS_IN_SQRT(X) FUSEGRAD_OPS_IN_STEP(X) FUSEGRAD_OPS_IN_ADD(X)                \
  FUSEGRAD_OPS_IN_SUB(X) FUSEGRAD_OPS_IN_MUL(X) FUSEGRAD_OPS_IN_DIV(X) FUSEGRAD_OPS_IN_MAXIMUM(X)              \
  FUSEGRAD_OPS_IN_POW(X) FUSEGRAD_OPS_IN_COMPARE(X) FUSEGRAD_OPS_IN_ZEROS_LIKE(X) FUSEGRAD_OPS_IN_ROUNDING(X)  \
  FUSEGRAD_OPS_IN_WHERE(X) FUSEGRAD_OPS_IN_RECIPROCAL(X) FUSEGRAD_OPS_IN_EXP_LOG(X) FUSEGRAD_OPS_IN_TRIG(X)    \
  FUSEGRAD_OPS_IN_HYPERBOLIC(X) FUSEGRAD_OPS_IN_SPECIAL(X) FUSEGRAD_OPS_IN_ACTIVATION(X)                       \
  FUSEGRAD_OPS_IN_REDUCTIONS(X) FUSEGRAD_OPS_IN_MINIMUM(X) FUSEGRAD_OPS_IN_BINARY_MATH(X)                      \
  FUSEGRAD_OPS_IN_CLAMP(X) FUSEGRAD_OPS_IN_DETACH(X)
// clang-format on

/// The type of a listed op for element type `T`: `fusegrad::ops::op` or `fusegrad::ops::op<T>`.
#define FUSEGRAD_OP_TYPE(form, op, T) FUSEGRAD_OP_TYPE_##form(op, T)
#define FUSEGRAD_OP_TYPE_plain(op, T) ::fusegrad::ops::op
#define FUSEGRAD_OP_TYPE_scalar(op, T) ::fusegrad::ops::op<T>
