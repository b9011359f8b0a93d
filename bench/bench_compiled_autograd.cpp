// Compiled autograd: the backward captured at run time beside the eager engine and a
// hand-written loop.
//
//   cmake --preset bench && cmake --build --preset bench --target bench_compiled_autograd
//   ./build/bench/bench/bench_compiled_autograd --benchmark_min_time=0.2   (figures: docs/performance.md)
//
// Every case times the backward only: the tape is built once, and each iteration runs
// `loss.backward({.retain_graph = true})` after clearing the leaves' gradients.
//
//   BM_chain_backward/<variant>/N   a 20-layer pointwise chain h <- tanh(h * w_i), loss = sum(h),
//       with x and the 20 weights w_i (N elements each) requiring grad:
//       eager     the eager engine: 20 TanhBackward + 20 MulBackward nodes, each a pass over memory
//       compiled  compiled autograd (fused backend): a cache hit collects the saved tensors in
//                 the key walk and runs the captured tile program on them (no rule runs)
//       hand_saved  one hand-written xsimd pass over the saved activations the tape holds,
//                 writing the 21 gradients (62 tensors streamed at once)
//       hand_saved_blocked  the same, in blocks of 4096 elements layer by layer (four tensors
//                 streamed at a time, the block's running gradient in L1): the faster of the
//                 two from memory, the reference for the captured program
//       hand_saved_split  the blocked pass written as the captured program runs it: per
//                 block of 16384 and layer, three loops (one per instruction) through two block
//                 buffers: what instruction-by-instruction loops cost, dispatch aside
//       hand      one hand-written xsimd pass that recomputes the chain per element from x
//                 and the weights (fewer bytes, 20 tanh per element: compute-bound)
//   BM_mlp_backward/<variant>/N   a 3-layer MLP, width 64, batch N / 64: linear, tanh, linear,
//       tanh, linear(64, 1), sum. Its matmul and transpose backwards are `call` nodes of the
//       one captured graph; the eager engine is the reference.
//   BM_key_lookup/K   the cache key of a K-node tape (a chain of K - 2 multiplications, a sum,
//       AccumulateGrad) built and looked up (a hit), its saved tensors collected in the same
//       walk: the fixed cost compiled autograd adds to a backward before the captured graph
//       runs. Goal: <= 30 ns per node at K = 101.
//   BM_linear_step/<variant>   a Linear(10, 10) training step: sum(linear(x)) for x of
//       10 elements, backward, SGD step.
//   BM_tiny_backward/<variant>   the 20-layer chain at N = 16: the whole per-backward overhead.
//   BM_scaled_step/<variant>/N   forward and backward of sum(tanh(x * w) * k) where k changes
//       every step (a decaying scale): compiled autograd's key does not hold k (it is an input
//       of the captured graph), so every step after the first is a hit.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "fusegrad/fusegrad.hpp"
#include "one_thread.hpp"
#include "hand_loops.hpp"

namespace fg = fusegrad;

namespace {
using namespace fusegrad_bench;

constexpr int layers = 20;

/// The chain's leaves and its tape.
struct chain {
  explicit chain(long n) : x(fg::randn<float>({n}, 1).requires_grad(true)) {
    for (int i = 0; i < layers; ++i)
      w.push_back(
          (fg::randn<float>({n}, 10 + static_cast<std::uint64_t>(i)) * 0.5f + 1.0f).detach().requires_grad(true));
    fg::tensor<float> h = x;
    acts.push_back(x);
    for (const auto& wi : w) acts.push_back(h = fg::tanh(h * wi));
    loss = fg::sum(h);
  }
  void zero_grad() {
    x.zero_grad();
    for (auto& wi : w) wi.zero_grad();
  }
  fg::tensor<float> x;
  std::vector<fg::tensor<float>> w;
  std::vector<fg::tensor<float>> acts;  ///< x and the 20 tanh outputs (what the tape saves)
  fg::tensor<float> loss;
};

/// The chain's backward by hand from the saved activations, as the tape holds them: one pass
/// reading x, the weights and the activations, writing the 21 gradients (the memory-bound
/// optimum for this tape; no transcendental recomputed).
__attribute__((noinline)) void hand_chain_backward_saved(const float* const* act, const float* const* w,
                                                         float* __restrict gx, float* const* gw, long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    B g(1.0f);
    for (int l = layers; l-- > 0;) {
      const B a = B::load_unaligned(act[l + 1] + i);
      const B d = g * (B(1.0f) - a * a);
      (d * B::load_unaligned(act[l] + i)).store_unaligned(gw[l] + i);
      g = d * B::load_unaligned(w[l] + i);
    }
    g.store_unaligned(gx + i);
  }
  for (; i < n; ++i) {
    float g = 1.0f;
    for (int l = layers; l-- > 0;) {
      const float d = g * (1.0f - act[l + 1][i] * act[l + 1][i]);
      gw[l][i] = d * act[l][i];
      g = d * w[l][i];
    }
    gx[i] = g;
  }
}

/// The same pass over the saved activations in blocks of `block` elements, layer by layer: each
/// layer's loop streams four tensors (its output, its input, its weight, its weight's gradient)
/// while the running gradient of the block stays in L1. With 62 tensors streamed at once (the
/// single pass above) the memory system runs far below its rate; this is the faster hand loop
/// from memory (figures: docs/performance.md).
__attribute__((noinline)) void hand_chain_backward_saved_blocked(const float* const* act, const float* const* w,
                                                                 float* __restrict gx, float* const* gw, long n) {
  constexpr long block = 4096;
  alignas(64) static thread_local float g[block];
  for (long i0 = 0; i0 < n; i0 += block) {
    const long m = std::min(block, n - i0);
    std::fill(g, g + m, 1.0f);
    for (int l = layers; l-- > 0;) {
      const float* __restrict a1 = act[l + 1] + i0;
      const float* __restrict a0 = act[l] + i0;
      const float* __restrict wl = w[l] + i0;
      float* __restrict o = gw[l] + i0;
      long i = 0;
      for (; i + W <= m; i += W) {
        const B a = B::load_unaligned(a1 + i);
        const B d = B::load_aligned(g + i) * (B(1.0f) - a * a);
        (d * B::load_unaligned(a0 + i)).store_unaligned(o + i);
        (d * B::load_unaligned(wl + i)).store_aligned(g + i);
      }
      for (; i < m; ++i) {
        const float d = g[i] * (1.0f - a1[i] * a1[i]);
        o[i] = d * a0[i];
        g[i] = d * wl[i];
      }
    }
    std::copy(g, g + m, gx + i0);
  }
}

/// The same pass over the saved activations with the captured program's loop structure, by
/// hand: blocks of 16384 elements, and per layer three loops, as the program's three
/// instructions (tanh_backward into a block buffer, the weight's gradient, the running
/// gradient into a second block buffer), each streaming one or two tensors from memory. Not a
/// reference to beat: it tells the cost of running a graph instruction by instruction (an
/// interpreter's loops) from the cost of the captured program's own dispatch.
template <int K>
__attribute__((noinline)) void hand_pass(const float* __restrict a, const float* __restrict b, float* __restrict o,
                                         long m) {
  long i = 0;
  for (; i + W <= m; i += W) {
    const B x = B::load_unaligned(a + i), y = B::load_unaligned(b + i);
    (K == 0 ? x * (B(1.0f) - y * y) : x * y).store_unaligned(o + i);
  }
  for (; i < m; ++i) o[i] = K == 0 ? a[i] * (1.0f - b[i] * b[i]) : a[i] * b[i];
}
__attribute__((noinline)) void hand_chain_backward_saved_split(const float* const* act, const float* const* w,
                                                               float* __restrict gx, float* const* gw, long n) {
  constexpr long block = 16384;
  static thread_local std::vector<float> gv(block), dv(block);
  float* const g = gv.data();
  float* const d = dv.data();
  for (long i0 = 0; i0 < n; i0 += block) {
    const long m = std::min(block, n - i0);
    std::fill(g, g + m, 1.0f);
    for (int l = layers; l-- > 0;) {
      hand_pass<0>(g, act[l + 1] + i0, d, m);
      hand_pass<1>(d, act[l] + i0, gw[l] + i0, m);
      hand_pass<1>(d, w[l] + i0, l == 0 ? gx + i0 : g, m);
    }
  }
}

/// The chain's backward by hand: per SIMD batch, the forward recomputed into registers, then
/// the gradients from the last layer down.
__attribute__((noinline)) void hand_chain_backward(const float* __restrict x, const float* const* w,
                                                   float* __restrict gx, float* const* gw, long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    B h[layers + 1];
    h[0] = B::load_unaligned(x + i);
    for (int l = 0; l < layers; ++l) h[l + 1] = xsimd::tanh(h[l] * B::load_unaligned(w[l] + i));
    B g(1.0f);
    for (int l = layers; l-- > 0;) {
      const B d = g * (B(1.0f) - h[l + 1] * h[l + 1]);
      (d * h[l]).store_unaligned(gw[l] + i);
      g = d * B::load_unaligned(w[l] + i);
    }
    g.store_unaligned(gx + i);
  }
  for (; i < n; ++i) {
    float h[layers + 1];
    h[0] = x[i];
    for (int l = 0; l < layers; ++l) h[l + 1] = std::tanh(h[l] * w[l][i]);
    float g = 1.0f;
    for (int l = layers; l-- > 0;) {
      const float d = g * (1.0f - h[l + 1] * h[l + 1]);
      gw[l][i] = d * h[l];
      g = d * w[l][i];
    }
    gx[i] = g;
  }
}

void set_bytes(benchmark::State& state, long n) {
  // What the backward must at least move: x and the weights read, their gradients written.
  state.SetBytesProcessed(state.iterations() * n * static_cast<long>(sizeof(float)) * (2 * layers + 2));
}

/// Times `m.loss.backward({.retain_graph = true})` after clearing the leaves' gradients, with
/// compiled autograd set by a `Scope` made from `scope_args` (`disable`, or `enable` with a
/// backend). Two untimed backwards first: the capture and compile (compiled autograd) and the
/// first touch of freshly allocated gradient buffers are not the steady state measured.
template <class Scope, class Model, class... ScopeArgs>
void time_backward(benchmark::State& state, Model& m, ScopeArgs... scope_args) {
  Scope scope(scope_args...);
  auto step = [&] {
    m.zero_grad();
    m.loss.backward({.retain_graph = true});
  };
  step();
  step();
  for (auto _ : state) {
    step();
    benchmark::ClobberMemory();
  }
}
using eager_scope = fg::compiled_autograd::disable;
using compiled_scope = fg::compiled_autograd::enable;

/// The chain's backward by a hand-written kernel `k(activations, weights, gx, gw, n)` into
/// preallocated gradients (two untimed calls first, as above).
template <class Kernel>
void time_hand(benchmark::State& state, Kernel k) {
  const long n = state.range(0);
  chain c(n);
  std::vector<const float*> w, act;
  std::vector<std::vector<float>> gw(layers, std::vector<float>(static_cast<std::size_t>(n)));
  std::vector<float*> gwp;
  for (int l = 0; l < layers; ++l) {
    w.push_back(c.w[static_cast<std::size_t>(l)].data_ptr());
    gwp.push_back(gw[static_cast<std::size_t>(l)].data());
  }
  for (const auto& a : c.acts) act.push_back(a.data_ptr());
  std::vector<float> gx(static_cast<std::size_t>(n));
  k(act.data(), w.data(), gx.data(), gwp.data(), n);
  k(act.data(), w.data(), gx.data(), gwp.data(), n);
  for (auto _ : state) {
    k(act.data(), w.data(), gx.data(), gwp.data(), n);
    benchmark::DoNotOptimize(gx.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n);
}

void BM_chain_backward_eager(benchmark::State& state) {
  chain c(state.range(0));
  time_backward<eager_scope>(state, c);
  set_bytes(state, state.range(0));
}
void BM_chain_backward_compiled(benchmark::State& state) {
  chain c(state.range(0));
  time_backward<compiled_scope>(state, c, fg::backend::fused{});
  set_bytes(state, state.range(0));
}
void BM_chain_backward_hand_saved(benchmark::State& state) { time_hand(state, hand_chain_backward_saved); }
void BM_chain_backward_hand_saved_blocked(benchmark::State& state) {
  time_hand(state, hand_chain_backward_saved_blocked);
}
void BM_chain_backward_hand_saved_split(benchmark::State& state) { time_hand(state, hand_chain_backward_saved_split); }
void BM_chain_backward_hand(benchmark::State& state) {
  time_hand(state, [](const float* const* act, const float* const* w, float* gx, float* const* gw, long n) {
    hand_chain_backward(act[0], w, gx, gw, n);  // act[0] is x: the rest is recomputed
  });
}

/// A 3-layer MLP of width 64 on a batch of N / 64 rows.
struct mlp {
  explicit mlp(long n) : x(fg::randn<float>({n / 64, 64}, 3)) {
    fg::tensor<float> h = fg::tanh(l1(x));
    h = fg::tanh(l2(h));
    loss = fg::sum(l3(h));
  }
  void zero_grad() {
    for (auto* l : {&l1, &l2, &l3}) {
      l->weight.zero_grad();
      l->bias.zero_grad();
    }
  }
  fg::nn::linear<float> l1{64, 64, true, 11}, l2{64, 64, true, 12}, l3{64, 1, true, 13};
  fg::tensor<float> x;
  fg::tensor<float> loss;
};

void BM_mlp_backward_eager(benchmark::State& state) {
  mlp m(state.range(0));
  time_backward<eager_scope>(state, m);
}
void BM_mlp_backward_compiled(benchmark::State& state) {
  mlp m(state.range(0));
  time_backward<compiled_scope>(state, m, fg::backend::fused{});
}

void BM_key_lookup(benchmark::State& state) {
  fg::compiled_autograd::reset();
  fg::tensor<float> x = fg::randn<float>({4}, 5).requires_grad(true);
  fg::tensor<float> h = x;
  for (long k = 0; k + 2 < state.range(0); ++k) h = h * 1.001f;
  const std::vector<fg::tensor<float>> roots{fg::sum(h)};
  namespace ca = fg::compiled_autograd::detail;
  ca::lookup(ca::make_key(roots));  // the miss that stores the key
  for (auto _ : state) benchmark::DoNotOptimize(ca::lookup(ca::make_key(roots)));
  state.counters["nodes"] = static_cast<double>(ca::make_key(roots).size());
  fg::compiled_autograd::reset();
}

/// Times a whole training step (two untimed warm-up steps first: the capture and the first
/// hit), with compiled autograd on (fused backend) when `compiled`.
template <class Step>
void time_step(benchmark::State& state, bool compiled, Step step) {
  std::optional<fg::compiled_autograd::enable> on;
  if (compiled) on.emplace(fg::backend::fused{});
  step();
  step();
  for (auto _ : state) {
    step();
    benchmark::ClobberMemory();
  }
}

/// A small training step: `loss = sum(linear(x))` for a Linear(10, 10) and x of 10
/// elements, its backward, an SGD step (forward, backward and update all timed).
void linear_step(benchmark::State& state, bool compiled) {
  fg::nn::linear<float> lin(10, 10, true, 7);
  fg::nn::sgd<float> opt(lin.parameters(), 1e-3f);
  const auto x = fg::randn<float>({10}, 8);
  time_step(state, compiled, [&] {
    for (auto& p : lin.parameters()) p.zero_grad();
    fg::sum(lin(x)).backward();
    opt.step();
  });
}
void BM_linear_step_eager(benchmark::State& state) { linear_step(state, false); }
void BM_linear_step_compiled(benchmark::State& state) { linear_step(state, true); }

/// A step whose rule holds a scalar that changes every step (a decaying scale, as a learning
/// rate or a temperature would): loss = sum(tanh(x * w) * k_t) with k_t = 1 / (1 + t / 1000),
/// forward and backward timed, x and w of N elements.
void scaled_step(benchmark::State& state, bool compiled) {
  const long n = state.range(0);
  const auto x = fg::randn<float>({n}, 41);
  auto w = fg::randn<float>({n}, 42).requires_grad(true);
  long t = 0;
  time_step(state, compiled, [&] {
    w.zero_grad();
    const float k = 1.0f / (1.0f + static_cast<float>(t++) * 1e-3f);
    fg::sum(fg::tanh(x * w) * k).backward();
  });
}
void BM_scaled_step_eager(benchmark::State& state) { scaled_step(state, false); }
void BM_scaled_step_compiled(benchmark::State& state) { scaled_step(state, true); }

void BM_tiny_backward_eager(benchmark::State& state) {
  chain c(16);
  time_backward<eager_scope>(state, c);
}
void BM_tiny_backward_compiled(benchmark::State& state) {
  chain c(16);
  time_backward<compiled_scope>(state, c, fg::backend::fused{});
}

/// The tiny chain's backward as a new graph after compiled autograd's 64 compiles are spent
/// (64 other graphs first): it runs eagerly, and must cost about the eager engine's time (it
/// was traced again on each backward: 3 to 4 times that).
void BM_past_limit_backward_compiled(benchmark::State& state) {
  fg::compiled_autograd::reset();
  {
    fg::compiled_autograd::enable on(fg::backend::fused{});
    const auto x = fg::randn<float>({16}, 1).requires_grad(true);
    for (int len = 1; len <= 64; ++len) {
      fg::tensor<float> h = x;
      for (int i = 0; i < len; ++i) h = fg::exp(h * 0.5f);
      fg::sum(h).backward();
    }
  }
  chain c(16);
  time_backward<compiled_scope>(state, c, fg::backend::fused{});
  fg::compiled_autograd::reset();
}

}  // namespace

// Eager and compiled side by side, size by size (the ratios compare neighbours in one run).
BENCHMARK(BM_chain_backward_eager)->Arg(1 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_compiled)->Arg(1 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_hand_saved)->Arg(1 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_hand_saved_blocked)->Arg(1 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_eager)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_compiled)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_hand_saved)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_hand_saved_blocked)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_hand_saved_split)->Arg(1 << 10)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_chain_backward_hand)->Arg(1 << 10)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_backward_eager)->Arg(1 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_backward_compiled)->Arg(1 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_backward_eager)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_backward_compiled)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_linear_step_eager)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_linear_step_compiled)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_key_lookup)->Arg(11)->Arg(101)->Arg(1001)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_scaled_step_eager)->Arg(1 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_scaled_step_compiled)->Arg(1 << 10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_tiny_backward_eager)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_tiny_backward_compiled)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_past_limit_backward_compiled)->Unit(benchmark::kMicrosecond);
