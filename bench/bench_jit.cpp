// The run-time tracer and kernel cache (fg::jit) beside the compile-time fused path and
// hand-written loops.
//
//   cmake --preset bench && cmake --build --preset bench --target bench_jit
//   ./build/bench/bench/bench_jit --benchmark_min_time=0.2   (figures: docs/performance.md)
//
// Cases:
//   BM_coscos_fwd_bwd/<variant>/N   out = cos(cos(x)) * y, then backward with a given gradient:
//       traced    fg::jit: traced every call, cache hit, forward and backward tile programs
//       compiled  fg::compile (the compile-time fused kernel)
//       hand      two hand-written xsimd loops (bench/hand_loops.hpp)
//     The goal: traced >= 0.7x the compiled path's throughput at N = 2^20.
//   BM_tiny_call/<variant>   out = x * y + z on 16 floats, forward only, grad mode off:
//       jit (trace + hash + guard check + program run + output allocation), eager (two ops),
//       hand (the loop alone, into a preallocated buffer). jit - hand is the per-call overhead
//       of a cache hit (goal < 1 us).
//   once_vs/<case>/<variant>/round:R/N   trace_once beside the default jit and eager mode, at
//       N = 10, 2^10, 2^16, 2^20, registered interleaved (each round runs every variant at
//       every N before the next round), so that the three are compared within one run:
//       coscos  fg::sum(cos(cos(x)) * y).backward()       (x, y require grad)
//       xyz     x * y + z, forward only, grad mode off
//       variants: eager, jit (traced every call), once (jit with trace_once: replayed)
//     ./bench_jit --benchmark_filter=once_vs --benchmark_min_time=0.2
//   BM_guard_check/K   one cache entry's guards checked against K input tensors (rank, sizes,
//       requires_grad, grad mode, aliasing); the counter ns_per_tensor is the goal's figure
//       (< 20 ns per tensor).

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "fusegrad/fusegrad.hpp"
#include "one_thread.hpp"
#include "hand_loops.hpp"

namespace fg = fusegrad;

namespace {
using namespace fusegrad_bench;

auto coscos = [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; };

struct inputs {
  explicit inputs(long n) : x(fg::randn<float>({n}, 1)), y(fg::randn<float>({n}, 2)), g(fg::randn<float>({n}, 4)) {}
  fg::tensor<float> x, y, g;
};

template <class F>
void run_fwd_bwd(benchmark::State& state, F& f) {
  const long n = state.range(0);
  inputs in(n);
  fg::tensor<float> x = in.x.detach().requires_grad(true), y = in.y.detach().requires_grad(true);
  for (auto _ : state) {
    x.zero_grad();
    y.zero_grad();
    fg::tensor<float> out = f(x, y);
    out.backward(in.g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<long>(sizeof(float)) * 8);
}

void BM_coscos_fwd_bwd_traced(benchmark::State& state) {
  auto f = fg::jit(coscos);
  run_fwd_bwd(state, f);
}
void BM_coscos_fwd_bwd_compiled(benchmark::State& state) {
  auto f = fg::compile(coscos);
  run_fwd_bwd(state, f);
}
template <class Trig>
void BM_coscos_fwd_bwd_hand(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  std::vector<float> out(static_cast<std::size_t>(n)), gx(out.size()), gy(out.size());
  for (auto _ : state) {
    hand_forward<Trig>(in.x.data(), in.y.data(), out.data(), n);
    hand_backward<Trig>(in.x.data(), in.y.data(), in.g.data(), gx.data(), gy.data(), n);
    benchmark::DoNotOptimize(gx.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<long>(sizeof(float)) * 8);
}

constexpr long tiny = 16;

void BM_tiny_call_jit(benchmark::State& state) {
  auto f = fg::jit(
      [](const fg::tensor<float>& x, const fg::tensor<float>& y, const fg::tensor<float>& z) { return x * y + z; });
  const auto x = fg::randn<float>({tiny}, 1), y = fg::randn<float>({tiny}, 2), z = fg::randn<float>({tiny}, 3);
  fg::no_grad ng;
  benchmark::DoNotOptimize(f(x, y, z).data_ptr());  // untimed: the first call traces (and compiles)
  for (auto _ : state) {
    fg::tensor<float> out = f(x, y, z);
    benchmark::DoNotOptimize(out.data_ptr());
  }
}
void BM_tiny_call_eager(benchmark::State& state) {
  const auto x = fg::randn<float>({tiny}, 1), y = fg::randn<float>({tiny}, 2), z = fg::randn<float>({tiny}, 3);
  fg::no_grad ng;
  for (auto _ : state) {
    fg::tensor<float> out = x * y + z;
    benchmark::DoNotOptimize(out.data_ptr());
  }
}
void BM_tiny_call_hand(benchmark::State& state) {
  const auto x = fg::randn<float>({tiny}, 1), y = fg::randn<float>({tiny}, 2), z = fg::randn<float>({tiny}, 3);
  std::vector<float> out(tiny);
  for (auto _ : state) {
    hand_xyz(x.data(), y.data(), z.data(), out.data(), tiny);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}

void BM_guard_check(benchmark::State& state) {
  const auto k = static_cast<std::size_t>(state.range(0));
  fg::detail::jit::entry<float> e;
  std::vector<fg::tensor<float>> ins;
  for (std::size_t i = 0; i < k; ++i) {
    ins.push_back(fg::zeros<float>({4, 16}));
    e.inputs.push_back({{4, 16}, i % 2 ? std::uint64_t{1} : 0, false});  // half of them with a dynamic dim 0
    e.names.push_back("arg" + std::to_string(i));
  }
  e.alias_of.assign(k, -1);
  const std::vector<int> alias(k, -1);
  for (auto _ : state) {
    bool ok = e.accepts(ins, true, alias);
    benchmark::DoNotOptimize(ok);
  }
  state.counters["ns_per_tensor"] = benchmark::Counter(static_cast<double>(k) * static_cast<double>(state.iterations()),
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// ---- trace_once beside the default jit and eager mode.

enum class variant { eager, jit, once };
constexpr const char* variant_name[] = {"eager", "jit", "once"};

template <class F>
auto make_variant(variant v, F f) {
  return [v, f, jf = fg::jit(f), jo = fg::jit(f, {.trace_once = true})](const auto&... a) {
    return v == variant::eager ? f(a...) : v == variant::jit ? jf(a...) : jo(a...);
  };
}

void once_vs_coscos(benchmark::State& state, variant v) {
  const long n = state.range(0);
  const auto f = make_variant(
      v, [](const fg::tensor<float>& x, const fg::tensor<float>& y) { return fg::sum(fg::cos(fg::cos(x)) * y); });
  inputs in(n);
  fg::tensor<float> x = in.x.detach().requires_grad(true), y = in.y.detach().requires_grad(true);
  f(x, y).backward();  // untimed: the first call traces (and, with native code, compiles)
  for (auto _ : state) {
    x.zero_grad();
    y.zero_grad();
    f(x, y).backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
}

void once_vs_xyz(benchmark::State& state, variant v) {
  const long n = state.range(0);
  const auto f = make_variant(
      v, [](const fg::tensor<float>& x, const fg::tensor<float>& y, const fg::tensor<float>& z) { return x * y + z; });
  const auto x = fg::randn<float>({n}, 1), y = fg::randn<float>({n}, 2), z = fg::randn<float>({n}, 3);
  fg::no_grad ng;
  benchmark::DoNotOptimize(f(x, y, z).data_ptr());  // untimed: the first call traces (and compiles)
  for (auto _ : state) {
    fg::tensor<float> out = f(x, y, z);
    benchmark::DoNotOptimize(out.data_ptr());
  }
}

const bool once_vs_registered = [] {
  for (int round = 0; round < 3; ++round)
    for (long n : {10L, 1L << 10, 1L << 16, 1L << 20, 1L << 24})
      for (variant v : {variant::eager, variant::jit, variant::once}) {
        const std::string tail = std::string("/") + variant_name[static_cast<int>(v)];
        const std::string r = "/round:" + std::to_string(round);
        benchmark::RegisterBenchmark(("once_vs/coscos" + tail + r).c_str(), once_vs_coscos, v)
            ->Arg(n)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("once_vs/xyz" + tail + r).c_str(), once_vs_xyz, v)
            ->Arg(n)
            ->Unit(benchmark::kMicrosecond);
      }
  return true;
}();

void sizes(benchmark::internal::Benchmark* b) {
  for (int e : {10, 16, 20, 24}) b->Arg(1L << e);
  b->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_coscos_fwd_bwd_traced)->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_compiled)->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand<xsimd_trig>)->Name("BM_coscos_fwd_bwd_hand")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand<lanes_trig>)->Name("BM_coscos_fwd_bwd_hand_lanes")->Apply(sizes);
BENCHMARK(BM_tiny_call_jit);
BENCHMARK(BM_tiny_call_eager);
BENCHMARK(BM_tiny_call_hand);
BENCHMARK(BM_guard_check)->Arg(1)->Arg(4)->Arg(16);
