#pragma once
// Hand-written reference loops the benchmarks put beside fusegrad's kernels: what a careful
// programmer would write for these expressions with xsimd, one pass each way.
#include <algorithm>
#include <cmath>
#include <utility>

#include <xsimd/xsimd.hpp>

#include <fusegrad/core/simd.hpp>

namespace fusegrad_bench {

using B = xsimd::batch<float>;
constexpr long W = static_cast<long>(B::size);

/// Which SIMD sin/cos a hand loop calls: xsimd's (what a careful programmer reaches for), or
/// fusegrad's `lanes::sin/cos` (the same bits, xsimd's reduction for |x| <= 20π written inline:
/// faster, core/simd.hpp). The benchmarks take the faster loop as the reference.
struct xsimd_trig {
  static B cos(const B& x) { return xsimd::cos(x); }
  static B sin(const B& x) { return xsimd::sin(x); }
  static std::pair<B, B> sincos(const B& x) { return xsimd::sincos(x); }
};
struct lanes_trig {
  static B cos(const B& x) { return fusegrad::lanes::cos(x); }
  static B sin(const B& x) { return fusegrad::lanes::sin(x); }
  static std::pair<B, B> sincos(const B& x) { return fusegrad::lanes::sincos(x); }
};

template <class Trig = xsimd_trig>
__attribute__((noinline)) void hand_forward(const float* __restrict x, const float* __restrict y, float* __restrict out,
                                            long n) {
  long i = 0;
  for (; i + W <= n; i += W)
    (Trig::cos(Trig::cos(B::load_unaligned(x + i))) * B::load_unaligned(y + i)).store_unaligned(out + i);
  for (; i < n; ++i) out[i] = std::cos(std::cos(x[i])) * y[i];
}

template <class Trig = xsimd_trig>
__attribute__((noinline)) void hand_backward(const float* __restrict x, const float* __restrict y,
                                             const float* __restrict g, float* __restrict gx, float* __restrict gy,
                                             long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    const B xv = B::load_unaligned(x + i), gv = B::load_unaligned(g + i);
    const B c1 = Trig::cos(xv);
    (gv * B::load_unaligned(y + i) * Trig::sin(c1) * Trig::sin(xv)).store_unaligned(gx + i);
    (gv * Trig::cos(c1)).store_unaligned(gy + i);
  }
  for (; i < n; ++i) {
    const float c1 = std::cos(x[i]);
    gx[i] = g[i] * y[i] * std::sin(c1) * std::sin(x[i]);
    gy[i] = g[i] * std::cos(c1);
  }
}

// The backward with the sine and the cosine of each argument from one reduction (`sincos`):
// cos(x) is recomputed beside the sin(x) the backward needs anyway, cos(cos(x)) beside
// sin(cos(x)), so the backward costs two reductions per element instead of four. With the
// forward above: the best hand loop for this work.
template <class Trig = xsimd_trig>
__attribute__((noinline)) void hand_backward_sincos(const float* __restrict x, const float* __restrict y,
                                                    const float* __restrict g, float* __restrict gx,
                                                    float* __restrict gy, long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    const B xv = B::load_unaligned(x + i), gv = B::load_unaligned(g + i);
    const auto [s1, c1] = Trig::sincos(xv);
    const auto [s2, c2] = Trig::sincos(c1);
    (gv * B::load_unaligned(y + i) * s2 * s1).store_unaligned(gx + i);
    (gv * c2).store_unaligned(gy + i);
  }
  for (; i < n; ++i) {
    const float c1 = std::cos(x[i]);
    gx[i] = g[i] * y[i] * std::sin(c1) * std::sin(x[i]);
    gy[i] = g[i] * std::cos(c1);
  }
}

// The saving variant: the forward keeps cos(x) and cos(cos(x)), the backward reads them back
// (four transcendental calls per element instead of six, four more streams).
template <class Trig = xsimd_trig>
__attribute__((noinline)) void hand_forward_save(const float* __restrict x, const float* __restrict y,
                                                 float* __restrict out, float* __restrict c1s, float* __restrict c2s,
                                                 long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    const B c1 = Trig::cos(B::load_unaligned(x + i)), c2 = Trig::cos(c1);
    c1.store_unaligned(c1s + i);
    c2.store_unaligned(c2s + i);
    (c2 * B::load_unaligned(y + i)).store_unaligned(out + i);
  }
  for (; i < n; ++i) {
    c1s[i] = std::cos(x[i]);
    c2s[i] = std::cos(c1s[i]);
    out[i] = c2s[i] * y[i];
  }
}

// The saving forward over blocks of 256 elements, one cosine per pass: the second cosine
// waits on the first, and a loop that takes each batch through both waits on that latency
// (the out-of-order window does not hold two evaluations of tens of instructions each), where
// over a block the batches of one cosine overlap. cos(x) goes to its saved array, which the
// second pass reads back from L1. With `hand_backward_save`, whose two sines do not wait on
// each other, the best hand loop of this work on a Zen 4 core (docs/performance.md).
template <class Trig = xsimd_trig>
__attribute__((noinline)) void hand_forward_save_blocks(const float* __restrict x, const float* __restrict y,
                                                        float* __restrict out, float* __restrict c1s,
                                                        float* __restrict c2s, long n) {
  constexpr long block = 256;
  const long full = n / W * W;
  for (long i0 = 0; i0 < full; i0 += block) {
    const long end = std::min(i0 + block, full);
    for (long i = i0; i < end; i += W) Trig::cos(B::load_unaligned(x + i)).store_unaligned(c1s + i);
    for (long i = i0; i < end; i += W) {
      const B c2 = Trig::cos(B::load_unaligned(c1s + i));
      c2.store_unaligned(c2s + i);
      (c2 * B::load_unaligned(y + i)).store_unaligned(out + i);
    }
  }
  for (long i = full; i < n; ++i) {
    c1s[i] = std::cos(x[i]);
    c2s[i] = std::cos(c1s[i]);
    out[i] = c2s[i] * y[i];
  }
}

template <class Trig = xsimd_trig>
__attribute__((noinline)) void hand_backward_save(const float* __restrict x, const float* __restrict y,
                                                  const float* __restrict g, const float* __restrict c1s,
                                                  const float* __restrict c2s, float* __restrict gx,
                                                  float* __restrict gy, long n) {
  long i = 0;
  for (; i + W <= n; i += W) {
    const B xv = B::load_unaligned(x + i), gv = B::load_unaligned(g + i), c1 = B::load_unaligned(c1s + i);
    (gv * B::load_unaligned(y + i) * Trig::sin(c1) * Trig::sin(xv)).store_unaligned(gx + i);
    (gv * B::load_unaligned(c2s + i)).store_unaligned(gy + i);
  }
  for (; i < n; ++i) {
    gx[i] = g[i] * y[i] * std::sin(c1s[i]) * std::sin(x[i]);
    gy[i] = g[i] * c2s[i];
  }
}

__attribute__((noinline)) inline void hand_xyz(const float* __restrict x, const float* __restrict y,
                                               const float* __restrict z, float* __restrict out, long n) {
  for (long i = 0; i < n; ++i) out[i] = x[i] * y[i] + z[i];
}

}  // namespace fusegrad_bench
