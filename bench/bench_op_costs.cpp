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

#include <cstring>
#include <vector>

#include <fusegrad/fusegrad.hpp>

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

#define FUSEGRAD_OP_COST(name, ...) BENCHMARK_CAPTURE(op_cost, name, __VA_ARGS__)
FUSEGRAD_OP_COST(neg, fg::ops::neg_op{});
FUSEGRAD_OP_COST(exp, fg::ops::exp_op{});
FUSEGRAD_OP_COST(log, fg::ops::log_op{});
FUSEGRAD_OP_COST(sin, fg::ops::sin_op{});
FUSEGRAD_OP_COST(cos, fg::ops::cos_op{});
FUSEGRAD_OP_COST(tanh, fg::ops::tanh_op{});
FUSEGRAD_OP_COST(sigmoid, fg::ops::sigmoid_op{});
FUSEGRAD_OP_COST(relu, fg::ops::relu_op{});
FUSEGRAD_OP_COST(abs, fg::ops::abs_op{});
FUSEGRAD_OP_COST(sqrt, fg::ops::sqrt_op{});
FUSEGRAD_OP_COST(step, fg::ops::step_op{});
FUSEGRAD_OP_COST(sign, fg::ops::sign_op{});
FUSEGRAD_OP_COST(detach, fg::ops::detach_op{});
FUSEGRAD_OP_COST(add, fg::ops::add_op{});
FUSEGRAD_OP_COST(mul, fg::ops::mul_op{});
FUSEGRAD_OP_COST(div, fg::ops::div_op{});
FUSEGRAD_OP_COST(maximum, fg::ops::maximum_op{});
FUSEGRAD_OP_COST(pow, fg::ops::pow_op{});
FUSEGRAD_OP_COST(gt, fg::ops::gt_op{});
FUSEGRAD_OP_COST(pow_scalar_2, fg::ops::pow_scalar_op<T>{T(2)});
FUSEGRAD_OP_COST(pow_scalar_1_5, fg::ops::pow_scalar_op<T>{T(1.5)});
FUSEGRAD_OP_COST(mul_scalar, fg::ops::mul_scalar_op<T>{T(3)});
FUSEGRAD_OP_COST(div_scalar, fg::ops::div_scalar_op<T>{T(3)});
// The rest of the op library: the transcendental ones declare what these measure.
FUSEGRAD_OP_COST(tan, fg::ops::tan_op{});
FUSEGRAD_OP_COST(asin, fg::ops::asin_op{});
FUSEGRAD_OP_COST(acos, fg::ops::acos_op{});
FUSEGRAD_OP_COST(atan, fg::ops::atan_op{});
FUSEGRAD_OP_COST(atan2, fg::ops::atan2_op{});
FUSEGRAD_OP_COST(sinh, fg::ops::sinh_op{});
FUSEGRAD_OP_COST(cosh, fg::ops::cosh_op{});
FUSEGRAD_OP_COST(asinh, fg::ops::asinh_op{});
FUSEGRAD_OP_COST(acosh, fg::ops::acosh_op{});
FUSEGRAD_OP_COST(atanh, fg::ops::atanh_op{});
FUSEGRAD_OP_COST(log1p, fg::ops::log1p_op{});
FUSEGRAD_OP_COST(expm1, fg::ops::expm1_op{});
FUSEGRAD_OP_COST(log2, fg::ops::log2_op{});
FUSEGRAD_OP_COST(exp2, fg::ops::exp2_op{});
FUSEGRAD_OP_COST(erf, fg::ops::erf_op{});
FUSEGRAD_OP_COST(erfc, fg::ops::erfc_op{});
FUSEGRAD_OP_COST(lgamma, fg::ops::lgamma_op{});
FUSEGRAD_OP_COST(digamma, fg::ops::digamma_op{});
FUSEGRAD_OP_COST(softplus, fg::ops::softplus_op{});
FUSEGRAD_OP_COST(silu, fg::ops::silu_op{});
FUSEGRAD_OP_COST(gelu, fg::ops::gelu_op{});
FUSEGRAD_OP_COST(hypot, fg::ops::hypot_op{});
FUSEGRAD_OP_COST(fmod, fg::ops::fmod_op{});
FUSEGRAD_OP_COST(square, fg::ops::square_op{});
FUSEGRAD_OP_COST(reciprocal, fg::ops::reciprocal_op{});
FUSEGRAD_OP_COST(rsqrt, fg::ops::rsqrt_op{});
FUSEGRAD_OP_COST(floor, fg::ops::floor_op{});
