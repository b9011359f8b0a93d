#pragma once
/// \file fusegrad/ops/all.hpp
/// Every element-wise op header of the op list (ops/list.hpp): what code that holds any op
/// of the table (the run-time IR, the precompiled runtime, the umbrella header) includes.
/// A new op in a header of its own adds the header here; then it is checked, with every op of
/// the list, to be defined and to declare its cost.
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
#include "fusegrad/ops/list.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/maximum.hpp"
#include "fusegrad/ops/minimum.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/op.hpp"
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
#include "fusegrad/ops/table.hpp"
#include "fusegrad/ops/tanh.hpp"
#include "fusegrad/ops/trig.hpp"
#include "fusegrad/ops/where.hpp"
#include "fusegrad/ops/zeros_like.hpp"

/// Checks one entry of the op list: the op is defined (its header is included above) and
/// declares its cost (`DeclaresCost`), each with a sentence naming the op.
#define FUSEGRAD_OP_CHECK(arity, form, op)                                                                    \
  static_assert(::fusegrad::detail::complete_type<FUSEGRAD_OP_TYPE(form, op, float)>,                         \
                "fusegrad: ops::" #op                                                                         \
                " is in the op list (ops/list.hpp) but not defined: include its header "                      \
                "in ops/all.hpp");                                                                            \
  static_assert(!::fusegrad::detail::complete_type<FUSEGRAD_OP_TYPE(form, op, float)> ||                      \
                    ::fusegrad::DeclaresCost<FUSEGRAD_OP_TYPE(form, op, float)>,                              \
                "fusegrad: ops::" #op                                                                         \
                " is in the op list (ops/list.hpp) but declares no `static constexpr "                        \
                "double cost`: what one element costs, in streamed loads (bench/bench_op_costs.cpp measures " \
                "it); the save/recompute plans weigh it");
FUSEGRAD_OP_LIST(FUSEGRAD_OP_CHECK)
