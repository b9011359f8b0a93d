#pragma once
/// \file fusegrad/fusegrad.hpp
/// Umbrella header: everything fusegrad offers.
///
/// \code
/// #include <fusegrad/fusegrad.hpp>
/// namespace fg = fusegrad;
/// \endcode

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/error.hpp"
#include "fusegrad/core/grad_mode.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/core/storage.hpp"
#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/function.hpp"
#include "fusegrad/eager/gradcheck.hpp"
#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/pointwise.hpp"
#include "fusegrad/eager/print.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/nn/linear.hpp"
#include "fusegrad/ops/abs.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/cos.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/exp.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/matmul.hpp"
#include "fusegrad/ops/max.hpp"
#include "fusegrad/ops/maximum.hpp"
#include "fusegrad/ops/mean.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/pow.hpp"
#include "fusegrad/ops/relu.hpp"
#include "fusegrad/ops/sigmoid.hpp"
#include "fusegrad/ops/sin.hpp"
#include "fusegrad/ops/sqrt.hpp"
#include "fusegrad/ops/step.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/sum.hpp"
#include "fusegrad/ops/tanh.hpp"
#include "fusegrad/ops/views.hpp"
