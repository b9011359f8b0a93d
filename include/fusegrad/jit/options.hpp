#pragma once
/// \file fusegrad/jit/options.hpp
/// The options of `fg::jit` (and of compiled autograd's captures, which run through the same
/// cache): what a jitted function's shared state is made with.

#include <string>

#include "fusegrad/jit/log.hpp"

namespace fusegrad {

/// Options of `fg::jit` (like `torch.compile`'s `fullgraph` and Dynamo's cache size limit).
/// How captured graphs run: tile programs, or node by node through the eager ops.
enum class jit_backend { fused, eager };

struct jit_options {
  bool fullgraph = false;         ///< a graph break throws `fusegrad::error` instead of splitting
  int recompile_limit = 8;        ///< compiles per function before misses run eagerly
  std::string name = "function";  ///< used in log lines
  jit_backend backend = jit_backend::fused;
  logs::channel graph_log = logs::graph;  ///< where a newly compiled graph is printed
  /// Trace once per signature (JAX's `jit`): a call whose arguments match an earlier call's
  /// signature replays that call's graph without calling the function (docs/jit.md).
  bool trace_once = false;
};

}  // namespace fusegrad
