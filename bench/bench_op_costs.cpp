// Calibration of the cost-based partitioner: what one element of each built-in
// element-wise op costs (its tile kernel over a tile that stays in L1), against what a load
// or a store of one element costs when a tensor streams from memory and when it stays in L2.
// The `cost` each op declares (ops/*.hpp, in streamed loads) and the memory regimes of
// `partition::memory_costs` come from these ratios; docs/performance.md has the figures.
//
//   cmake --preset bench && cmake --build build/bench --target bench_op_costs
//   build/bench/bench_op_costs --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// Each case reports ns per element (`ns_per_elem`); the ratios to `mem/stream_read` are the
// costs.
#include <benchmark/benchmark.h>

#include <bit>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <fusegrad/fusegrad.hpp>
#include "one_thread.hpp"

namespace fg = fusegrad;

namespace {

using T = float;
constexpr fg::index_t tile = fg::detail::tile_elems;

template <class Op>
void op_cost(benchmark::State& st, Op op) {
  // Operands in a positive range every op accepts (log, sqrt, pow), tile-sized: L1-resident.
  std::vector<T> a(tile), b(tile), out(tile);
  for (fg::index_t i = 0; i < tile; ++i) {
    a[static_cast<std::size_t>(i)] = T(0.5) + T(i % 17) * T(0.25);
    b[static_cast<std::size_t>(i)] = T(1.5) + T(i % 5) * T(0.125);
  }
  for (auto _ : st) {
    fg::detail::tile_op(op, a.data(), b.data(), out.data(), tile);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.counters["ns_per_elem"] = benchmark::Counter(static_cast<double>(tile) * static_cast<double>(st.iterations()),
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

/// A loop that reads `n` elements (sum) or writes them (fill): one streamed read or write per
/// element when `n` is far beyond the caches, an L2 one when it fits.
__attribute__((noinline)) T read_all(const T* __restrict p, fg::index_t n) {
  using V = fg::simd<T>;
  V acc0(T(0)), acc1(T(0));
  constexpr fg::index_t W = static_cast<fg::index_t>(V::size);
  fg::index_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    acc0 += V::load_unaligned(p + i);
    acc1 += V::load_unaligned(p + i + W);
  }
  return xsimd::hadd(acc0 + acc1);
}
__attribute__((noinline)) void write_all(T* __restrict p, fg::index_t n, T v) {
  for (fg::index_t i = 0; i < n; ++i) p[i] = v;
}

void mem_read(benchmark::State& st) {
  const auto n = static_cast<fg::index_t>(st.range(0));
  std::vector<T> a(static_cast<std::size_t>(n), T(1));
  for (auto _ : st) benchmark::DoNotOptimize(read_all(a.data(), n));
  st.counters["ns_per_elem"] = benchmark::Counter(static_cast<double>(n) * static_cast<double>(st.iterations()),
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
void mem_write(benchmark::State& st) {
  const auto n = static_cast<fg::index_t>(st.range(0));
  std::vector<T> a(static_cast<std::size_t>(n), T(1));
  T v = 0;
  for (auto _ : st) {
    write_all(a.data(), n, v += T(1));
    benchmark::ClobberMemory();
  }
  st.counters["ns_per_elem"] = benchmark::Counter(static_cast<double>(n) * static_cast<double>(st.iterations()),
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

// L2-resident (64 KiB of floats) and streamed (256 MiB).
BENCHMARK(mem_read)->Name("mem/cache_read")->Arg(1 << 14);
BENCHMARK(mem_write)->Name("mem/cache_write")->Arg(1 << 14);
BENCHMARK(mem_read)->Name("mem/stream_read")->Arg(1 << 26);
BENCHMARK(mem_write)->Name("mem/stream_write")->Arg(1 << 26);

// Every op of the op list (ops/list.hpp), in its order, named `op_cost/<name>` by the op's
// `name`; an op that holds a scalar is `<name>_scalar` and holds 2 (an order polygamma accepts;
// for pow, a small integer exponent's repeated squaring), and `pow(x, 1.5)`, C's pow, beside.
template <class Op>
void register_op_cost() {
  std::string name = "op_cost/" + std::string(Op::name);
  if constexpr (std::is_empty_v<Op>) {
    benchmark::RegisterBenchmark(name.c_str(), op_cost<Op>, Op{});
  } else {
    benchmark::RegisterBenchmark((name + "_scalar").c_str(), op_cost<Op>, std::bit_cast<Op>(T(2)));
  }
}
[[maybe_unused]] const bool op_costs_registered = [] {
  []<class... Ops>(fg::detail::type_list<Ops...>) { (register_op_cost<Ops>(), ...); }(fg::ops::table<T>{});
  benchmark::RegisterBenchmark("op_cost/pow_scalar_1_5", op_cost<fg::ops::pow_scalar_op<T>>,
                               fg::ops::pow_scalar_op<T>{T(1.5)});
  return true;
}();
