#pragma once
/// \file fusegrad/functional.hpp
/// The functional transforms (docs/functional.md): `fg::grad`, `fg::value_and_grad` (with
/// `fg::argnums`), `fg::vjp`, `fg::jvp`, `fg::hvp`, `fg::hessian`, `fg::jacobian`, on
/// scalars, contiguous ranges (`std::array`, `std::span`, `std::vector`) and tensors, with
/// nothing recorded and, into caller-provided outputs, nothing allocated. Tensor arguments
/// need `<fusegrad/functional/tensor.hpp>` too (or the umbrella header).

// the ops, for the functions transformed (no tensors: this header alone compiles quickly):
// the whole element-wise table and the ops written over it
#include "fusegrad/ops/abs.hpp"
#include "fusegrad/ops/all.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/cos.hpp"
#include "fusegrad/ops/distributions.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/exp.hpp"
#include "fusegrad/ops/function.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/maximum.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/pow.hpp"
#include "fusegrad/ops/relu.hpp"
#include "fusegrad/ops/sigmoid.hpp"
#include "fusegrad/ops/sin.hpp"
#include "fusegrad/ops/sqrt.hpp"
#include "fusegrad/ops/step.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/tanh.hpp"

// the transforms
#include "fusegrad/functional/args.hpp"
#include "fusegrad/functional/forward.hpp"
#include "fusegrad/functional/grad.hpp"
#include "fusegrad/functional/normal.hpp"
#include "fusegrad/value/dual.hpp"
#include "fusegrad/value/num.hpp"
