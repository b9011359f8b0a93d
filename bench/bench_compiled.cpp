// The compile-time fused path (fg::compile) beside hand-written xsimd loops, the eager path,
// a copy kernel, and Eigen when it is installed.
//
//   cmake --preset bench && cmake --build --preset bench
//   ./build/bench/bench/bench_compiled --benchmark_min_time=0.2   (figures: docs/performance.md)
//
// Cases (N = 10, the fixed cost of a call, and 2^10 ... 2^24 floats):
//   BM_coscos_fwd_bwd/<variant>  out = cos(cos(x)) * y, then backward with a given gradient g:
//       fused      fg::compile, default policy::cost (the plan of the call's size class; one
//                  pass forward, one backward)
//       fused_min_cut  fg::compile with AOTAutograd's min-cut (saves x only, recomputes cos(x))
//       hand       two hand-written xsimd loops that recompute cos(x) in the backward
//       hand_save  two hand-written xsimd loops that save cos(x) and cos(cos(x))
//       hand_lanes, hand_save_lanes  the same two with fusegrad::lanes::cos/sin (xsimd's steps
//                  written inline: faster)
//       hand_save_blocks_lanes  hand_save_lanes with its forward over blocks of 256 elements,
//                  one cosine per pass (the two cosines of an element wait on each other);
//                  the best hand loop at a size is the fastest of the hand loops
//       eager      the same expression op by op on the tape
//       eigen      Eigen arrays: forward expression, then the gradient expressions
//   BM_xyz/<variant>  out = x * y + z, forward only (bandwidth bound: 3 reads, 1 write):
//       fused, hand (a plain loop), eager, eigen, and copy: memcpy of 2N floats, which moves
//       the same number of bytes (the goal: fused >= 0.85 of copy's throughput)
//   BM_forty_fwd_bwd/<variant>  the 40-node function of tests/compile/test_compile_40.cpp
//       (tools/compile_time/forty.hpp) on three float inputs, forward + backward(): fused
//       (fg::compile) and eager; a graph whose backward sums many gradients to their operands'
//       shapes (docs/performance.md, "fg::compile")

#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "fusegrad/fusegrad.hpp"
#include "fusegrad/jit/program.hpp"
#include "one_thread.hpp"
#include "../tools/compile_time/forty.hpp"
#include "hand_loops.hpp"

#if defined(FUSEGRAD_HAVE_EIGEN)
#include <Eigen/Core>
#endif

namespace fg = fusegrad;

namespace {
using namespace fusegrad_bench;

struct inputs {
  explicit inputs(long n)
      : x(fg::randn<float>({n}, 1)),
        y(fg::randn<float>({n}, 2)),
        z(fg::randn<float>({n}, 3)),
        g(fg::randn<float>({n}, 4)) {}
  fg::tensor<float> x, y, z, g;
};

void set_bytes(benchmark::State& state, long n, int streams) {
  state.SetBytesProcessed(state.iterations() * n * static_cast<long>(sizeof(float)) * streams);
  state.SetItemsProcessed(state.iterations() * n);
}

// ---- cos(cos(x)) * y, forward + backward ------------------------------------------------

auto coscos = [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; };

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
  set_bytes(state, n, 8);
}

template <class Trig>
void BM_coscos_fwd_bwd_hand_sincos(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  std::vector<float> out(static_cast<std::size_t>(n)), gx(out.size()), gy(out.size());
  for (auto _ : state) {
    hand_forward<Trig>(in.x.data(), in.y.data(), out.data(), n);
    hand_backward_sincos<Trig>(in.x.data(), in.y.data(), in.g.data(), gx.data(), gy.data(), n);
    benchmark::DoNotOptimize(gx.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n, 8);
}

/// fg::compile with policy `Policy` (the default, policy::cost, picks its plan by size).
template <class Policy>
void BM_coscos_fwd_bwd_policy(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  auto f = fg::compile<fg::backend::fused, Policy>(coscos);
  fg::tensor<float> x = in.x.detach().requires_grad(true), y = in.y.detach().requires_grad(true);
  for (auto _ : state) {
    x.zero_grad();
    y.zero_grad();
    fg::tensor<float> out = f(x, y);
    out.backward(in.g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  set_bytes(state, n, 8);
}

/// `Blocks`: the forward over blocks, one cosine per pass (`hand_forward_save_blocks`).
template <class Trig, bool Blocks = false>
void BM_coscos_fwd_bwd_hand_save(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  std::vector<float> out(static_cast<std::size_t>(n)), gx(out.size()), gy(out.size()), c1(out.size()), c2(out.size());
  for (auto _ : state) {
    if constexpr (Blocks) hand_forward_save_blocks<Trig>(in.x.data(), in.y.data(), out.data(), c1.data(), c2.data(), n);
    else hand_forward_save<Trig>(in.x.data(), in.y.data(), out.data(), c1.data(), c2.data(), n);
    hand_backward_save<Trig>(in.x.data(), in.y.data(), in.g.data(), c1.data(), c2.data(), gx.data(), gy.data(), n);
    benchmark::DoNotOptimize(gx.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n, 12);
}

void BM_coscos_fwd_bwd_eager(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  fg::tensor<float> x = in.x.detach().requires_grad(true), y = in.y.detach().requires_grad(true);
  for (auto _ : state) {
    x.zero_grad();
    y.zero_grad();
    fg::tensor<float> out = coscos(x, y);
    out.backward(in.g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  set_bytes(state, n, 8);
}

#if defined(FUSEGRAD_HAVE_EIGEN)
void BM_coscos_fwd_bwd_eigen(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  using A = Eigen::Map<const Eigen::ArrayXf>;
  A x(in.x.data(), n), y(in.y.data(), n), g(in.g.data(), n);
  Eigen::ArrayXf out(n), gx(n), gy(n);
  for (auto _ : state) {
    out = x.cos().cos() * y;
    gx = g * y * x.cos().sin() * x.sin();
    gy = g * x.cos().cos();
    benchmark::DoNotOptimize(gx.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n, 8);
}
#endif

// ---- x * y + z, forward (bandwidth) -----------------------------------------------------

void BM_xyz_fused(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  auto f = fg::compile([](auto x, auto y, auto z) { return x * y + z; });
  for (auto _ : state) {
    fg::tensor<float> out = f(in.x, in.y, in.z);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  set_bytes(state, n, 4);
}

void BM_xyz_hand(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    hand_xyz(in.x.data(), in.y.data(), in.z.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n, 4);
}

void BM_xyz_eager(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  for (auto _ : state) {
    fg::tensor<float> out = in.x * in.y + in.z;
    benchmark::DoNotOptimize(out.data_ptr());
  }
  set_bytes(state, n, 4);
}

void BM_xyz_copy(benchmark::State& state) {  // memcpy of 2N floats: 2N read + 2N written
  const long n = state.range(0);
  std::vector<float> src(static_cast<std::size_t>(2 * n), 1.0f), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n, 4);
}

#if defined(FUSEGRAD_HAVE_EIGEN)
void BM_xyz_eigen(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  using A = Eigen::Map<const Eigen::ArrayXf>;
  A x(in.x.data(), n), y(in.y.data(), n), z(in.z.data(), n);
  Eigen::ArrayXf out(n);
  for (auto _ : state) {
    out = x * y + z;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n, 4);
}
#endif

// ---- forward only: the run-time IR's tile program vs the compile-time fused kernel --------
//   BM_coscos_fwd/<variant>: fused (fg::compile), ir (the same function built on ir::value
//   once, lowered to a tile program once, run per iteration), hand.

void BM_coscos_fwd_fused(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  auto f = fg::compile(coscos);
  for (auto _ : state) {
    fg::tensor<float> out = f(in.x, in.y);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  set_bytes(state, n, 3);
}

void BM_coscos_fwd_ir(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  fg::ir::graph<float> g;
  const fg::ir::value<float> x{&g, g.add_input({n})}, y{&g, g.add_input({n})};
  const fg::detail::jit::program<float> prog(g, {coscos(x, y).id});
  const std::vector<fg::tensor<float>> args{in.x, in.y};
  for (auto _ : state) {
    auto out = prog.run(args);
    benchmark::DoNotOptimize(out[0].data_ptr());
  }
  set_bytes(state, n, 3);
}

void BM_coscos_fwd_hand(benchmark::State& state) {
  const long n = state.range(0);
  inputs in(n);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto _ : state) {
    hand_forward(in.x.data(), in.y.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n, 3);
}

template <bool Compiled>
void BM_forty_fwd_bwd(benchmark::State& state) {
  const long n = state.range(0);
  const auto cf = fg::compile(forty);
  fg::tensor<float> x = fg::randn<float>({n}, 1).requires_grad(true), y = fg::randn<float>({n}, 2).requires_grad(true),
                    z = fg::randn<float>({n}, 3).requires_grad(true);
  for (auto _ : state) {
    x.zero_grad();
    y.zero_grad();
    z.zero_grad();
    fg::tensor<float> out = Compiled ? cf(x, y, z) : forty(x, y, z);
    out.backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
}

void forty_sizes(benchmark::internal::Benchmark* b) {
  for (int e : {10, 14, 16, 20}) b->Arg(1L << e);
  b->Unit(benchmark::kMicrosecond);
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(10);  // the fixed cost of a call (compiled forward + backward at N = 10)
  for (int e = 10; e <= 24; e += 2) b->Arg(1L << e);
  b->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_coscos_fwd_bwd_policy<fg::policy::cost>)->Name("BM_coscos_fwd_bwd_fused")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand<xsimd_trig>)->Name("BM_coscos_fwd_bwd_hand")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand_sincos<xsimd_trig>)->Name("BM_coscos_fwd_bwd_hand_sincos")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand_sincos<lanes_trig>)->Name("BM_coscos_fwd_bwd_hand_sincos_lanes")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand_save<xsimd_trig>)->Name("BM_coscos_fwd_bwd_hand_save")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand<lanes_trig>)->Name("BM_coscos_fwd_bwd_hand_lanes")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand_save<lanes_trig>)->Name("BM_coscos_fwd_bwd_hand_save_lanes")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_hand_save<lanes_trig, true>)
    ->Name("BM_coscos_fwd_bwd_hand_save_blocks_lanes")
    ->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_policy<fg::policy::min_cut>)->Name("BM_coscos_fwd_bwd_fused_min_cut")->Apply(sizes);
BENCHMARK(BM_coscos_fwd_bwd_eager)->Apply(sizes);
#if defined(FUSEGRAD_HAVE_EIGEN)
BENCHMARK(BM_coscos_fwd_bwd_eigen)->Apply(sizes);
#endif
BENCHMARK(BM_coscos_fwd_fused)->Apply(sizes);
BENCHMARK(BM_coscos_fwd_ir)->Apply(sizes);
BENCHMARK(BM_coscos_fwd_hand)->Apply(sizes);
BENCHMARK(BM_forty_fwd_bwd<true>)->Name("BM_forty_fwd_bwd_fused")->Apply(forty_sizes);
BENCHMARK(BM_forty_fwd_bwd<false>)->Name("BM_forty_fwd_bwd_eager")->Apply(forty_sizes);
BENCHMARK(BM_xyz_fused)->Apply(sizes);
BENCHMARK(BM_xyz_hand)->Apply(sizes);
BENCHMARK(BM_xyz_copy)->Apply(sizes);
BENCHMARK(BM_xyz_eager)->Apply(sizes);
#if defined(FUSEGRAD_HAVE_EIGEN)
BENCHMARK(BM_xyz_eigen)->Apply(sizes);
#endif
