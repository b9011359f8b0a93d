// The measurement behind fusegrad's choice of OpenMP over oneTBB (docs/architecture.md,
// "Every core"): fusegrad's kind of loop (tiles of cos(cos(x)) * y, and x * y + z) cut into
// one block per thread, timed with 1 and 2 threads, and the cost of an empty 2-block region.
//
//   g++ -std=c++20 -O2 -mavx2 -mfma -fopenmp tools/scheduler_probe.cpp -o /tmp/probe_omp
//   g++ -std=c++20 -O2 -mavx2 -mfma -DUSE_TBB tools/scheduler_probe.cpp -o /tmp/probe_tbb -ltbb
//   /tmp/probe_omp; /tmp/probe_tbb        (apt-get install libtbb-dev for the second)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <atomic>
#ifdef USE_TBB
#include <tbb/parallel_for.h>
#include <tbb/global_control.h>
#include <tbb/blocked_range.h>
#else
#include <omp.h>
#endif
#include <xsimd/xsimd.hpp>
using V = xsimd::batch<float>;
__attribute__((noinline)) void body(const float* __restrict x, const float* __restrict y, float* __restrict o, long n) {
  alignas(64) float t[256];
  for (long i = 0; i < n; i += 256) {
    long m = std::min(256L, n - i);
    for (long j = 0; j + 8 <= m; j += 8) xsimd::cos(V::load_unaligned(x + i + j)).store_aligned(t + j);
    for (long j = 0; j + 8 <= m; j += 8)
      (xsimd::cos(V::load_aligned(t + j)) * V::load_unaligned(y + i + j)).store_unaligned(o + i + j);
  }
}
__attribute__((noinline)) void fma3(const float* __restrict x, const float* __restrict y, const float* __restrict z,
                                    float* __restrict o, long n) {
  for (long i = 0; i < n; ++i) o[i] = x[i] * y[i] + z[i];
}
template <class F>
void pfor(int nt, long n, long grain, F f) {
  long blocks = std::min<long>(nt, (n + grain - 1) / grain);
  if (blocks <= 1) {
    f(0, n);
    return;
  }
#ifdef USE_TBB
  tbb::parallel_for(
      tbb::blocked_range<long>(0L, blocks, 1),
      [&](const tbb::blocked_range<long>& r) {
        for (long b = r.begin(); b < r.end(); ++b) {
          long per = (n / blocks + 255) / 256 * 256;
          long s = b * per, e = std::min(n, s + per);
          if (s < e) f(s, e);
        }
      },
      tbb::static_partitioner());
#else
#pragma omp parallel for num_threads(blocks) schedule(static, 1)
  for (long b = 0; b < blocks; ++b) {
    long per = (n / blocks + 255) / 256 * 256;
    long s = b * per, e = std::min(n, s + per);
    if (s < e) f(s, e);
  }
#endif
}
template <class F>
double best(F f, int reps) {
  double b = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    b = std::min(b, std::chrono::duration<double>(t1 - t0).count());
  }
  return b;
}
int main() {
#ifdef USE_TBB
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 2);
  const char* name = "tbb";
#else
  const char* name = "omp";
#endif
  for (long n : {1L << 10, 1L << 12, 1L << 14, 1L << 16, 1L << 18}) {
    std::vector<float> x(n, 0.3f), y(n, 1.1f), o(n);
    int reps = (int)std::max(20L, (1L << 24) / n / 4);
    double t1 = 0, t2 = 0;
    for (int k = 0; k < 3; ++k) {
      double a =
          best([&] { pfor(1, n, 256, [&](long s, long e) { body(x.data() + s, y.data() + s, o.data() + s, e - s); }); },
               reps);
      double b =
          best([&] { pfor(2, n, 256, [&](long s, long e) { body(x.data() + s, y.data() + s, o.data() + s, e - s); }); },
               reps);
      t1 = k ? std::min(t1, a) : a;
      t2 = k ? std::min(t2, b) : b;
    }
    std::printf("%s coscos n=%8ld 1t %9.2f us 2t %9.2f us speedup %.2f\n", name, n, t1 * 1e6, t2 * 1e6, t1 / t2);
  }
  {
    long n = 1L << 24;
    std::vector<float> x(n, 0.3f), y(n, 1.1f), z(n, 2.f), o(n);
    double t1 = 1e9, t2 = 1e9;
    for (int k = 0; k < 3; ++k) {
      t1 = std::min(t1, best(
                            [&] {
                              pfor(1, n, 256, [&](long s, long e) {
                                fma3(x.data() + s, y.data() + s, z.data() + s, o.data() + s, e - s);
                              });
                            },
                            10));
      t2 = std::min(t2, best(
                            [&] {
                              pfor(2, n, 256, [&](long s, long e) {
                                fma3(x.data() + s, y.data() + s, z.data() + s, o.data() + s, e - s);
                              });
                            },
                            10));
    }
    std::printf("%s xy+z n=2^24 1t %9.2f us 2t %9.2f us speedup %.2f\n", name, t1 * 1e6, t2 * 1e6, t1 / t2);
  }
  // empty region overhead
  std::atomic<long> sink{0};
  double e = best(
                 [&] {
                   for (int i = 0; i < 1000; ++i) pfor(2, 512, 256, [&](long s, long) { sink += s; });
                 },
                 20) /
             1000;
  std::printf("%s empty 2-block region: %.2f us\n", name, e * 1e6);
}
