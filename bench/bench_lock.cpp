// The lock of tape nodes and tensors' autograd state (core/mutex.hpp) against std::mutex:
// lock, touch and unlock each of 100 nodes in turn, as compiled autograd's key walk and the
// eager engine do.
//
//   cmake --preset bench && cmake --build --preset bench --target bench_lock
//   ./build/bench/bench/bench_lock        (figures: docs/performance-log.md, "a lighter lock")
//
//   BM_lock_100/<lock>/single    while the process has one thread (glibc's mutex then uses no
//                                locked instruction; light_mutex a plain load and store)
//   BM_lock_100/<lock>/threaded  after a second thread has been started and joined (both use
//                                locked instructions from then on). Registered last: the C
//                                library's flag never goes back.
#include <benchmark/benchmark.h>

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fusegrad/core/mutex.hpp"

namespace {

template <class Mutex>
struct node {
  Mutex m;
  long touched = 0;
};

template <class Mutex>
void lock_100(benchmark::State& state, bool threaded) {
  if (threaded) {
    static const bool started = [] {
      std::thread t([] {});
      t.join();
      return true;
    }();
    benchmark::DoNotOptimize(started);
  }
  std::vector<std::unique_ptr<node<Mutex>>> nodes;
  for (int i = 0; i < 100; ++i) nodes.push_back(std::make_unique<node<Mutex>>());
  for (auto _ : state)
    for (auto& n : nodes) {
      std::lock_guard lock(n->m);
      ++n->touched;
      benchmark::DoNotOptimize(n->touched);
    }
}

void BM_std_single(benchmark::State& s) { lock_100<std::mutex>(s, false); }
void BM_light_single(benchmark::State& s) { lock_100<fusegrad::detail::light_mutex>(s, false); }
void BM_std_threaded(benchmark::State& s) { lock_100<std::mutex>(s, true); }
void BM_light_threaded(benchmark::State& s) { lock_100<fusegrad::detail::light_mutex>(s, true); }

}  // namespace

BENCHMARK(BM_std_single)->Name("BM_lock_100/std_mutex/single");
BENCHMARK(BM_light_single)->Name("BM_lock_100/light_mutex/single");
BENCHMARK(BM_std_threaded)->Name("BM_lock_100/std_mutex/threaded");
BENCHMARK(BM_light_threaded)->Name("BM_lock_100/light_mutex/threaded");
