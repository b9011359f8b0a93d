// The functional transforms against hand-written loops (docs/performance.md, "Functional
// transforms"). Each case has its hand-written reference beside it; compare ratios within one
// run. Header-only (<fusegrad/functional.hpp>), no tensors.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <fusegrad/eager/factories.hpp>
#include <fusegrad/functional.hpp>
#include <fusegrad/functional/tensor.hpp>
#include "one_thread.hpp"

namespace fg = fusegrad;

namespace {

// ---- value_and_grad of sum(cos(cos(x)) * y), float, caller-provided outputs ----------------

auto ccy = [](const auto& x, const auto& y) { return fg::sum(fg::cos(fg::cos(x)) * y); };

using BF = xsimd::batch<float>;
constexpr long WF = static_cast<long>(BF::size);

/// The hand loop: one pass, xsimd, value accumulated in a register, gradients stored; the
/// last partial batch through the same SIMD code, padded (a scalar std::cos tail measured
/// slower at N = 10).
__attribute__((noinline)) float hand_ccy(const float* __restrict x, const float* __restrict y, float* __restrict gx,
                                         float* __restrict gy, long n) {
  BF acc(0.0f);
  long i = 0;
  auto body = [&](BF xv, BF yv, BF& v, BF& dx, BF& dy) {
    const BF c1 = xsimd::cos(xv), c2 = xsimd::cos(c1);
    v = c2 * yv;
    dx = yv * xsimd::sin(c1) * xsimd::sin(xv);
    dy = c2;
  };
  for (; i + WF <= n; i += WF) {
    BF v, dx, dy;
    body(BF::load_unaligned(x + i), BF::load_unaligned(y + i), v, dx, dy);
    acc += v;
    dx.store_unaligned(gx + i);
    dy.store_unaligned(gy + i);
  }
  if (i < n) {
    alignas(64) float tx[WF] = {}, ty[WF] = {}, tv[WF], tdx[WF], tdy[WF];
    for (long l = 0; l < n - i; ++l) tx[l] = x[i + l], ty[l] = y[i + l];
    BF v, dx, dy;
    body(BF::load_aligned(tx), BF::load_aligned(ty), v, dx, dy);
    v.store_aligned(tv), dx.store_aligned(tdx), dy.store_aligned(tdy);
    for (long l = 0; l < n - i; ++l) gx[i + l] = tdx[l], gy[i + l] = tdy[l];
    float s = xsimd::hadd(acc);
    for (long l = 0; l < n - i; ++l) s += tv[l];
    return s;
  }
  return xsimd::hadd(acc);
}

/// A second hand loop: the body written out, two accumulators, a scalar std::cos tail.
__attribute__((noinline)) float hand_ccy2(const float* __restrict x, const float* __restrict y, float* __restrict gx,
                                          float* __restrict gy, long n) {
  BF acc0(0.0f), acc1(0.0f);
  long i = 0;
  for (; i + 2 * WF <= n; i += 2 * WF) {
    const BF x0 = BF::load_unaligned(x + i), x1 = BF::load_unaligned(x + i + WF);
    const BF y0 = BF::load_unaligned(y + i), y1 = BF::load_unaligned(y + i + WF);
    const BF a0 = xsimd::cos(x0), a1 = xsimd::cos(x1), b0 = xsimd::cos(a0), b1 = xsimd::cos(a1);
    acc0 = xsimd::fma(b0, y0, acc0), acc1 = xsimd::fma(b1, y1, acc1);
    (y0 * xsimd::sin(a0) * xsimd::sin(x0)).store_unaligned(gx + i);
    (y1 * xsimd::sin(a1) * xsimd::sin(x1)).store_unaligned(gx + i + WF);
    b0.store_unaligned(gy + i), b1.store_unaligned(gy + i + WF);
  }
  float s = xsimd::hadd(acc0 + acc1);
  for (; i < n; ++i) {
    const float a = std::cos(x[i]), b = std::cos(a);
    s += b * y[i], gx[i] = y[i] * std::sin(a) * std::sin(x[i]), gy[i] = b;
  }
  return s;
}

/// The first hand loop with fusegrad's lanes::cos/sin (each element's value independent of
/// its SIMD batch neighbours, core/simd.hpp), which the library's ops use.
__attribute__((noinline)) float hand_ccy_lanes(const float* __restrict x, const float* __restrict y,
                                               float* __restrict gx, float* __restrict gy, long n) {
  namespace L = fusegrad::lanes;
  BF acc(0.0f);
  long i = 0;
  for (; i + WF <= n; i += WF) {
    const BF xv = BF::load_unaligned(x + i), yv = BF::load_unaligned(y + i);
    const BF c1 = L::cos(xv), c2 = L::cos(c1);
    acc += c2 * yv;
    (yv * L::sin(c1) * L::sin(xv)).store_unaligned(gx + i);
    c2.store_unaligned(gy + i);
  }
  float s = xsimd::hadd(acc);
  if (i < n) {
    alignas(64) float tx[WF] = {}, ty[WF] = {}, tv[WF], tdx[WF], tdy[WF];
    for (long l = 0; l < n - i; ++l) tx[l] = x[i + l], ty[l] = y[i + l];
    const BF xv = BF::load_aligned(tx), yv = BF::load_aligned(ty), c1 = L::cos(xv), c2 = L::cos(c1);
    (c2 * yv).store_aligned(tv), (yv * L::sin(c1) * L::sin(xv)).store_aligned(tdx), c2.store_aligned(tdy);
    for (long l = 0; l < n - i; ++l) s += tv[l], gx[i + l] = tdx[l], gy[i + l] = tdy[l];
  }
  return s;
}

/// The masked load (masked lanes read as 0) or store of a float batch `V`'s first `n` lanes at
/// its width: AVX-512 (16 floats) or AVX2 (8); element by element through a buffer at another
/// width. Written here, not taken from fusegrad, so that the reference loops do not change with
/// the library they are compared with. (Templates: the branch of the other width is discarded.)
template <class V>
[[gnu::always_inline]] inline V masked_load(const float* p, long n) {
  constexpr long W = static_cast<long>(V::size);
#if defined(__AVX512F__)
  if constexpr (W == 16) return V(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p));
#endif
#if defined(__AVX2__)
  if constexpr (W == 8)
    return V(_mm256_maskload_ps(
        p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))));
#endif
  alignas(64) float t[W] = {};
  for (long l = 0; l < n; ++l) t[l] = p[l];
  return V::load_aligned(t);
}
template <class V>
[[gnu::always_inline]] inline void masked_store(float* p, const V& v, long n) {
  constexpr long W = static_cast<long>(V::size);
#if defined(__AVX512F__)
  if constexpr (W == 16) return _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
#endif
#if defined(__AVX2__)
  if constexpr (W == 8)
    return _mm256_maskstore_ps(
        p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
#endif
  alignas(64) float t[W];
  v.store_aligned(t);
  for (long l = 0; l < n; ++l) p[l] = t[l];
}

/// The loop of the masked hand loops below: `body(x, y, dx)` (returning dy) on every full
/// batch, then on the last, partial batch through masked loads and stores (masked lanes load
/// as 0: y = 0 there adds 0 to the sum).
template <class Body>
[[gnu::always_inline]] inline void masked_loop(const float* __restrict x, const float* __restrict y,
                                               float* __restrict gx, float* __restrict gy, long n, Body& body) {
  long i = 0;
  for (; i + WF <= n; i += WF) {
    BF dx;
    const BF dy = body(BF::load_unaligned(x + i), BF::load_unaligned(y + i), dx);
    dx.store_unaligned(gx + i);
    dy.store_unaligned(gy + i);
  }
  if (i < n) {
    BF dx;
    const BF dy = body(masked_load<BF>(x + i, n - i), masked_load<BF>(y + i, n - i), dx);
    masked_store(gx + i, dx, n - i);
    masked_store(gy + i, dy, n - i);
  }
}

/// The same with the last, partial batch through masked loads and stores (element by
/// element copies into a batch stall store forwarding): the fastest hand loop at N = 10.
__attribute__((noinline)) float hand_ccy_lanes_masked(const float* __restrict x, const float* __restrict y,
                                                      float* __restrict gx, float* __restrict gy, long n) {
  namespace L = fusegrad::lanes;
  BF acc(0.0f);
  auto body = [&](BF xv, BF yv, BF& dx) {
    const BF c1 = L::cos(xv), c2 = L::cos(c1);
    acc += c2 * yv;
    dx = yv * L::sin(c1) * L::sin(xv);
    return c2;
  };
  masked_loop(x, y, gx, gy, n, body);
  return xsimd::hadd(acc);
}

/// The best hand loop for this work: the sine and the cosine of each argument from one
/// reduction (`sincos`: two reductions per element instead of four), the last partial batch
/// through masked loads and stores (`masked_loop`). `Lanes`: fusegrad's `lanes::sincos` (xsimd's bits,
/// its reduction inline) instead of `xsimd::sincos`.
template <bool Lanes>
__attribute__((noinline)) float hand_ccy_sincos(const float* __restrict x, const float* __restrict y,
                                                float* __restrict gx, float* __restrict gy, long n) {
  BF acc(0.0f);
  auto sc = [](const BF& v) {
    if constexpr (Lanes) return fusegrad::lanes::sincos(v);
    else return xsimd::sincos(v);
  };
  auto body = [&](BF xv, BF yv, BF& dx) {
    const auto [s1, c1] = sc(xv);
    const auto [s2, c2] = sc(c1);
    acc += c2 * yv;
    dx = yv * s2 * s1;
    return c2;
  };
  masked_loop(x, y, gx, gy, n, body);
  return xsimd::hadd(acc);
}

/// `hand_ccy_sincos<true>` with the first `sincos` of a block of 256 elements taken before
/// the second (the same operations and the same sum order: the same bits): a batch taken
/// through both waits on the first, and on a Zen 4 core the out-of-order window does not
/// cover that latency, where over a block the batches of one `sincos` overlap. The best hand
/// loop from about 2^10 (docs/performance.md).
__attribute__((noinline)) float hand_ccy_sincos_blocks(const float* __restrict x, const float* __restrict y,
                                                       float* __restrict gx, float* __restrict gy, long n) {
  namespace L = fusegrad::lanes;
  constexpr long block = 256;
  alignas(64) float s1b[block], c1b[block];
  BF acc(0.0f);
  const long full = n / WF * WF;
  for (long i0 = 0; i0 < full; i0 += block) {
    const long m = std::min(block, full - i0);
    for (long i = 0; i < m; i += WF) {
      const auto [s1, c1] = L::sincos(BF::load_unaligned(x + i0 + i));
      s1.store_aligned(s1b + i);
      c1.store_aligned(c1b + i);
    }
    for (long i = 0; i < m; i += WF) {
      const BF yv = BF::load_unaligned(y + i0 + i);
      const auto [s2, c2] = L::sincos(BF::load_aligned(c1b + i));
      acc += c2 * yv;
      (yv * s2 * BF::load_aligned(s1b + i)).store_unaligned(gx + i0 + i);
      c2.store_unaligned(gy + i0 + i);
    }
  }
  auto body = [&](BF xv, BF yv, BF& dx) {  // the last, partial batch
    const auto [s1, c1] = L::sincos(xv);
    const auto [s2, c2] = L::sincos(c1);
    acc += c2 * yv;
    dx = yv * s2 * s1;
    return c2;
  };
  masked_loop(x + full, y + full, gx + full, gy + full, n - full, body);
  return xsimd::hadd(acc);
}

struct ccy_data {
  std::vector<float> x, y, gx, gy;
  explicit ccy_data(long n) : x(static_cast<std::size_t>(n)), y(x.size()), gx(x.size()), gy(x.size()) {
    for (long i = 0; i < n; ++i)
      x[static_cast<std::size_t>(i)] = std::sin(0.1f * float(i)),
      y[static_cast<std::size_t>(i)] = 1.0f + 0.001f * float(i % 100);
  }
};

void BM_ccy_hand(benchmark::State& s) {
  ccy_data d(s.range(0));
  for (auto _ : s) {
    benchmark::DoNotOptimize(hand_ccy(d.x.data(), d.y.data(), d.gx.data(), d.gy.data(), s.range(0)));
    benchmark::ClobberMemory();
  }
}
void BM_ccy_fg(benchmark::State& s) {
  ccy_data d(s.range(0));
  auto step = fg::value_and_grad(ccy, fg::argnums<0, 1>).into(std::span<float>(d.gx), std::span<float>(d.gy));
  for (auto _ : s) {
    benchmark::DoNotOptimize(step(std::span<const float>(d.x), std::span<const float>(d.y)));
    benchmark::ClobberMemory();
  }
}
void BM_ccy_hand2(benchmark::State& s) {
  ccy_data d(s.range(0));
  for (auto _ : s) {
    benchmark::DoNotOptimize(hand_ccy2(d.x.data(), d.y.data(), d.gx.data(), d.gy.data(), s.range(0)));
    benchmark::ClobberMemory();
  }
}
void BM_ccy_fg_tensor(benchmark::State& s) {
  ccy_data d(s.range(0));
  const auto x = fg::from_vector<float>(d.x), y = fg::from_vector<float>(d.y);
  auto vg = fg::value_and_grad(ccy, fg::argnums<0, 1>);
  for (auto _ : s) benchmark::DoNotOptimize(vg(x, y));  // returns the value and two new tensors
}
BENCHMARK(BM_ccy_fg_tensor)->Arg(10)->Arg(1000);
void BM_ccy_hand_lanes(benchmark::State& s) {
  ccy_data d(s.range(0));
  for (auto _ : s) {
    benchmark::DoNotOptimize(hand_ccy_lanes(d.x.data(), d.y.data(), d.gx.data(), d.gy.data(), s.range(0)));
    benchmark::ClobberMemory();
  }
}
void BM_ccy_hand_masked(benchmark::State& s) {
  ccy_data d(s.range(0));
  for (auto _ : s) {
    benchmark::DoNotOptimize(hand_ccy_lanes_masked(d.x.data(), d.y.data(), d.gx.data(), d.gy.data(), s.range(0)));
    benchmark::ClobberMemory();
  }
}
template <bool Lanes>
void BM_ccy_hand_sincos(benchmark::State& s) {
  ccy_data d(s.range(0));
  for (auto _ : s) {
    benchmark::DoNotOptimize(hand_ccy_sincos<Lanes>(d.x.data(), d.y.data(), d.gx.data(), d.gy.data(), s.range(0)));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_ccy_hand_sincos<false>)->Name("BM_ccy_hand_sincos")->Arg(10)->Arg(1000)->Arg(1 << 16)->Arg(1 << 20);
BENCHMARK(BM_ccy_hand_sincos<true>)->Name("BM_ccy_hand_sincos_lanes")->Arg(10)->Arg(1000)->Arg(1 << 16)->Arg(1 << 20);
void BM_ccy_hand_sincos_blocks(benchmark::State& s) {
  ccy_data d(s.range(0));
  for (auto _ : s) {
    benchmark::DoNotOptimize(hand_ccy_sincos_blocks(d.x.data(), d.y.data(), d.gx.data(), d.gy.data(), s.range(0)));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_ccy_hand_sincos_blocks)->Arg(10)->Arg(1000)->Arg(1 << 16)->Arg(1 << 20);
BENCHMARK(BM_ccy_hand)->Arg(10)->Arg(1000)->Arg(1 << 20);
BENCHMARK(BM_ccy_hand_masked)->Arg(10)->Arg(1000)->Arg(1 << 20);
BENCHMARK(BM_ccy_hand_lanes)->Arg(10)->Arg(1000)->Arg(1 << 20);
BENCHMARK(BM_ccy_hand2)->Arg(10)->Arg(1000)->Arg(1 << 20);
BENCHMARK(BM_ccy_fg)->Arg(10)->Arg(1000)->Arg(1 << 16)->Arg(1 << 20);

// ---- scalar 2-D Rosenbrock gradient ---------------------------------------------------------

auto rosen2 = [](auto x, auto y) { return (1.0 - x) * (1.0 - x) + 100.0 * (y - x * x) * (y - x * x); };

void BM_rosen2_hand(benchmark::State& s) {
  double x = -1.2, y = 1.0, acc = 0;
  for (auto _ : s) {
    benchmark::DoNotOptimize(x);
    benchmark::DoNotOptimize(y);
    const double t = y - x * x;
    const double gx = -2 * (1 - x) - 400 * x * t, gy = 200 * t;
    benchmark::DoNotOptimize(gx);
    benchmark::DoNotOptimize(gy);
    acc += gx;
  }
  benchmark::DoNotOptimize(acc);
}
void BM_rosen2_fg(benchmark::State& s) {
  double x = -1.2, y = 1.0, acc = 0;
  for (auto _ : s) {
    benchmark::DoNotOptimize(x);
    benchmark::DoNotOptimize(y);
    const auto [gx, gy] = fg::grad(rosen2, fg::argnums<0, 1>)(x, y);
    benchmark::DoNotOptimize(gx);
    benchmark::DoNotOptimize(gy);
    acc += gx;
  }
  benchmark::DoNotOptimize(acc);
}
BENCHMARK(BM_rosen2_hand);
BENCHMARK(BM_rosen2_fg);

// ---- normal log-density of N = 16384 values, gradients in mu and sigma -----------------------

using BD = xsimd::batch<double>;
constexpr long WD = static_cast<long>(BD::size);
constexpr double half_log_2pi = 0.91893853320467274178;

/// log p = -n log(sigma) - n/2 log(2 pi) - sum((x - mu)^2) / (2 sigma^2); d/dmu = sum(x - mu) /
/// sigma^2; d/dsigma = sum((x - mu)^2) / sigma^3 - n / sigma: two sums in one SIMD pass, then
/// the closed forms. Four accumulators per sum (with two, each sum's chain of dependent
/// additions bounded the loop; eight spilled: docs/functional.md, "Log-densities").
__attribute__((noinline)) std::array<double, 3> hand_logpdf(const double* __restrict x, long n, double mu,
                                                            double sigma) {
  constexpr int U = 4;
  BD s1[U], s2[U];
  for (int u = 0; u < U; ++u) s1[u] = BD(0.0), s2[u] = BD(0.0);
  const BD m(mu);
  long i = 0;
  for (; i + U * WD <= n; i += U * WD)
    for (int u = 0; u < U; ++u) {
      const BD d = BD::load_unaligned(x + i + u * WD) - m;
      s1[u] += d;
      s2[u] = xsimd::fma(d, d, s2[u]);
    }
  for (int u = 1; u < U; ++u) s1[0] += s1[u], s2[0] += s2[u];
  double a = xsimd::hadd(s1[0]), b = xsimd::hadd(s2[0]);
  for (long j = i; j < n; ++j) {
    const double d = x[j] - mu;
    a += d, b += d * d;
  }
  const double is = 1 / sigma, nn = double(n);
  return {-nn * (std::log(sigma) + half_log_2pi) - 0.5 * b * is * is, a * is * is, b * is * is * is - nn * is};
}

/// The same by the per-element formulas (z, its square, the two gradient terms), SIMD.
__attribute__((noinline)) std::array<double, 3> hand_logpdf_direct(const double* __restrict x, long n, double mu,
                                                                   double sigma) {
  const double is = 1 / sigma;
  BD v(0.0), gm(0.0), gs(0.0);
  long i = 0;
  for (; i + WD <= n; i += WD) {
    const BD z = (BD::load_unaligned(x + i) - BD(mu)) * BD(is);
    v = xsimd::fma(z, z, v);
    gm += z;
    gs = xsimd::fma(z, z, gs);
  }
  double a = xsimd::hadd(v), b = xsimd::hadd(gm), c = xsimd::hadd(gs);
  for (long j = i; j < n; ++j) {
    const double z = (x[j] - mu) * is;
    a += z * z, b += z, c += z * z;
  }
  const double nn = double(n);
  return {-0.5 * a - nn * (std::log(sigma) + half_log_2pi), b * is, c * is - nn * is};
}

auto logpdf = [](const auto& x, auto mu, auto sigma) {
  const auto z = (x - mu) * (1.0 / sigma);
  return -0.5 * fg::sum(z * z) - double(fg::size(x)) * (fg::log(sigma) + half_log_2pi);
};
auto logpdf_div = [](const auto& x, auto mu, auto sigma) {  // the same, dividing by sigma
  const auto z = (x - mu) / sigma;
  return -0.5 * fg::sum(z * z) - double(fg::size(x)) * (fg::log(sigma) + half_log_2pi);
};

auto logpdf_op = [](const auto& x, auto mu, auto sigma) { return fg::normal_lpdf(x, mu, sigma); };

auto logpdf_factored = [](const auto& x, auto mu, auto sigma) {  // the scale out of the sum
  const auto d = x - mu;
  const auto is = 1.0 / sigma;
  return -0.5 * (is * is) * fg::sum(d * d) - double(fg::size(x)) * (fg::log(sigma) + half_log_2pi);
};
std::vector<double> normal_data(long n) {
  std::mt19937_64 g(42);
  std::normal_distribution<double> d(0.5, 2.0);
  std::vector<double> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = d(g);
  return x;
}
void BM_logpdf_hand(benchmark::State& s) {
  const auto x = normal_data(16384);
  for (auto _ : s) benchmark::DoNotOptimize(hand_logpdf(x.data(), 16384, 0.4, 1.9));
}
template <auto& F>
void BM_logpdf_fg(benchmark::State& s) {
  const auto x = normal_data(16384);
  double gm = 0, gs = 0;
  auto vg = fg::value_and_grad(F, fg::argnums<1, 2>).into(gm, gs);
  for (auto _ : s) {
    benchmark::DoNotOptimize(vg(std::span<const double>(x), 0.4, 1.9));
    benchmark::DoNotOptimize(gm);
    benchmark::DoNotOptimize(gs);
  }
}
void BM_logpdf_hand_direct(benchmark::State& s) {
  const auto x = normal_data(16384);
  for (auto _ : s) benchmark::DoNotOptimize(hand_logpdf_direct(x.data(), 16384, 0.4, 1.9));
}
BENCHMARK(BM_logpdf_hand);
BENCHMARK(BM_logpdf_fg<logpdf_op>)->Name("BM_logpdf_fg_normal_lpdf");
BENCHMARK(BM_logpdf_hand_direct);
BENCHMARK(BM_logpdf_fg<logpdf>)->Name("BM_logpdf_fg");
BENCHMARK(BM_logpdf_fg<logpdf_div>)->Name("BM_logpdf_fg_div");
BENCHMARK(BM_logpdf_fg<logpdf_factored>)->Name("BM_logpdf_fg_factored");

// ---- hvp of a 1000-variable function against its gradient ------------------------------------

auto rosenbrock = [](const auto& x) {
  const auto n = fg::size(x);
  const auto a = fg::slice(x, 0, n - 1), b = fg::slice(x, 1, n - 1);
  return fg::sum(100.0 * (b - a * a) * (b - a * a) + (1.0 - a) * (1.0 - a));
};
void BM_rosen1000_grad(benchmark::State& s) {
  std::vector<double> x(1000), g(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(double(i));
  auto gr = fg::grad(rosenbrock).into(std::span<double>(g));
  for (auto _ : s) {
    gr(std::span<const double>(x));
    benchmark::ClobberMemory();
  }
}
void BM_rosen1000_hvp(benchmark::State& s) {
  std::vector<double> x(1000), v(1000), hv(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(double(i)), v[i] = std::sin(double(i));
  auto h = fg::hvp(rosenbrock).into(std::span<double>(hv));
  for (auto _ : s) {
    h(std::span<const double>(x), std::span<const double>(v));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_rosen1000_grad);
BENCHMARK(BM_rosen1000_hvp);

// ---- Monte Carlo: a geometric Asian call over 10^5 paths, 12 fixings, and its 5 pathwise
//      sensitivities (S0, K, r, sigma, T) ------------------------------------------------------

constexpr long paths = 100000;
constexpr int fixings = 12;

/// The discounted mean payoff: per path, log(G / S0) = sum_j w_j (drift dt + sigma sqrt(dt)
/// z_j), w_j = (M - j) / M, drift = r - sigma^2 / 2, that is drift dt sum_j w_j + sigma
/// sqrt(dt) sum_j w_j z_j; payoff max(G - K, 0) e^{-rT}.
constexpr double weight_sum = (fixings + 1) / 2.0;
auto asian = [](const auto& z, auto s0, auto k, auto r, auto sigma, auto t) {
  const auto dt = t * (1.0 / fixings);
  const auto p = fg::size(z) / fixings;
  const auto wz = [&]<std::size_t... j>(std::index_sequence<j...>) {
    return ((double(fixings - j) / fixings * fg::slice(z, long(j) * p, p)) + ...);
  }
  (std::make_index_sequence<fixings>{});
  const auto logg = (r - 0.5 * sigma * sigma) * dt * weight_sum + sigma * fg::sqrt(dt) * wz;
  return fg::exp(-r * t) * fg::mean(fg::relu(s0 * fg::exp(logg) - k));
};

std::vector<double> normals() {
  std::mt19937_64 g(7);
  std::normal_distribution<double> d;
  std::vector<double> z(static_cast<std::size_t>(paths * fixings));
  for (auto& v : z) v = d(g);
  return z;
}

/// The price alone, by hand: SIMD over paths, the same arithmetic.
__attribute__((noinline)) double hand_asian(const double* __restrict z, double s0, double k, double r, double sigma,
                                            double t) {
  const double dt = t / fixings, drift = (r - 0.5 * sigma * sigma) * dt * weight_sum, vol = sigma * std::sqrt(dt);
  BD acc(0.0);
  for (long p = 0; p < paths; p += WD) {
    BD wz(0.0);
    for (int j = 0; j < fixings; ++j)
      wz = xsimd::fma(BD(double(fixings - j) / fixings), BD::load_unaligned(z + j * paths + p), wz);
    acc += xsimd::max(BD(s0) * xsimd::exp(BD(drift) + BD(vol) * wz) - BD(k), BD(0.0));
  }
  return std::exp(-r * t) * xsimd::hadd(acc) / paths;
}

void BM_asian_price_hand(benchmark::State& s) {
  const auto z = normals();
  for (auto _ : s) benchmark::DoNotOptimize(hand_asian(z.data(), 100, 100, 0.03, 0.25, 1.0));
}
void BM_asian_price_fg(benchmark::State& s) {
  const auto z = normals();
  for (auto _ : s)
    benchmark::DoNotOptimize(fg::vjp(asian, std::span<const double>(z), 100.0, 100.0, 0.03, 0.25, 1.0).first);
}
void BM_asian_price_and_greeks_fg(benchmark::State& s) {
  const auto z = normals();
  double g[5];
  auto vg = fg::value_and_grad(asian, fg::argnums<1, 2, 3, 4, 5>).into(g[0], g[1], g[2], g[3], g[4]);
  for (auto _ : s) {
    benchmark::DoNotOptimize(vg(std::span<const double>(z), 100.0, 100.0, 0.03, 0.25, 1.0));
    benchmark::DoNotOptimize(g);
  }
}
BENCHMARK(BM_asian_price_hand)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_asian_price_fg)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_asian_price_and_greeks_fg)->Unit(benchmark::kMicrosecond);

}  // namespace
