// The precompiled runtime's scheduler: the loops of every TU that uses the runtime run their
// blocks here (see fusegrad/core/parallel.hpp), on OpenMP where the runtime is built with it.
#define FUSEGRAD_BUILDING_RUNTIME
#include "fusegrad/core/parallel.hpp"

namespace fusegrad::detail {

void run_blocks(index_t count, void (*fn)(void*, index_t), void* ctx) {
  parallel_blocks(count, [fn, ctx](index_t b) { fn(ctx, b); });
}

// Not through `default_threads`, which calls this function under FUSEGRAD_PRECOMPILED.
int runtime_default_threads() noexcept { return scheduler_default_threads(); }

}  // namespace fusegrad::detail
