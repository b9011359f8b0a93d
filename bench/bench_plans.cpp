// How the save/recompute plans fare: forward + backward of three functions through fg::compile (the default
// cost-based plan, and AOTAutograd's min-cut for comparison), fg::jit and eager mode, beside the
// two hand-written loops a careful engineer would try — one that recomputes what the backward
// needs, one that saves it — at N = 10 and 2^10 ... 2^24 floats. The best hand loop at a size is the
// faster of the two.
//
//   cmake --preset bench && cmake --build build/bench --target bench_plans
//   FUSEGRAD_NUM_THREADS=1 build/bench/bench/bench_plans --benchmark_min_time=0.2
//   (add --benchmark_min_warmup_time=0.2 for steadier first repetitions)
//
// Keep the warm-up: at 2^24 a case runs one iteration in its minimum time, and without a
// warm-up that is the library's first call, whose every new buffer faults its pages in, against
// hand loops whose buffers were allocated and zeroed before the timed loop.
//
// Functions (the backward gets a given gradient g of the output's shape):
//   coscos  out = cos(cos(x)) * y
//   tanh10  h = x, then 10 times h = tanh(h * w) (w of x's shape); out = h
//   xyz     out = x * y + z
// Variants: compiled (fg::compile), compiled_min_cut, jit (fg::jit, traced every call; for the
// tanh chain also jit_once, with trace_once), eager, hand_recompute, hand_save.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "fusegrad/fusegrad.hpp"
#include "one_thread.hpp"
#include "hand_loops.hpp"

namespace fg = fusegrad;

namespace {
using namespace fusegrad_bench;
using tf = fg::tensor<float>;

auto coscos = [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; };
/// `tanh(h * w)` applied `K` times (a chain of distinct expression types at compile time).
template <int K, class H, class X>
auto tanh_chain(const H& h, const X& w) {
  if constexpr (K == 0) return h;
  else return tanh_chain<K - 1>(fg::tanh(h * w), w);
}
auto tanh10 = [](auto x, auto w) { return tanh_chain<10>(x, w); };
auto xyz = [](auto x, auto y, auto z) { return x * y + z; };

// ---- the hand loops of tanh10 -------------------------------------------------------------
constexpr int layers = 10;

__attribute__((noinline)) void tanh10_forward(const float* __restrict x, const float* __restrict w,
                                              float* __restrict out, long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    const B wv = B::load_unaligned(w + i);
    B h = B::load_unaligned(x + i);
    for (int k = 0; k < layers; ++k) h = xsimd::tanh(h * wv);
    h.store_unaligned(out + i);
  }
  for (; i < n; ++i) {
    float h = x[i];
    for (int k = 0; k < layers; ++k) h = std::tanh(h * w[i]);
    out[i] = h;
  }
}
/// Recomputes the layers' values in registers, then runs the chain rule back.
__attribute__((noinline)) void tanh10_backward_recompute(const float* __restrict x, const float* __restrict w,
                                                         const float* __restrict g, float* __restrict gx,
                                                         float* __restrict gw, long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    const B wv = B::load_unaligned(w + i);
    std::array<B, layers + 1> h;
    h[0] = B::load_unaligned(x + i);
    for (int k = 0; k < layers; ++k) h[k + 1] = xsimd::tanh(h[k] * wv);
    B gh = B::load_unaligned(g + i), gwv(0.0f);
    for (int k = layers; k-- > 0;) {
      const B d = gh * (B(1.0f) - h[k + 1] * h[k + 1]);
      gwv += d * h[k];
      gh = d * wv;
    }
    gh.store_unaligned(gx + i);
    gwv.store_unaligned(gw + i);
  }
  for (; i < n; ++i) {
    float h[layers + 1];
    h[0] = x[i];
    for (int k = 0; k < layers; ++k) h[k + 1] = std::tanh(h[k] * w[i]);
    float gh = g[i], gwv = 0;
    for (int k = layers; k-- > 0;) {
      const float d = gh * (1.0f - h[k + 1] * h[k + 1]);
      gwv += d * h[k];
      gh = d * w[i];
    }
    gx[i] = gh;
    gw[i] = gwv;
  }
}
/// The forward that saves every layer's value (hs[k]: layer k + 1; hs[layers - 1] is out).
/// Layer by layer over blocks of 256 elements (each layer's block is read back from L1): the
/// ten tanh of one element depend on each other, so an element-major loop waits on each
/// tanh's latency (several times slower on random inputs, where xsimd::tanh takes both of its
/// paths).
__attribute__((noinline)) void tanh10_forward_save(const float* __restrict x, const float* __restrict w,
                                                   float* const* hs, long n) {
  constexpr long block = 256;
  for (long i0 = 0; i0 < n; i0 += block) {
    const long m = std::min(block, n - i0);
    for (int k = 0; k < layers; ++k) {
      const float* __restrict prev = (k ? hs[k - 1] : x) + i0;
      float* __restrict out = hs[k] + i0;
      const float* __restrict wb = w + i0;
      long i = 0;
      for (; i + W <= m; i += W)
        xsimd::tanh(B::load_unaligned(prev + i) * B::load_unaligned(wb + i)).store_unaligned(out + i);
      for (; i < m; ++i) out[i] = std::tanh(prev[i] * wb[i]);
    }
  }
}
__attribute__((noinline)) void tanh10_backward_save(const float* __restrict x, const float* __restrict w,
                                                    const float* const* hs, const float* __restrict g,
                                                    float* __restrict gx, float* __restrict gw, long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    const B wv = B::load_unaligned(w + i);
    B gh = B::load_unaligned(g + i), gwv(0.0f);
    for (int k = layers; k-- > 0;) {
      const B hk1 = B::load_unaligned(hs[k] + i), hk = k ? B::load_unaligned(hs[k - 1] + i) : B::load_unaligned(x + i);
      const B d = gh * (B(1.0f) - hk1 * hk1);
      gwv += d * hk;
      gh = d * wv;
    }
    gh.store_unaligned(gx + i);
    gwv.store_unaligned(gw + i);
  }
  for (; i < n; ++i) {
    float gh = g[i], gwv = 0;
    for (int k = layers; k-- > 0;) {
      const float hk1 = hs[k][i], hk = k ? hs[k - 1][i] : x[i];
      const float d = gh * (1.0f - hk1 * hk1);
      gwv += d * hk;
      gh = d * w[i];
    }
    gx[i] = gh;
    gw[i] = gwv;
  }
}

// ---- x * y + z ----------------------------------------------------------------------------
__attribute__((noinline)) void xyz_backward(const float* __restrict x, const float* __restrict y,
                                            const float* __restrict g, float* __restrict gx, float* __restrict gy,
                                            float* __restrict gz, long n) {
  for (long i = 0; i < n; ++i) {
    gx[i] = g[i] * y[i];
    gy[i] = g[i] * x[i];
    gz[i] = g[i];
  }
}

// ---- the cases ----------------------------------------------------------------------------
struct data {
  explicit data(long n)
      : x(fg::randn<float>({n}, 1)),
        y(fg::randn<float>({n}, 2)),
        z(fg::randn<float>({n}, 3)),
        w(fg::randn<float>({n}, 5) * 0.5f + 1.0f),
        g(fg::randn<float>({n}, 4)) {}
  tf x, y, z, w, g;
};

void per_element(benchmark::State& state, long n) {
  state.counters["ns_per_elem"] = benchmark::Counter(static_cast<double>(n) * static_cast<double>(state.iterations()),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

/// fwd + bwd of `f` (a compiled or jitted function, or the eager lambda) on leaves made of `ins`.
template <class F, class... X>
void library_case(benchmark::State& state, F f, const tf& g, const X&... ins) {
  std::array<tf, sizeof...(X)> leaves{ins.detach().requires_grad(true)...};
  const auto step = [&] {
    for (auto& l : leaves) l.zero_grad();
    tf out = [&]<std::size_t... I>(std::index_sequence<I...>) { return tf(f(leaves[I]...)); }
    (std::index_sequence_for<X...>{});
    out.backward(g);
    benchmark::DoNotOptimize(leaves[0].grad().data_ptr());
  };
  step();  // untimed: a jitted function's first call traces (and, with native code, compiles)
  for (auto _ : state) step();
  per_element(state, g.numel());
}

template <class Policy>
void coscos_compiled(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, fg::compile<fg::backend::fused, Policy>(coscos), d.g, d.x, d.y);
}
void coscos_jit(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, fg::jit(coscos), d.g, d.x, d.y);
}
void coscos_eager(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, coscos, d.g, d.x, d.y);
}
void coscos_hand_recompute(benchmark::State& s) {
  const long n = s.range(0);
  data d(n);
  std::vector<float> out(static_cast<std::size_t>(n)), gx(out.size()), gy(out.size());
  for (auto _ : s) {
    hand_forward(d.x.data(), d.y.data(), out.data(), n);
    hand_backward(d.x.data(), d.y.data(), d.g.data(), gx.data(), gy.data(), n);
    benchmark::ClobberMemory();
  }
  per_element(s, n);
}
void coscos_hand_save(benchmark::State& s) {
  const long n = s.range(0);
  data d(n);
  std::vector<float> out(static_cast<std::size_t>(n)), gx(out.size()), gy(out.size()), c1(out.size()), c2(out.size());
  for (auto _ : s) {
    hand_forward_save(d.x.data(), d.y.data(), out.data(), c1.data(), c2.data(), n);
    hand_backward_save(d.x.data(), d.y.data(), d.g.data(), c1.data(), c2.data(), gx.data(), gy.data(), n);
    benchmark::ClobberMemory();
  }
  per_element(s, n);
}

template <class Policy>
void tanh10_compiled(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, fg::compile<fg::backend::fused, Policy>(tanh10), d.g, d.x, d.w);
}
void tanh10_jit(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, fg::jit(tanh10), d.g, d.x, d.w);
}
void tanh10_jit_once(benchmark::State& s) {  // a hit replays the programs without tracing
  data d(s.range(0));
  library_case(s, fg::jit(tanh10, {.trace_once = true}), d.g, d.x, d.w);
}
void tanh10_eager(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, tanh10, d.g, d.x, d.w);
}
void tanh10_hand_recompute(benchmark::State& s) {
  const long n = s.range(0);
  data d(n);
  std::vector<float> out(static_cast<std::size_t>(n)), gx(out.size()), gw(out.size());
  for (auto _ : s) {
    tanh10_forward(d.x.data(), d.w.data(), out.data(), n);
    tanh10_backward_recompute(d.x.data(), d.w.data(), d.g.data(), gx.data(), gw.data(), n);
    benchmark::ClobberMemory();
  }
  per_element(s, n);
}
void tanh10_hand_save(benchmark::State& s) {
  const long n = s.range(0);
  data d(n);
  // The saved layers in one buffer, each starting 17 cache lines past the last one's end: ten
  // separate allocations of one size start at the same offset in a page, and the backward,
  // which reads all ten at one index, then loses cache ways and stalls on 4 KiB aliasing
  // (docs/performance.md, the tanh chain, measured beside this layout).
  const long stride = n + 17 * 16;
  std::vector<float> hs(static_cast<std::size_t>(stride * layers));
  std::array<float*, layers> hp{};
  for (int k = 0; k < layers; ++k) hp[static_cast<std::size_t>(k)] = hs.data() + k * stride;
  std::vector<float> gx(static_cast<std::size_t>(n)), gw(gx.size());
  for (auto _ : s) {
    tanh10_forward_save(d.x.data(), d.w.data(), hp.data(), n);
    tanh10_backward_save(d.x.data(), d.w.data(), hp.data(), d.g.data(), gx.data(), gw.data(), n);
    benchmark::ClobberMemory();
  }
  per_element(s, n);
}

void xyz_compiled(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, fg::compile(xyz), d.g, d.x, d.y, d.z);
}
void xyz_jit(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, fg::jit(xyz), d.g, d.x, d.y, d.z);
}
void xyz_eager(benchmark::State& s) {
  data d(s.range(0));
  library_case(s, xyz, d.g, d.x, d.y, d.z);
}
void xyz_hand(benchmark::State& s) {
  const long n = s.range(0);
  data d(n);
  std::vector<float> out(static_cast<std::size_t>(n)), gx(out.size()), gy(out.size()), gz(out.size());
  for (auto _ : s) {
    hand_xyz(d.x.data(), d.y.data(), d.z.data(), out.data(), n);
    xyz_backward(d.x.data(), d.y.data(), d.g.data(), gx.data(), gy.data(), gz.data(), n);
    benchmark::ClobberMemory();
  }
  per_element(s, n);
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(10);  // where the fixed cost of a call is all there is
  for (int e = 10; e <= 24; e += 2) b->Arg(1L << e);
  b->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(coscos_compiled<fg::policy::cost>)->Name("coscos/compiled")->Apply(sizes);
BENCHMARK(coscos_compiled<fg::policy::min_cut>)->Name("coscos/compiled_min_cut")->Apply(sizes);
BENCHMARK(coscos_jit)->Name("coscos/jit")->Apply(sizes);
BENCHMARK(coscos_eager)->Name("coscos/eager")->Apply(sizes);
BENCHMARK(coscos_hand_recompute)->Name("coscos/hand_recompute")->Apply(sizes);
BENCHMARK(coscos_hand_save)->Name("coscos/hand_save")->Apply(sizes);
BENCHMARK(tanh10_compiled<fg::policy::cost>)->Name("tanh10/compiled")->Apply(sizes);
BENCHMARK(tanh10_compiled<fg::policy::min_cut>)->Name("tanh10/compiled_min_cut")->Apply(sizes);
BENCHMARK(tanh10_jit)->Name("tanh10/jit")->Apply(sizes);
BENCHMARK(tanh10_jit_once)->Name("tanh10/jit_once")->Apply(sizes);
BENCHMARK(tanh10_eager)->Name("tanh10/eager")->Apply(sizes);
BENCHMARK(tanh10_hand_recompute)->Name("tanh10/hand_recompute")->Apply(sizes);
BENCHMARK(tanh10_hand_save)->Name("tanh10/hand_save")->Apply(sizes);
BENCHMARK(xyz_compiled)->Name("xyz/compiled")->Apply(sizes);
BENCHMARK(xyz_jit)->Name("xyz/jit")->Apply(sizes);
BENCHMARK(xyz_eager)->Name("xyz/eager")->Apply(sizes);
BENCHMARK(xyz_hand)->Name("xyz/hand")->Apply(sizes);
