#pragma once
/// \file fusegrad/fusegrad.hpp
/// Umbrella header: everything fusegrad offers. A TU that uses one part parses less with its
/// component header: `<fusegrad/eager.hpp>`, `<fusegrad/compile.hpp>`, `<fusegrad/jit.hpp>`,
/// `<fusegrad/compiled_autograd.hpp>`, `<fusegrad/functional.hpp>`, `<fusegrad/nn.hpp>`.
///
/// \code
/// #include <fusegrad/fusegrad.hpp>
/// namespace fg = fusegrad;
/// \endcode

// the components, each of which compiles alone: eager tensors, fg::compile, fg::jit,
// compiled autograd, the functional transforms, nn (each includes the precompiled runtime's
// part it uses, extern under FUSEGRAD_PRECOMPILED)
#include "fusegrad/compile.hpp"
#include "fusegrad/compiled_autograd.hpp"
#include "fusegrad/eager.hpp"
#include "fusegrad/functional.hpp"
#include "fusegrad/jit.hpp"
#include "fusegrad/nn.hpp"

// what the components leave out: the rest of the core's vocabulary, plain values, the
// functional transforms on tensors
#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/hash.hpp"
#include "fusegrad/core/mutex.hpp"
#include "fusegrad/core/operand.hpp"
#include "fusegrad/core/special.hpp"
#include "fusegrad/core/storage.hpp"
#include "fusegrad/core/type_list.hpp"
#include "fusegrad/functional/tensor.hpp"
#include "fusegrad/loops/rows.hpp"
#include "fusegrad/loops/tile.hpp"
#include "fusegrad/ops/op.hpp"
#include "fusegrad/ops/table.hpp"
#include "fusegrad/value/dual.hpp"
#include "fusegrad/value/num.hpp"

// the precompiled runtime's instantiations, all parts (extern under FUSEGRAD_PRECOMPILED)
#include "fusegrad/runtime.hpp"
