#pragma once
/// \file fusegrad/ops/distributions.hpp
/// Log-densities: `normal_lpdf(x, mu, sigma)` = Σ_i log N(x_i | mu, sigma), the sum over the
/// elements of `x` (Stan's `normal_lpdf`, PyTorch's `Normal(mu, sigma).log_prob(x).sum()`).
///
/// Written once over any operand from the public ops, so every path runs it and derives its
/// gradients (eager tensors, `fg::compile`, `fg::jit`; `mu` and `sigma` broadcast against `x`).
/// The functional transforms run the common case of a likelihood, a range `x` with scalar `mu`
/// and `sigma`, on its sufficient statistics instead (`ops::normal_lpdf_rule`, below; the node is
/// functional/normal.hpp's): one pass sums d_i = x_i - mu and d_i², and the value and the
/// gradients in `mu` and `sigma` are closed forms of the two sums, as a hand-written loop
/// computes them (FastAD's and Stan's specialised normal densities do the same). The two
/// forms agree to rounding (tests/ops/test_distributions.cpp checks both against each other, against
/// closed forms and finite differences).

#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/error.hpp"
#include "fusegrad/core/operand.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/reduce.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad {

/// A number or an operand of fusegrad's ops: what a distribution's parameters may be.
template <class P>
concept Parameter = Operand<P> || std::is_arithmetic_v<std::remove_cvref_t<P>>;

namespace detail {
/// log √(2π).
inline constexpr double half_log_2pi = 0.918938533204672741780329736406;

template <class P>
constexpr auto log_of(const P& p) {
  if constexpr (std::is_arithmetic_v<P>) return std::log(p);
  else return log(p);
}

}  // namespace detail

namespace ops {
/// The normal log-density of a range with scalar `mu` and `sigma`, on its sufficient
/// statistics: s1 = Σ (x_i - mu), s2 = Σ (x_i - mu)², n = the number of elements.
///   log p = -n (log sigma + log √(2π)) - s2 / (2 sigma²)
///   ∂/∂mu = s1 / sigma²,  ∂/∂sigma = s2 / sigma³ - n / sigma,  ∂/∂x_i = -(x_i - mu) / sigma²
struct normal_lpdf_rule {
  static constexpr std::string_view name = "normal_lpdf";

  template <Element T>
  static void check(T sigma) {
    if (!(sigma > T(0)))
      detail::fail(name, "sigma = ", sigma, "; expected a positive scale (a normal density's standard deviation)");
  }
  /// {s1, s2} over `x[0, n)`, in one pass. Each sum is taken as fusegrad's summation takes a
  /// sum (`running_sum`: value j of a chunk into accumulator j % lanes, the chunks' sums
  /// combined in the fixed tree), the squares accumulated with fused multiply-adds (one
  /// rounding per element, as a hand loop does). The same bits wherever an element sits.
  template <Element T>
  static std::array<T, 2> stats(const T* __restrict x, index_t n, T mu) noexcept {
    using V = simd<T>;
    constexpr index_t W = static_cast<index_t>(V::size), lanes = detail::sum_lanes<T>, U = lanes / W,
                      chunk = detail::sum_chunk<T>;
    T level1[64], level2[64];
    std::uint64_t chunks = 0;
    const V m(mu);
    auto fold = [&](const V* a) { return detail::running_sum<T>::fold_registers(a); };
    auto add = [&](V& s1, V& s2, const V& d) { s1 = s1 + d, s2 = xsimd::fma(d, d, s2); };
    index_t i = 0;
    for (; i + chunk <= n; i += chunk) {
      V a1[U], a2[U];  // (per chunk: nothing of them lives past its fold)
      for (index_t u = 0; u < U; ++u) a1[u] = V(T(-0.0)), a2[u] = V(T(-0.0));
      for (index_t b = 0; b < chunk; b += lanes)
        for (index_t u = 0; u < U; ++u) add(a1[u], a2[u], V::load_unaligned(x + i + b + u * W) - m);
      T c1 = fold(a1), c2 = fold(a2);
      detail::sum_tree<T>::push(level1, 1, chunks, &c1, 1);
      detail::sum_tree<T>::push(level2, 1, chunks, &c2, 1);
      ++chunks;
    }
    T t1 = T(0), t2 = T(0);
    const bool partial = i < n;
    if (partial) {  // a last, partial chunk: its batches into the chunk's accumulators
      V a1[U], a2[U];
      for (index_t u = 0; u < U; ++u) a1[u] = V(T(-0.0)), a2[u] = V(T(-0.0));
      index_t u = 0;
      for (; i + W <= n; i += W, u = (u + 1) % U) add(a1[u], a2[u], V::load_unaligned(x + i) - m);
      if (i < n) {  // lanes past the end add nothing (the accumulators keep their -0)
        alignas(64) static constexpr T iota[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        static_assert(W <= 16, "fusegrad: batches of at most 16 lanes");
        const auto in = V::load_aligned(iota) < V(static_cast<T>(n - i));
        V s1 = a1[u], s2 = a2[u];
        add(s1, s2, detail::load_head<false>(x + i, n - i) - m);
        a1[u] = xsimd::select(in, s1, a1[u]);
        a2[u] = xsimd::select(in, s2, a2[u]);
      }
      t1 = fold(a1), t2 = fold(a2);
    }
    detail::sum_tree<T>::total(level1, 1, chunks, partial, &t1, 1);
    detail::sum_tree<T>::total(level2, 1, chunks, partial, &t2, 1);
    return {t1, t2};
  }
  /// The log-density from the statistics.
  template <Element T>
  static T value(index_t n, const std::array<T, 2>& s, T sigma) noexcept {
    using std::log;
    const T is = T(1) / sigma, nn = static_cast<T>(n);
    return -nn * (log(sigma) + static_cast<T>(detail::half_log_2pi)) - T(0.5) * s[1] * is * is;
  }
  /// {∂/∂mu, ∂/∂sigma} times the output's adjoint `g`.
  template <Element T>
  static std::array<T, 2> grads(index_t n, const std::array<T, 2>& s, T sigma, T g) noexcept {
    const T is = T(1) / sigma, nn = static_cast<T>(n);
    return {g * (s[0] * is * is), g * (s[1] * is * is * is - nn * is)};
  }
  /// `gx[i] += g ∂/∂x_i` over `[0, n)`: -g (x_i - mu) / sigma².
  template <Element T>
  static void add_grad_x(T* __restrict gx, const T* __restrict x, index_t n, T mu, T sigma, T g) noexcept {
    using V = simd<T>;
    constexpr index_t W = static_cast<index_t>(V::size);
    const T c = -g / (sigma * sigma);
    const V m(mu), cv(c);
    index_t i = 0;
    for (; i + W <= n; i += W)
      (V::load_unaligned(gx + i) + cv * (V::load_unaligned(x + i) - m)).store_unaligned(gx + i);
    if (i < n)
      detail::store_head(
          gx + i, detail::load_head<false>(gx + i, n - i) + cv * (detail::load_head<false>(x + i, n - i) - m), n - i);
  }
};
}  // namespace ops

/// Σ_i log N(x_i | mu, sigma): the normal log-density of the elements of `x` (independent),
/// `mu` and `sigma` broadcast against `x`. A `sigma` that is a number is checked (positive);
/// a tensor or symbolic one is not, and a non-positive scale gives NaN (as `log` of it does).
template <Operand X, Parameter M, Parameter S>
constexpr auto normal_lpdf(const X& x, const M& mu, const S& sigma) {
  if constexpr (std::is_arithmetic_v<S>) ops::normal_lpdf_rule::check(sigma);
  const auto z = (x - mu) / sigma;
  return -sum(0.5 * (z * z) + (detail::log_of(sigma) + detail::half_log_2pi));
}

}  // namespace fusegrad
