#pragma once
/// \file fusegrad/loops/tile.hpp
/// Tile kernels: one op over a short run of elements that stays in L1 (a "tile", `tile_elems`
/// elements: core/simd.hpp).
///
/// Fused loops (the compile-time `fused` backend and the run-time IR's programs) walk their
/// iteration space in tiles and run each node of the fusion group over the whole tile with
/// these kernels: the op struct's own SIMD `value`, in a tight loop. Each kernel is compiled
/// once per op and element type, whatever the graph, so large graphs stay cheap to compile,
/// and a short loop with one op keeps its constants and operands in registers.

#include <algorithm>
#include <limits>
#include <type_traits>

#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/simd.hpp"

namespace fusegrad::detail {

/// out[i] = op.value(a[i]) (or op.value(a[i], b[i])) for i in [0, n), the op object at `p`:
/// the one out-of-line loop of `Op` for element type `T`, called directly (`tile_op`) or
/// through a `tile_fn` pointer by code shared by all ops.
///
/// Every element goes through the op's SIMD `value`, the last partial batch too (padded with
/// zeros, read and written with masked loads and stores): an element's result never depends
/// on where it sits in a tensor, in a row or in a tile (a scalar tail rounds differently, e.g. `std::pow` against
/// xsimd's pow). Eager ops, the fused backend and the IR's programs all run this loop, so they agree bitwise.
template <class Op, Element T>
[[gnu::noinline]] void tile_kernel(const void* p, const T* __restrict a, const T* __restrict b, T* __restrict out,
                                   index_t n) {
  const Op& op = *static_cast<const Op*>(p);
  using V = simd<T>;
  constexpr index_t W = static_cast<index_t>(V::size);
  constexpr bool unary = requires { op.value(a[0]); };
  index_t i = 0;
  if constexpr (unary) {
    for (; i + W <= n; i += W) op.value(V::load_unaligned(a + i)).store_unaligned(out + i);
  } else {
    for (; i + W <= n; i += W) op.value(V::load_unaligned(a + i), V::load_unaligned(b + i)).store_unaligned(out + i);
  }
  if (i == n) return;
  // the last partial batch: masked loads (zeros past the end) and a masked store, nothing
  // copied element by element (a batch loaded over element-wise stores stalls)
  if constexpr (unary) store_head(out + i, op.value(load_head<false>(a + i, n - i)), n - i);
  else store_head(out + i, op.value(load_head<false>(a + i, n - i), load_head<false>(b + i, n - i)), n - i);
}

/// out[i], sib[i] = op.with_sibling(a[i]) for i in [0, n): a unary op with a sibling
/// (`has_sibling`: sin and cos from one reduction), each value with the bits of its op's own
/// `tile_kernel`.
template <class Op, Element T>
[[gnu::noinline]] void tile_sibling_kernel(const Op& op, const T* __restrict a, T* __restrict out, T* __restrict sib,
                                           index_t n) {
  using V = simd<T>;
  constexpr index_t W = static_cast<index_t>(V::size);
  index_t i = 0;
  for (; i + W <= n; i += W) {
    const auto [y, s] = op.with_sibling(V::load_unaligned(a + i));
    y.store_unaligned(out + i);
    s.store_unaligned(sib + i);
  }
  if (i == n) return;
  const auto [y, s] = op.with_sibling(load_head<false>(a + i, n - i));
  store_head(out + i, y, n - i);
  store_head(sib + i, s, n - i);
}

/// `tile_kernel` of `op`'s type, on `op`.
template <class Op, Element T>
inline void tile_op(const Op& op, const T* a, const T* b, T* out, index_t n) {
  tile_kernel<Op, T>(&op, a, b, out, n);
}

/// A tile kernel behind a type-erased pointer to its op object (`&tile_kernel<Op, T>`): what
/// code shared by all ops (the eager broadcasting loops, the fused backend's tables) calls.
template <Element T>
using tile_fn = void (*)(const void* op, const T* a, const T* b, T* out, index_t n);

/// `fn` over a row of `n` elements whose operands step by `sa`, `sb` (1: contiguous, 0: one
/// value repeated, otherwise strided; `b` null for a unary op): contiguous rows go straight
/// to the kernel, the others through tile-sized buffers.
template <Element T>
void tile_row(tile_fn<T> fn, const void* op, const T* a, index_t sa, const T* b, index_t sb, T* out, index_t n) {
  if (sa == 1 && (!b || sb == 1)) {
    fn(op, a, b, out, n);
    return;
  }
  alignas(64) T abuf[tile_elems];
  alignas(64) T bbuf[tile_elems];
  const index_t first = std::min(tile_elems, n);
  if (sa == 0) std::fill_n(abuf, first, *a);
  if (b && sb == 0) std::fill_n(bbuf, first, *b);
  // An operand's elements [i, i + m): in place, the splatted buffer, or gathered into it.
  auto at = [](const T* p, index_t step, T* buf, index_t i, index_t m) -> const T* {
    if (step == 1) return p + i;
    if (step != 0)
      for (index_t k = 0; k < m; ++k) buf[k] = p[(i + k) * step];
    return buf;
  };
  for (index_t i = 0; i < n; i += tile_elems) {
    const index_t m = std::min(tile_elems, n - i);
    fn(op, at(a, sa, abuf, i, m), b ? at(b, sb, bbuf, i, m) : nullptr, out + i, m);
  }
}

/// acc = max(acc, src[i]) over [0, n) (NaN propagating): lanes in `acc`, the scalar tail in
/// `tail`. A max is exact in any order; sums go through `running_sum` (core/accumulate.hpp).
/// Four chains of maxes side by side, joined at the end: a batch's max (a NaN test, a
/// compare, two blends) waits on the one before, and one chain ran at that latency.
template <Element T>
[[gnu::noinline]] void tile_max(const T* __restrict src, index_t n, simd<T>& acc, T& tail) {
  using V = simd<T>;
  constexpr index_t W = static_cast<index_t>(V::size);
  index_t i = 0;
  V a = acc;
  if (n >= 4 * W) {
    const V none(-std::numeric_limits<T>::infinity());
    V b = none, c = none, d = none;
    for (; i + 4 * W <= n; i += 4 * W) {
      a = lanes::max(a, V::load_unaligned(src + i));
      b = lanes::max(b, V::load_unaligned(src + i + W));
      c = lanes::max(c, V::load_unaligned(src + i + 2 * W));
      d = lanes::max(d, V::load_unaligned(src + i + 3 * W));
    }
    a = lanes::max(lanes::max(a, b), lanes::max(c, d));
  }
  for (; i + W <= n; i += W) a = lanes::max(a, V::load_unaligned(src + i));
  acc = a;
  T t = tail;
  for (; i < n; ++i) t = lanes::max(t, src[i]);
  tail = t;
}

/// The lanes of a max's accumulator combined into one value.
template <Element T>
T lanes_max(const simd<T>& v) {
  T r = v.get(0);
  for (std::size_t j = 1; j < simd<T>::size; ++j) r = lanes::max(r, v.get(j));
  return r;
}

/// dst[i] = combine(dst[i], src[i]) over [0, n) (a reduction whose output runs along the tile;
/// a sum's `dst` is a column-form partial sum, see `column_sums`).
template <bool Max, Element T>
[[gnu::noinline]] void tile_reduce_into(const T* __restrict src, T* __restrict dst, index_t n) {
  using V = simd<T>;
  constexpr index_t W = static_cast<index_t>(V::size);
  index_t i = 0;
  for (; i + W <= n; i += W) {
    const V d = V::load_unaligned(dst + i), v = V::load_unaligned(src + i);
    (Max ? lanes::max(d, v) : d + v).store_unaligned(dst + i);
  }
  for (; i < n; ++i) dst[i] = Max ? lanes::max(dst[i], src[i]) : dst[i] + src[i];
}

/// out[i] = a[i] / s over [0, n) (a mean's gradient: divided, as the eager rule `g / n` does).
template <Element T>
[[gnu::noinline]] void tile_div(const T* __restrict a, T s, T* __restrict out, index_t n) {
  using V = simd<T>;
  constexpr index_t W = static_cast<index_t>(V::size);
  index_t i = 0;
  for (; i + W <= n; i += W) (V::load_unaligned(a + i) / V(s)).store_unaligned(out + i);
  for (; i < n; ++i) out[i] = a[i] / s;
}

}  // namespace fusegrad::detail
