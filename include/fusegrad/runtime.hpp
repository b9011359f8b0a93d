#pragma once
/// \file fusegrad/runtime.hpp
/// The precompiled runtime: what the CMake target `fusegrad::fusegrad` links (and
/// `fusegrad::header_only` goes without).
///
/// Every translation unit that runs a backward instantiates the same generic runtime for its
/// element type: the tensor and the tape's nodes, the autograd engine, each eager op with its
/// kernels and backward rule, the node evaluator and the fused loop runner. None of that
/// depends on the user's graphs. With `FUSEGRAD_PRECOMPILED` defined (the CMake target
/// `fusegrad::fusegrad` defines it and links src/runtime_*.cpp, which instantiate this list
/// for float and double), this header declares those instantiations `extern`, so a TU
/// compiles only what is its own: its graphs' analysis, tables and row bodies, and its calls.
/// Like fmt's compiled mode, it changes build time only, never behaviour.
///
/// The list is one macro per part and element type, each in the header of its part
/// (fusegrad/runtime/: eager, compile, jit, compiled_autograd; a component header such as
/// `<fusegrad/compile.hpp>` includes only its own), read twice: as `extern template`
/// declarations there, as explicit instantiation definitions in src/runtime_float.cpp and
/// src/runtime_double.cpp.

#include <type_traits>

#include "fusegrad/core/type_list.hpp"
#include "fusegrad/ops/table.hpp"
#include "fusegrad/runtime/compile.hpp"
#include "fusegrad/runtime/compiled_autograd.hpp"
#include "fusegrad/runtime/eager.hpp"
#include "fusegrad/runtime/jit.hpp"

/// The whole generic runtime for element type `T` (what src/runtime_*.cpp instantiate).
#define FUSEGRAD_RUNTIME_INSTANCES(T) \
  FUSEGRAD_RUNTIME_EAGER(T)           \
  FUSEGRAD_RUNTIME_COMPILE(T)         \
  FUSEGRAD_RUNTIME_JIT(T)             \
  FUSEGRAD_RUNTIME_COMPILED_AUTOGRAD(T)
