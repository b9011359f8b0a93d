// The precompiled runtime's scheduler: the loops of every TU that uses the runtime run their
// blocks here (see fusegrad/core/parallel.hpp), on OpenMP where the runtime is built with it.
#define FUSEGRAD_BUILDING_RUNTIME
#include "fusegrad/core/parallel.hpp"

#include <algorithm>
#if defined(FUSEGRAD_PARALLEL_ON) && !defined(FUSEGRAD_OPENMP)
#include <thread>
#endif

namespace fusegrad::detail {

void run_blocks(index_t count, void (*fn)(void*, index_t), void* ctx) {
  parallel_blocks(count, [fn, ctx](index_t b) { fn(ctx, b); });
}

// Not through `default_threads`, which calls this function under FUSEGRAD_PRECOMPILED.
int runtime_default_threads() noexcept {
#if defined(FUSEGRAD_OPENMP)
  return std::max(1, omp_get_max_threads());
#elif defined(FUSEGRAD_PARALLEL_ON)
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
#else
  return 1;
#endif
}

}  // namespace fusegrad::detail
