#pragma once
/// \file fusegrad/core/parallel.hpp
/// Every core: the one parallel primitive of fusegrad (eager kernels, the fused loops, the
/// IR's tile programs, reductions, `sum_to`, matmul all call it), and its controls.
///
/// The scheduler is OpenMP (GCC's libgomp; docs/architecture.md says why, measured against
/// oneTBB). With the precompiled runtime (`FUSEGRAD_PRECOMPILED`, CMake's `fusegrad::fusegrad`)
/// a TU's loops hand their blocks to the runtime's scheduler (`run_blocks`), on all cores where
/// the runtime was built with OpenMP. Header-only, a TU's loops run on all cores where it is
/// compiled with OpenMP (`-fopenmp`, which `fusegrad::header_only` adds where OpenMP is found).
/// With `FUSEGRAD_SERIAL` every loop runs on the calling thread, with the same results.
/// `FUSEGRAD_TBB` (CMake: `-DFUSEGRAD_PARALLEL_BACKEND=TBB`) uses oneTBB instead of OpenMP.
///
/// Results never depend on the number of threads: element-wise work is independent per
/// element, reductions over dims are parallel over their outputs, and a sum of many values is
/// cut at aligned power-of-two groups of chunks whose block totals go through the same tree
/// as one thread's (core/accumulate.hpp, `sum_of_blocks`).
///
/// Small calls stay on the calling thread: a loop is split only when each block gets at least
/// its grain of work, and that test comes before anything else (one relaxed load of the
/// grain; no allocation, no synchronisation).
/// Several user threads calling at once share one budget of `get_num_threads() - 1` library
/// workers (a lease that never waits: a call that finds none runs on its own thread), so
/// 8 user threads calling 4-thread functions use at most 8 + 3 threads. A call made inside a
/// parallel block (or inside the user's own OpenMP region) runs serially.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <memory>
#include <type_traits>
#include <string_view>

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/shape.hpp"

#if defined(FUSEGRAD_SERIAL)
#elif defined(FUSEGRAD_PRECOMPILED) && !defined(FUSEGRAD_BUILDING_RUNTIME)
// A TU that uses the precompiled runtime hands its loops' blocks to the runtime's scheduler
// (`run_blocks`), so it needs no OpenMP flags of its own, and whether a program runs on all
// cores is a property of the one runtime it links, which no TU can contradict.
#define FUSEGRAD_PARALLEL_ON 1
#define FUSEGRAD_PARALLEL_IN_RUNTIME 1
#elif defined(FUSEGRAD_TBB)
// The alternative scheduler, oneTBB (CMake: -DFUSEGRAD_PARALLEL_BACKEND=TBB), kept so that
// the choice can be re-measured: its caller never waits for a worker that has not joined.
#define FUSEGRAD_PARALLEL_ON 1
#include <thread>
#include <tbb/parallel_for.h>
#elif defined(_OPENMP)
#define FUSEGRAD_OPENMP 1
#define FUSEGRAD_PARALLEL_ON 1
#include <omp.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define FUSEGRAD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FUSEGRAD_TSAN 1
#endif
#endif
#if defined(FUSEGRAD_TSAN) && defined(FUSEGRAD_PARALLEL_ON)
#include <thread>
#include <vector>
#endif

namespace fusegrad {
namespace detail {

/// Whether this build runs loops on several threads (OpenMP, or oneTBB under `FUSEGRAD_TBB`).
inline constexpr bool parallel_enabled =
#if defined(FUSEGRAD_PARALLEL_ON)
    true;
#else
    false;
#endif

/// Elements a block of an element-wise loop gets at least (a loop is split only when every
/// block gets this much): enough of a cheap op to outweigh a parallel region's cost several times.
/// A variable only so that tests can lower it (`set_parallel_grain`) to split small tensors.
inline std::atomic<index_t> parallel_grain_setting{index_t{1} << 14};
inline index_t parallel_grain() noexcept { return parallel_grain_setting.load(std::memory_order_relaxed); }
/// Tests only: the grain of every loop (`parallel_grain`); returns the previous one.
inline index_t set_parallel_grain(index_t g) noexcept {
  return parallel_grain_setting.exchange(std::max<index_t>(g, 1));
}

#if defined(FUSEGRAD_PRECOMPILED)
/// The precompiled runtime's scheduler (src/runtime_parallel.cpp): `fn(ctx, b)` for every
/// block `b` in [0, count), as `parallel_blocks` below runs them where the runtime was built
/// (on all cores, or on the calling thread in a serial runtime).
void run_blocks(index_t count, void (*fn)(void*, index_t), void* ctx);
/// The runtime's default thread count: OpenMP's (OMP_NUM_THREADS or the cores), 1 in a
/// serial runtime.
int runtime_default_threads() noexcept;
#endif

#if !defined(FUSEGRAD_PRECOMPILED) || defined(FUSEGRAD_BUILDING_RUNTIME)
/// The default thread count of the scheduler this TU is compiled with: OpenMP's
/// (OMP_NUM_THREADS or the cores), the cores, or 1 in a serial build. Defined only where that
/// scheduler runs (header-only TUs, or the runtime's own), so that its macro-dependent body is
/// the same in every TU that has it.
inline int scheduler_default_threads() noexcept {
#if defined(FUSEGRAD_OPENMP)
  return std::max(1, omp_get_max_threads());
#elif defined(FUSEGRAD_PARALLEL_ON)
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
#else
  return 1;
#endif
}
#endif

/// The default thread count. With the precompiled runtime it is the runtime's, in the
/// runtime's own TUs too, so that this inline function has one definition in every TU of the
/// program.
inline int default_threads() {
#if defined(FUSEGRAD_PRECOMPILED)
  return runtime_default_threads();
#else
  return scheduler_default_threads();
#endif
}
/// `FUSEGRAD_NUM_THREADS` as a thread count: the default when it is unset or empty, 0 when it
/// is not a whole number from 1 to 4096.
inline int threads_from_environment() noexcept {
  const char* e = std::getenv("FUSEGRAD_NUM_THREADS");
  if (!e || !*e) return default_threads();
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  return *end != '\0' || v < 1 || v > 4096 ? 0 : static_cast<int>(v);
}
/// The thread count setting, the environment read once; 0 while `FUSEGRAD_NUM_THREADS` is
/// invalid and `set_num_threads` has not replaced it.
inline std::atomic<int>& thread_setting() {
  static std::atomic<int> n{threads_from_environment()};
  return n;
}
/// The threads a loop may use: the setting, or the error of an invalid `FUSEGRAD_NUM_THREADS`
/// (every call reports it, never a silent default, until `set_num_threads` overrides it).
inline int thread_count() {
  const int n = thread_setting().load(std::memory_order_relaxed);
  if (n == 0) [[unlikely]]
    fail("FUSEGRAD_NUM_THREADS", "value '",
         std::string_view(std::getenv("FUSEGRAD_NUM_THREADS") ? std::getenv("FUSEGRAD_NUM_THREADS") : ""),
         "'; expected a whole number from 1 to 4096 (or call fg::set_num_threads(n), which overrides it)");
  return n;
}
/// Library workers lent to calls now (all user threads together).
inline std::atomic<int>& workers_busy() {
  static std::atomic<int> n{0};
  return n;
}
/// True on a thread running a parallel block (a nested call runs serially).
inline thread_local bool in_parallel_block = false;

#if defined(FUSEGRAD_PARALLEL_ON) && !defined(FUSEGRAD_PARALLEL_IN_RUNTIME)
/// Up to `want` workers from the shared budget (0 when none is free); never waits.
inline int lease_workers(int want, int threads) {
  auto& busy = workers_busy();
  int cur = busy.load(std::memory_order_relaxed);
  for (;;) {
    const int got = std::min(want, threads - 1 - cur);
    if (got <= 0) return 0;
    if (busy.compare_exchange_weak(cur, cur + got, std::memory_order_acquire, std::memory_order_relaxed)) return got;
  }
}
/// Runs `body()` on `team` threads (this one and `team - 1` others) and returns when all
/// are done: an OpenMP parallel region. Under ThreadSanitizer, std::threads started and joined
/// here instead: libgomp is not instrumented, so TSan sees neither a region's fork nor its
/// join, and the compiler writes the region's shared data after any annotation could be
/// placed; with threads it sees both, and still checks the blocks against each other (the
/// split, the lease and the blocks are the same code).
template <class Body>
void run_team(int team, Body& body) {
#if defined(FUSEGRAD_TSAN)
  std::vector<std::thread> others;
  others.reserve(static_cast<std::size_t>(team - 1));
  for (int t = 1; t < team; ++t) others.emplace_back([&body, t] { body(t); });
  body(0);
  for (auto& t : others) t.join();
#elif defined(FUSEGRAD_OPENMP)
#pragma omp parallel num_threads(team)
  body(omp_get_thread_num());
#else
  tbb::parallel_for(
      0, team, [&](int t) { body(t); }, tbb::simple_partitioner());
#endif
}

/// Whether a call's `count` blocks may go to other threads: more than one, and the call not
/// made from a parallel block (or an OpenMP region), whose nested call runs serially.
inline bool may_share_blocks(index_t count) {
#if defined(FUSEGRAD_OPENMP)
  return count > 1 && !in_parallel_block && !omp_in_parallel();
#else
  return count > 1 && !in_parallel_block;
#endif
}

/// Calls `f(b)` for every block `b` in [0, count) on a team of `members` threads (this one
/// and the workers leased for it), and returns the first exception thrown (the blocks not
/// yet started are then skipped).
template <class F>
std::exception_ptr run_blocks_on_team(index_t count, int members, F& f) {
  // Each member owns a contiguous range of the blocks and takes them first, then helps
  // the others with theirs. Owning the same range from loop to loop keeps a thread on the
  // same part of same-shaped tensors (in its own core's cache: a chain of element-wise
  // ops on L2-sized tensors took several times the CPU time when any thread took any
  // block; docs/architecture.md, "Every core"), and
  // helping keeps a member that the machine slows from holding the others up.
  struct alignas(64) cursor {
    std::atomic<index_t> next;
    index_t end;
  };
  std::array<cursor, 8> small{};
  std::vector<cursor> large(members > 8 ? static_cast<std::size_t>(members) : 0);
  cursor* cur = members > 8 ? large.data() : small.data();
  for (int m = 0; m < members; ++m) {
    cur[m].next.store(count * m / members, std::memory_order_relaxed);
    cur[m].end = count * (m + 1) / members;
  }
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  auto body = [&](int member) {
    const bool outer = in_parallel_block;
    in_parallel_block = true;
    try {
      for (int k = 0; k < members && !failed.load(std::memory_order_relaxed); ++k) {
        cursor& c = cur[(member + k) % members];
        for (index_t b;
             !failed.load(std::memory_order_relaxed) && (b = c.next.fetch_add(1, std::memory_order_relaxed)) < c.end;)
          f(b);
      }
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
    in_parallel_block = outer;
  };
  run_team(members, body);
  return error;
}
/// `fn(ctx, b)` for every block `b` in [0, count) on this thread and the workers leased for
/// the call, if any is free (true); false where none is (the caller runs the blocks). Not a
/// template: every loop of a TU shares one team runner (and one parallel region), and only
/// its block body, called once per block, is its own.
inline bool run_blocks_on_workers(index_t count, void (*fn)(void*, index_t), void* ctx) {
  const int threads = thread_count();
  const int team = static_cast<int>(std::min<index_t>(count, threads));
  const int extra = team > 1 ? lease_workers(team - 1, threads) : 0;
  if (extra <= 0) return false;
  auto f = [fn, ctx](index_t b) { fn(ctx, b); };
  std::exception_ptr error = run_blocks_on_team(count, extra + 1, f);
  workers_busy().fetch_sub(extra, std::memory_order_release);
  if (error) std::rethrow_exception(error);
  return true;
}
#endif

/// Calls `f(b)` for every block `b` in [0, count), on up to `get_num_threads()` threads
/// (each thread its own contiguous range of blocks first, then the others' left-over ones). Exceptions reach the caller
/// (the first one thrown).
template <class F>
void parallel_blocks(index_t count, F&& f) {
#if defined(FUSEGRAD_PARALLEL_IN_RUNTIME)
  if (count > 1 && !in_parallel_block) {
    using body = std::remove_reference_t<F>;
    run_blocks(
        count, [](void* c, index_t b) { (*static_cast<body*>(c))(b); },
        const_cast<void*>(static_cast<const void*>(std::addressof(f))));
    return;
  }
#elif defined(FUSEGRAD_PARALLEL_ON)
  if (may_share_blocks(count)) {
    using body = std::remove_reference_t<F>;
    if (run_blocks_on_workers(
            count, [](void* c, index_t b) { (*static_cast<body*>(c))(b); },
            const_cast<void*>(static_cast<const void*>(std::addressof(f)))))
      return;
  }
#endif
  for (index_t b = 0; b < count; ++b) f(b);
}

/// Blocks of a loop over `n` items: `size` items each (the last one shorter), `count` of them.
struct block_split {
  index_t size, count;
};

/// How `n` items are cut when each block must get at least `grain` of them, block sizes a
/// multiple of `align`: one block below twice the grain (a small call: nothing else is read),
/// else up to 4 blocks per thread (the spare ones balance threads that other work on the
/// machine slows).
inline block_split split_items(index_t n, index_t grain, index_t align = 1) {
  if (n < 2 * grain || !parallel_enabled) return {std::max<index_t>(n, 1), n > 0 ? 1 : 0};
  const index_t threads = thread_count();
  if (threads <= 1 || in_parallel_block) return {n, 1};
  const index_t count = std::min(n / grain, 4 * threads);
  const index_t size = ((n + count - 1) / count + align - 1) / align * align;
  return {size, (n + size - 1) / size};
}

/// `f(begin, end)` over [0, n) cut into blocks of at least `grain` items (see `split_items`);
/// one call `f(0, n)` on the calling thread for a small loop.
template <class F>
void parallel_for(index_t n, index_t grain, F&& f, index_t align = 1) {
  if (n < 2 * grain || !parallel_enabled) {
    if (n > 0) f(index_t{0}, n);
    return;
  }
  const block_split s = split_items(n, grain, align);
  if (s.count <= 1) {
    f(index_t{0}, n);
    return;
  }
  parallel_blocks(s.count, [&](index_t b) { f(b * s.size, std::min(n, (b + 1) * s.size)); });
}

/// How a loop over `n` values is cut when its blocks must be `unit << j` values long for some
/// j (the last block shorter): what a sum's blocks need to equal one thread's sum (`unit`: a
/// chunk, core/accumulate.hpp). At least `grain` values a block; up to 4 blocks per thread.
inline block_split split_pow2(index_t n, index_t unit, index_t grain) {
  if (n < 2 * grain || !parallel_enabled) return {std::max<index_t>(n, 1), n > 0 ? 1 : 0};
  const index_t threads = thread_count();
  if (threads <= 1 || in_parallel_block) return {n, 1};
  index_t size = unit;
  while (size < grain || (n + size - 1) / size > 4 * threads) size *= 2;
  return {size, (n + size - 1) / size};
}

}  // namespace detail

/// The threads a parallel loop of fusegrad may use: `set_num_threads`'s value, else
/// `FUSEGRAD_NUM_THREADS`, else OpenMP's default (OMP_NUM_THREADS, or the cores). Always 1 in
/// a build without OpenMP (`-fopenmp`), whose loops run on the calling thread.
inline int get_num_threads() { return detail::parallel_enabled ? detail::thread_count() : 1; }

/// Sets the threads fusegrad's loops may use, for all user threads at once (1: every loop on
/// its calling thread). Results do not depend on it. In a build without OpenMP it is recorded
/// and has no effect.
inline void set_num_threads(int n) {
  if (n < 1 || n > 4096) detail::fail("set_num_threads", "n = ", n, "; expected a whole number from 1 to 4096");
  detail::thread_setting().store(n);
}

}  // namespace fusegrad
