#pragma once
/// \file fusegrad/eager/kernels.hpp
/// The loops of the eager runtime: strided iteration, vectorised element-wise maps,
/// broadcasting, reductions and copies. No autograd here: these only move numbers.

#include <array>
#include <limits>
#include <vector>

#include "fusegrad/core/simd.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/kernel/tile.hpp"

namespace fusegrad::detail {

/// Calls `f(bases, n, inner_strides)` once per innermost row of `s`, for `N` operands laid out
/// with strides `*st[k]` from offsets `off[k]` (all over the same iteration shape `s`); `off`
/// is advanced in place, `inner` (N entries) receives each operand's innermost stride.
template <class F>
void for_each_row_n(const shape& s, std::size_t N, const strides* const* st, index_t* off, index_t* inner, F&& f) {
  if (fusegrad::numel(s) == 0) return;
  const std::size_t r = s.size();
  if (r == 0) {
    std::fill_n(inner, N, index_t{0});
    f(static_cast<const index_t*>(off), index_t{1}, static_cast<const index_t*>(inner));
    return;
  }
  for (std::size_t k = 0; k < N; ++k) inner[k] = (*st[k])[r - 1];
  const index_t rows = fusegrad::numel(s) / s[r - 1];
  std::vector<index_t> idx(r, 0);
  for (index_t row = 0; row < rows; ++row) {
    f(static_cast<const index_t*>(off), s[r - 1], static_cast<const index_t*>(inner));
    for (std::size_t d = r - 1; d-- > 0;) {
      for (std::size_t k = 0; k < N; ++k) off[k] += (*st[k])[d];
      if (++idx[d] < s[d]) break;
      for (std::size_t k = 0; k < N; ++k) off[k] -= (*st[k])[d] * s[d];
      idx[d] = 0;
    }
  }
}

/// `for_each_row_n` for a fixed number of operands, with rows handed over as arrays.
template <std::size_t N, class F>
void for_each_row(const shape& s, const std::array<const strides*, N>& st, std::array<index_t, N> off, F&& f) {
  std::array<index_t, N> inner{};
  for_each_row_n(s, N, st.data(), off.data(), inner.data(), [&](const index_t* b, index_t n, const index_t* in) {
    std::array<index_t, N> base{}, step{};
    std::copy_n(b, N, base.begin());
    std::copy_n(in, N, step.begin());
    f(base, n, step);
  });
}

/// Strides of `t` seen through the broadcast shape `to` (0 on broadcast dims).
template <Element T>
strides broadcast_strides(const tensor<T>& t, const shape& to) {
  const auto& s = t.shape();
  const auto& st = t.strides();
  strides r(to.size(), 0);
  const std::size_t lead = to.size() - s.size();
  for (std::size_t i = 0; i < s.size(); ++i) r[lead + i] = s[i] == 1 ? 0 : st[i];
  return r;
}

/// A bias-like broadcast (`[..., n] op [n]`, either side): one operand covers `out`
/// contiguously, the other is contiguous over `out`'s trailing dims, at most a tile long. The
/// short one is repeated in a buffer of whole periods and the pair walked in chunks of that
/// length, instead of one short row at a time. False when the operands are not laid out so.
template <Element T>
bool periodic_row(tile_fn<T> fn, const void* op, const tensor<T>& a, const strides& sa, const tensor<T>& b,
                  const strides& sb, tensor<T>& out) {
  const shape& s = out.shape();
  const strides full = contiguous_strides(s);
  const bool a_full = sa == full, b_full = sb == full;
  if (a_full == b_full) return false;
  const strides& sp = a_full ? sb : sa;
  std::size_t k = 0;  // leading dims the short operand is broadcast over
  while (k < s.size() && sp[k] == 0) ++k;
  // Over the trailing dims the short operand must be laid out contiguously.
  index_t period = 1;
  for (std::size_t d = s.size(); d-- > k;) {
    if (s[d] != 1 && sp[d] != period) return false;
    period *= s[d];
  }
  if (k == 0 || period <= 0 || period > tile_elems) return false;
  const tensor<T>& part = a_full ? b : a;
  const T* src = part.impl()->store->data() + part.offset();
  alignas(64) T buf[tile_elems];
  const index_t n = numel(s);
  const index_t chunk = std::min(tile_elems / period * period, n);
  for (index_t r = 0; r < chunk; r += period) std::copy(src, src + period, buf + r);
  const T* pf = (a_full ? a : b).impl()->store->data() + (a_full ? a : b).offset();
  T* o = out.data_ptr();
  for (index_t i = 0; i < n; i += chunk) {
    const index_t m = std::min(chunk, n - i);
    if (a_full) fn(op, pf + i, buf, o + i, m);
    else fn(op, buf, pf + i, o + i, m);
  }
  return true;
}

/// `fn` (a tile kernel, see `tile_row`) over every element of `out`'s shape, its operands
/// broadcast to it: compiled once per element type, whatever the op.
template <Element T>
void map_strided(tile_fn<T> fn, const void* op, const tensor<T>& a, const tensor<T>* b, tensor<T>& out) {
  const shape& s = out.shape();
  const strides sa = broadcast_strides(a, s), sb = b ? broadcast_strides(*b, s) : strides(s.size(), 0);
  if (b && periodic_row(fn, op, a, sa, *b, sb, out)) return;
  const T* pa = a.impl()->store->data();
  const T* pb = b ? b->impl()->store->data() : nullptr;
  T* o = out.data_ptr();
  for_each_row<2>(s, {&sa, &sb}, {a.offset(), b ? b->offset() : 0},
                  [&](std::array<index_t, 2> base, index_t len, std::array<index_t, 2> st) {
                    tile_row(fn, op, pa + base[0], st[0], pb ? pb + base[1] : nullptr, st[1], o, len);
                    o += len;
                  });
}

/// A new contiguous tensor holding an element-wise op on `a` (and `*b`, broadcasting), the op
/// given by its tile kernel `fn` and its object `op`: the one body of `map`, `zip` and the
/// node-by-node evaluation of compiled graphs, compiled once per element type.
template <Element T>
tensor<T> pointwise_values(std::string_view name, tile_fn<T> fn, const void* op, const tensor<T>& a,
                           const tensor<T>* b) {
  const bool same = !b || a.shape() == b->shape();
  tensor<T> out = same ? empty<T>(a.shape()) : empty<T>(broadcast_shapes(name, a.shape(), b->shape()));  // no shape copy
  if (out.numel() == 0) return out;
  if (same && a.is_contiguous() && (!b || b->is_contiguous()))
    fn(op, a.data_ptr(), b ? static_cast<const T*>(b->data_ptr()) : nullptr, out.data_ptr(), out.numel());
  else
    map_strided<T>(fn, op, a, b, out);
  return out;
}

/// A new contiguous tensor holding `op.value(x)` element-wise (the op's tile kernel).
template <class Op, Element T>
tensor<T> map(const Op& op, const tensor<T>& x) {
  return pointwise_values<T>({}, &tile_kernel<Op, T>, &op, x, nullptr);
}

/// A new contiguous tensor of the broadcast shape holding `op.value(a, b)` element-wise.
template <class Op, Element T>
tensor<T> zip(std::string_view name, const Op& op, const tensor<T>& a, const tensor<T>& b) {
  return pointwise_values<T>(name, &tile_kernel<Op, T>, &op, a, &b);
}

/// A contiguous copy of any strided tensor.
template <Element T>
tensor<T> contiguous_copy(const tensor<T>& x) {
  tensor<T> out = empty<T>(x.shape());
  T* o = out.data_ptr();
  const T* p = x.impl()->store ? x.impl()->store->data() : nullptr;
  for_each_row<1>(x.shape(), {&x.strides()}, {x.offset()},
                  [&](std::array<index_t, 1> b, index_t n, std::array<index_t, 1> s) {
                    if (s[0] == 1) std::copy(p + b[0], p + b[0] + n, o);
                    else for (index_t k = 0; k < n; ++k) o[k] = p[b[0] + k * s[0]];
                    o += n;
                  });
  return out;
}

/// Fills a contiguous tensor with `v`.
template <Element T>
void fill(const tensor<T>& t, T v) {
  std::fill_n(t.data_ptr(), t.numel(), v);
}

/// How a reduction combines elements.
enum class reduce_kind { sum, max };

/// Reduces `x` over the dims flagged in `mask` (one flag per dim). The result keeps the
/// reduced dims with size 1 (callers squeeze them when keepdim is false).
template <Element T>
tensor<T> reduce_keepdim(const tensor<T>& x, const std::vector<bool>& mask, reduce_kind kind) {
  shape out_shape = x.shape();
  for (std::size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) out_shape[d] = 1;
  tensor<T> out = empty<T>(out_shape);
  T* o = out.data_ptr();
  const T init = kind == reduce_kind::sum ? T(0) : -std::numeric_limits<T>::infinity();
  std::fill_n(o, out.numel(), init);
  if (x.numel() == 0) return out;
  const T* p = x.impl()->store->data();
  if (x.is_contiguous() && out.numel() == 1) {  // full reduction over contiguous memory
    using B = simd<T>;
    constexpr index_t W = static_cast<index_t>(B::size);
    const T* q = p + x.offset();
    const index_t n = x.numel();
    B acc(init);
    index_t i = 0;
    if (kind == reduce_kind::sum) {
      for (; i + W <= n; i += W) acc += B::load_unaligned(q + i);
      T r = xsimd::hadd(acc);
      for (; i < n; ++i) r += q[i];
      *o = r;
    } else {
      for (; i + W <= n; i += W) acc = lanes::max(acc, B::load_unaligned(q + i));
      alignas(64) T lanes_buf[W];
      acc.store_aligned(lanes_buf);
      T r = init;
      for (index_t k = 0; k < W; ++k) r = lanes::max(r, lanes_buf[k]);
      for (; i < n; ++i) r = lanes::max(r, q[i]);
      *o = r;
    }
    return out;
  }
  strides ost = out.strides();
  for (std::size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) ost[d] = 0;
  for_each_row<2>(x.shape(), {&x.strides(), &ost}, {x.offset(), 0},
                  [&](std::array<index_t, 2> b, index_t n, std::array<index_t, 2> s) {
                    if (kind == reduce_kind::sum) {
                      if (s[1] == 0) {
                        T acc = 0;
                        for (index_t k = 0; k < n; ++k) acc += p[b[0] + k * s[0]];
                        o[b[1]] += acc;
                      } else {
                        for (index_t k = 0; k < n; ++k) o[b[1] + k * s[1]] += p[b[0] + k * s[0]];
                      }
                    } else {
                      for (index_t k = 0; k < n; ++k) {
                        T& r = o[b[1] + k * s[1]];
                        r = lanes::max(r, p[b[0] + k * s[0]]);
                      }
                    }
                  });
  return out;
}

}  // namespace fusegrad::detail
