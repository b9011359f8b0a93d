#pragma once
/// \file fusegrad/ops/all.hpp
/// Every element-wise op of the op list (ops/list.hpp, which includes their headers), each
/// checked to be defined and to declare its cost: what code that holds any op of the table
/// (the run-time IR, the precompiled runtime, the umbrella header) includes.
#include "fusegrad/ops/list.hpp"
#include "fusegrad/ops/op.hpp"
#include "fusegrad/ops/table.hpp"

/// Checks one entry of the op list: the op declares its cost (`DeclaresCost`), with a sentence
/// naming the op. (An entry naming no op is the compiler's own error: no such member of `ops`.)
#define FUSEGRAD_OP_CHECK(arity, form, op)                                                           \
  static_assert(::fusegrad::DeclaresCost<FUSEGRAD_OP_TYPE(form, op, float)>,                         \
                "fusegrad: ops::" #op                                                                \
                " is in the op list (ops/list.hpp) but declares no `static constexpr double cost`: " \
                "what one element costs, in streamed loads (bench/bench_op_costs.cpp measures it); " \
                "the save/recompute plans weigh it");
FUSEGRAD_OP_LIST(FUSEGRAD_OP_CHECK)
