#pragma once
/// \file fusegrad/jit.hpp
/// `fg::jit` (docs/jit.md) with the eager tensors it traces: the run-time tracer, its guarded
/// cache with dynamic shapes, graph breaks, counters and logs.

#include "fusegrad/eager.hpp"
#include "fusegrad/ir/backward.hpp"
#include "fusegrad/ir/graph.hpp"
#include "fusegrad/jit/jit.hpp"
#include "fusegrad/jit/log.hpp"
#include "fusegrad/jit/program.hpp"

// the precompiled runtime's jit part (extern under FUSEGRAD_PRECOMPILED)
#include "fusegrad/runtime/jit.hpp"
