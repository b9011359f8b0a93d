#pragma once
/// \file fusegrad/eager.hpp
/// Eager tensors with a tape (docs/eager.md): `fg::tensor<float|double>`, every op, views,
/// reductions, matmul and linear algebra, autograd (hooks, custom functions, `autograd::grad`,
/// double backward), `gradcheck`, printing. The compilers are not parsed: include
/// `<fusegrad/compile.hpp>`, `<fusegrad/jit.hpp>` or `<fusegrad/fusegrad.hpp>` for them.
///
/// \code
/// #include <fusegrad/eager.hpp>
/// namespace fg = fusegrad;
/// \endcode

// core: errors, element types, shapes, storage, SIMD vocabulary, every core
#include "fusegrad/core/element.hpp"
#include "fusegrad/core/error.hpp"
#include "fusegrad/core/grad_mode.hpp"
#include "fusegrad/core/parallel.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/simd.hpp"

// ops: the element-wise table and the ops written over it
#include "fusegrad/ops/all.hpp"
#include "fusegrad/ops/distributions.hpp"
#include "fusegrad/ops/function.hpp"
#include "fusegrad/ops/matmul.hpp"
#include "fusegrad/ops/max.hpp"
#include "fusegrad/ops/reduce.hpp"
#include "fusegrad/ops/normalization.hpp"
#include "fusegrad/ops/softmax.hpp"

// eager tensors and their tape
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

// the precompiled runtime's eager part (extern under FUSEGRAD_PRECOMPILED)
#include "fusegrad/runtime/eager.hpp"
