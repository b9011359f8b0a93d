#pragma once
/// \file fusegrad/runtime/jit.hpp
/// The precompiled runtime's part for `fg::jit` (see fusegrad/runtime.hpp): the run-time
/// tile programs and the tracer, with everything a sync point runs (the guarded cache, the
/// compile of an entry, its programs), so that a TU's jitted functions compile only their
/// own call operators.

#include <memory>
#include <vector>

#include "fusegrad/jit/jit.hpp"
#include "fusegrad/jit/native_request.hpp"
#include "fusegrad/jit/program.hpp"
#include "fusegrad/jit/tracing_scope.hpp"
#include "fusegrad/runtime/eager.hpp"

/// The jit runtime for element type `T`.
#define FUSEGRAD_RUNTIME_JIT(T)                                                                                  \
  FUSEGRAD_RT_EXTERN template class ir::graph<T>;                                                                \
  FUSEGRAD_RT_EXTERN template class detail::jit::row_step<T>;                                                    \
  FUSEGRAD_RT_EXTERN template class detail::jit::program<T>;                                                     \
  FUSEGRAD_RT_EXTERN template void detail::jit::request_native<T>(const detail::jit::program<T>&);               \
  FUSEGRAD_RT_EXTERN template class detail::jit::trace<T>;                                                       \
  FUSEGRAD_RT_EXTERN template struct detail::jit::replayer<T>;                                                   \
  FUSEGRAD_RT_EXTERN template class detail::jit::once_recording<T>;                                              \
  FUSEGRAD_RT_EXTERN template detail::jit::trace<T>& detail::jit::begin_tracer<T>(std::size_t,                   \
                                                                                  detail::jit::function_state&); \
  FUSEGRAD_RT_EXTERN template jit_entry_info detail::jit::entry_info<T>(const detail::jit::entry<T>&);

/// What the float and double runtimes share: the scopes that install the tracers of a jitted
/// call or a compiled-autograd capture (their tag is always `void`; see jit/tracing_scope.hpp).
#define FUSEGRAD_RUNTIME_JIT_SHARED                                                                     \
  FUSEGRAD_RT_EXTERN template class detail::jit::tracing_scope<void, detail::jit::traced::float_only>;  \
  FUSEGRAD_RT_EXTERN template class detail::jit::tracing_scope<void, detail::jit::traced::double_only>; \
  FUSEGRAD_RT_EXTERN template class detail::jit::tracing_scope<void, detail::jit::traced::both>;

#if defined(FUSEGRAD_PRECOMPILED) && !defined(FUSEGRAD_BUILDING_RUNTIME)
#define FUSEGRAD_RT_EXTERN extern
namespace fusegrad {
FUSEGRAD_RUNTIME_JIT(float)
FUSEGRAD_RUNTIME_JIT(double)
FUSEGRAD_RUNTIME_JIT_SHARED
}  // namespace fusegrad
#undef FUSEGRAD_RT_EXTERN
#endif
