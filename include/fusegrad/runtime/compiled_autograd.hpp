#pragma once
/// \file fusegrad/runtime/compiled_autograd.hpp
/// The precompiled runtime's part for compiled autograd (see fusegrad/runtime.hpp): the
/// runner of a captured backward (key, capture, plan, replay).

#include <vector>

#include "fusegrad/compiled_autograd/compiled_autograd.hpp"
#include "fusegrad/runtime/compile.hpp"
#include "fusegrad/runtime/jit.hpp"

/// The compiled-autograd runtime for element type `T`.
// NOLINTBEGIN(bugprone-macro-parentheses): the arguments are types, which cannot be parenthesized
#define FUSEGRAD_RUNTIME_COMPILED_AUTOGRAD(T)                                                       \
  FUSEGRAD_RT_EXTERN template void compiled_autograd::detail::run<T>(const std::vector<tensor<T>>&, \
                                                                     std::vector<tensor<T>>, bool);
// NOLINTEND(bugprone-macro-parentheses)

#if defined(FUSEGRAD_PRECOMPILED) && !defined(FUSEGRAD_BUILDING_RUNTIME)
#define FUSEGRAD_RT_EXTERN extern
namespace fusegrad {
FUSEGRAD_RUNTIME_COMPILED_AUTOGRAD(float)
FUSEGRAD_RUNTIME_COMPILED_AUTOGRAD(double)
}  // namespace fusegrad
#undef FUSEGRAD_RT_EXTERN
#endif
