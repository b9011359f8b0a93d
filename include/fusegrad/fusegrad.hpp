#pragma once
/// \file fusegrad/fusegrad.hpp
/// Umbrella header: everything fusegrad offers, in the order of its layers (each includes
/// only the layers above it in this list; docs/architecture.md draws them).
///
/// \code
/// #include <fusegrad/fusegrad.hpp>
/// namespace fg = fusegrad;
/// \endcode

// core: errors, element types, operands, shapes, storage, SIMD vocabulary, sums
#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/element.hpp"
#include "fusegrad/core/error.hpp"
#include "fusegrad/core/grad_mode.hpp"
#include "fusegrad/core/hash.hpp"
#include "fusegrad/core/mutex.hpp"
#include "fusegrad/core/operand.hpp"
#include "fusegrad/core/parallel.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/special.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/core/storage.hpp"
#include "fusegrad/core/type_list.hpp"

// ops: one op per header (value, SIMD value, derivative rule, public functions)
#include "fusegrad/ops/abs.hpp"
#include "fusegrad/ops/all.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/cos.hpp"
#include "fusegrad/ops/distributions.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/exp.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/matmul.hpp"
#include "fusegrad/ops/max.hpp"
#include "fusegrad/ops/maximum.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/op.hpp"
#include "fusegrad/ops/pow.hpp"
#include "fusegrad/ops/reduce.hpp"
#include "fusegrad/ops/relu.hpp"
#include "fusegrad/ops/sigmoid.hpp"
#include "fusegrad/ops/sin.hpp"
#include "fusegrad/ops/softmax.hpp"
#include "fusegrad/ops/sqrt.hpp"
#include "fusegrad/ops/step.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/table.hpp"
#include "fusegrad/ops/tanh.hpp"

// loops: the element-wise tile kernels and strided row walks every path runs
#include "fusegrad/loops/rows.hpp"
#include "fusegrad/loops/tile.hpp"

// the representations: eager tensors with a tape, expression types, the run-time IR, plain
// values (numbers, SIMD batches, duals)
#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/function.hpp"
#include "fusegrad/eager/gradcheck.hpp"
#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/linalg.hpp"
#include "fusegrad/eager/matmul.hpp"
#include "fusegrad/eager/pointwise.hpp"
#include "fusegrad/eager/print.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/eager/reduce.hpp"
#include "fusegrad/eager/scan.hpp"
#include "fusegrad/eager/structure.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/eager/views.hpp"
#include "fusegrad/expr/expr.hpp"
#include "fusegrad/ir/graph.hpp"
#include "fusegrad/value/dual.hpp"
#include "fusegrad/value/num.hpp"

// compilers and runners
#include "fusegrad/compile/analysis.hpp"
#include "fusegrad/compile/compile.hpp"
#include "fusegrad/ir/backward.hpp"
#include "fusegrad/jit/program.hpp"
#include "fusegrad/jit/jit.hpp"
#include "fusegrad/jit/log.hpp"
#include "fusegrad/kernel/fused.hpp"

// functional transforms: grad, value_and_grad, vjp, jvp, hvp, hessian, jacobian
#include "fusegrad/functional.hpp"
#include "fusegrad/functional/tensor.hpp"

// compiled autograd
#include "fusegrad/compiled_autograd/compiled_autograd.hpp"

// nn
#include "fusegrad/nn/linear.hpp"
#include "fusegrad/nn/loss.hpp"
#include "fusegrad/nn/optim.hpp"
#include "fusegrad/nn/sequential.hpp"
#include "fusegrad/nn/state_dict.hpp"

// the precompiled runtime's instantiations (extern under FUSEGRAD_PRECOMPILED)
#include "fusegrad/runtime.hpp"
