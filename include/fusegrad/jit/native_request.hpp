#pragma once
/// \file fusegrad/jit/native_request.hpp
/// A program asks for its native code (jit/native_emitter.hpp) from the process's code cache
/// (native/code_cache.hpp), as `fusegrad::native::current_mode()` says: not at all, in the
/// background (the interpreter runs every loop until the code is installed) or before the
/// program's first run.

#include "fusegrad/jit/program.hpp"

// A TU that links the precompiled runtime parses neither the emitter nor the code cache (a
// thread, a process spawner, the loader): only the runtime's own sources run `request_native`.
#if defined(FUSEGRAD_PRECOMPILED) && !defined(FUSEGRAD_BUILDING_RUNTIME)
namespace fusegrad::detail::jit {
template <Element T>
void request_native(const program<T>& p);
}  // namespace fusegrad::detail::jit
#else
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "fusegrad/jit/log.hpp"
#include "fusegrad/jit/native_abi.hpp"
#include "fusegrad/jit/native_emitter.hpp"
#include "fusegrad/native/code_cache.hpp"
#include "fusegrad/native/options.hpp"

namespace fusegrad::detail::jit {

/// Asks for program `p`'s native code: installed in `p.native()` now when it is loaded or
/// compiled at once (mode `sync`, or already in memory), else by the cache's thread once
/// compiled (mode `async`). Nothing when native code is off or no loop can be generated; a
/// failure leaves the interpreter running (the cache logs it).
template <Element T>
void request_native(const program<T>& p) {
  const auto mode = fusegrad::native::current_mode();
  if (mode == fusegrad::native::mode::off || p.num_loops() == 0) return;
  native_emitter<T> em(p);
  std::optional<std::string> body = em.source();
  if (!body) return;
  if (fusegrad::logs::enabled(fusegrad::logs::output_code)) fusegrad::native::set_log_sources(true);
  const std::shared_ptr<native_code<T> >& code = p.native();
  code->scalars = em.scalars();
  code->buffers = em.buffers();
  code->requested.store(true, std::memory_order_release);
  const native::kernel_source src{"#include \"fusegrad/jit/native_prelude.hpp\"\n", std::move(*body),
                                  "fusegrad_program"};
  auto install = [code](void* entry) { code->install(reinterpret_cast<native_program_fn<T> >(entry)); };
  if (void* entry = native::code_cache::global().get(src, mode, install)) install(entry);
}

}  // namespace fusegrad::detail::jit
#endif
