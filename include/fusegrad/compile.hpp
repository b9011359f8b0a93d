#pragma once
/// \file fusegrad/compile.hpp
/// `fg::compile` (docs/compile.md) with the eager tensors it takes and returns: a generic
/// function becomes an expression type, its backward is derived and partitioned at compile
/// time, and its loops are fused.

#include "fusegrad/compile/analysis.hpp"
#include "fusegrad/compile/compile.hpp"
#include "fusegrad/eager.hpp"
#include "fusegrad/expr/expr.hpp"
#include "fusegrad/kernel/fused.hpp"

// the precompiled runtime's compile part (extern under FUSEGRAD_PRECOMPILED)
#include "fusegrad/runtime/compile.hpp"
