#pragma once
/// \file fusegrad/eager/kernels.hpp
/// The loops of the eager runtime on tensors: vectorised element-wise maps (the ops' tile
/// kernels, loops/tile.hpp), broadcasting, reductions and copies. No autograd here: these only
/// move numbers.

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/parallel.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/ops/reduce.hpp"
#include "fusegrad/loops/rows.hpp"
#include "fusegrad/loops/tile.hpp"

namespace fusegrad::detail {

/// Strides of `t` seen through the broadcast shape `to` (0 on broadcast dims). Dims of `t`
/// before `to`'s first (a fused loop's [1] value over a 0-d loop) are 1s, which step nowhere.
template <Element T>
strides broadcast_strides(const tensor<T>& t, const shape& to) {
  const auto& s = t.shape();
  const auto& st = t.strides();
  strides r(to.size(), 0);
  const std::size_t n = std::min(s.size(), to.size()), skip = s.size() - n, lead = to.size() - n;
  for (std::size_t i = 0; i < n; ++i) r[lead + i] = s[skip + i] == 1 ? 0 : st[skip + i];
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
  const index_t chunks = (n + chunk - 1) / chunk;
  parallel_for(chunks, std::max<index_t>(1, parallel_grain() / chunk), [&](index_t c0, index_t c1) {
    for (index_t i = c0 * chunk; i < std::min(n, c1 * chunk); i += chunk) {
      const index_t m = std::min(chunk, n - i);
      if (a_full) fn(op, pf + i, buf, o + i, m);
      else fn(op, buf, pf + i, o + i, m);
    }
  });
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
  const index_t len = s.empty() ? 1 : s.back();
  parallel_for(row_count(s), std::max<index_t>(1, parallel_grain() / std::max<index_t>(len, 1)),
               [&](index_t r0, index_t r1) {
                 T* o = out.data_ptr() + r0 * len;
                 for_each_row<2>(
                     s, {&sa, &sb}, {a.offset(), b ? b->offset() : 0},
                     [&](std::array<index_t, 2> base, index_t n, std::array<index_t, 2> st) {
                       tile_row(fn, op, pa + base[0], st[0], pb ? pb + base[1] : nullptr, st[1], o, n);
                       o += n;
                     },
                     r0, r1);
               });
}

/// A new contiguous tensor holding an element-wise op on `a` (and `*b`, broadcasting), the op
/// given by its tile kernel `fn` and its object `op`: the one body of `map`, `zip` and the
/// node-by-node evaluation of compiled graphs, compiled once per element type.
template <Element T>
tensor<T> pointwise_values(std::string_view name, tile_fn<T> fn, const void* op, const tensor<T>& a,
                           const tensor<T>* b) {
  const bool same = !b || a.shape() == b->shape();
  const std::string_view who = name.empty() ? std::string_view("pointwise") : name;
  tensor<T> out =
      same ? empty<T>(a.shape(), who) : empty<T>(broadcast_shapes(who, a.shape(), b->shape()), who);  // no shape copy
  if (out.numel() == 0) return out;
  if (same && a.is_contiguous() && (!b || b->is_contiguous())) {
    const T* pa = a.data_ptr();
    const T* pb = b ? static_cast<const T*>(b->data_ptr()) : nullptr;
    T* po = out.data_ptr();
    parallel_for(
        out.numel(), parallel_grain(),
        [&](index_t i, index_t e) { fn(op, pa + i, pb ? pb + i : nullptr, po + i, e - i); }, tile_elems);
  } else map_strided<T>(fn, op, a, b, out);
  return out;
}

/// A new contiguous tensor holding `op.value(x)` element-wise (the op's tile kernel).
template <class Op, Element T>
tensor<T> map(const Op& op, const tensor<T>& x) {
  std::string_view name;  // what an error (out of memory) names
  if constexpr (requires { Op::name; }) name = Op::name;
  return pointwise_values<T>(name, &tile_kernel<Op, T>, &op, x, nullptr);
}

/// A new contiguous tensor of the broadcast shape holding `op.value(a, b)` element-wise.
template <class Op, Element T>
tensor<T> zip(std::string_view name, const Op& op, const tensor<T>& a, const tensor<T>& b) {
  return pointwise_values<T>(name, &tile_kernel<Op, T>, &op, a, &b);
}

/// A contiguous copy of any strided tensor. Matrices stored column-major in the last two dims
/// (`w.t()`, `x.transpose(-1, -2)`) are transposed block by block (`transpose_rows`).
template <Element T>
tensor<T> contiguous_copy(const tensor<T>& x) {
  tensor<T> out = empty<T>(x.shape(), "contiguous");
  const T* p = x.impl()->store ? x.impl()->store->data() : nullptr;
  const auto& s = x.shape();
  const auto& st = x.strides();
  if (const std::size_t r = s.size();
      r >= 2 && st[r - 2] == 1 && st[r - 1] >= s[r - 2] && s[r - 2] >= 4 && s[r - 1] >= 4) {
    const index_t R = s[r - 2], C = s[r - 1], ld = st[r - 1];
    shape lead(s.begin(), s.end() - 2);
    strides lst(st.begin(), st.end() - 2);
    lead.push_back(1);
    lst.push_back(0);
    index_t m = 0;
    for_each_row<1>(lead, {&lst}, {x.offset()}, [&](std::array<index_t, 1> b, index_t, std::array<index_t, 1>) {
      T* const o = out.data_ptr() + m++ * R * C;
      const T* const src = p + b[0];
      parallel_for(R, std::max<index_t>(8, parallel_grain() / std::max<index_t>(C, 1)),
                   [&](index_t i0, index_t i1) { transpose_rows(src, ld, o, C, i0, i1); });
    });
    return out;
  }
  const index_t len = x.shape().empty() ? 1 : x.shape().back();
  parallel_for(row_count(x.shape()), std::max<index_t>(1, parallel_grain() / std::max<index_t>(len, 1)),
               [&](index_t r0, index_t r1) {
                 T* o = out.data_ptr() + r0 * len;
                 for_each_row<1>(
                     x.shape(), {&x.strides()}, {x.offset()},
                     [&](std::array<index_t, 1> b, index_t n, std::array<index_t, 1> s) {
                       if (s[0] == 1) std::copy(p + b[0], p + b[0] + n, o);
                       else
                         for (index_t k = 0; k < n; ++k) o[k] = p[b[0] + k * s[0]];
                       o += n;
                     },
                     r0, r1);
               });
  return out;
}

/// Fills a contiguous tensor with `v`.
template <Element T>
void fill(const tensor<T>& t, T v) {
  std::fill_n(t.data_ptr(), t.numel(), v);
}

/// The dims of size > 1 of a sum (`sum_values`): their sizes and strides in `x` and `out` (0
/// where reduced), whether the innermost one is kept, whether any is reduced.
struct sum_dims {
  shape it;
  strides sx, so;
  bool inner_kept = true, any_reduced = false;
};

inline sum_dims sum_dims_of(const shape& s, const strides& xs, const strides& os, const std::vector<bool>& mask) {
  sum_dims r;
  for (std::size_t d = 0; d < s.size(); ++d)
    if (s[d] != 1) {
      r.it.push_back(s[d]), r.sx.push_back(xs[d]), r.so.push_back(mask[d] ? 0 : os[d]);
      r.inner_kept = !mask[d];
      r.any_reduced = r.any_reduced || mask[d];
    }
  return r;
}

/// A sum over no dim of size > 1: one value per output.
template <Element T>
void copy_values(const shape& it, const strides& sx, const strides& so, index_t offset, const T* p, T* o) {
  for_each_row<2>(it, {&sx, &so}, {offset, 0}, [&](std::array<index_t, 2> b, index_t n, std::array<index_t, 2> st) {
    for (index_t k = 0; k < n; ++k) o[b[1] + k * st[1]] = p[b[0] + k * st[0]];
  });
}

/// The column form, the innermost dim kept: rows along it, an output per element.
/// Blocks of columns (independent outputs) on different threads, each block whole cache
/// lines of the output: every row adds into each block's outputs, so two threads writing
/// halves of one line would trade it back and forth once per row (with blocks narrower than
/// a line, a sum over dim 0 ran slower on 2 threads than on 1: docs/architecture.md,
/// "Every core"). A block narrower than 4 lines reads too little of each row to pay for its
/// thread.
template <Element T>
void sum_columns(const tensor<T>& x, const tensor<T>& out, const shape& it, const strides& sx, const strides& so,
                 const T* p, T* o) {
  const index_t m = it.back(), count = numel(x.shape()) / numel(out.shape());
  constexpr index_t line = std::max<index_t>(static_cast<index_t>(simd<T>::size), 64 / static_cast<index_t>(sizeof(T)));
  const index_t per_column = numel(x.shape()) / m;
  parallel_for(
      m, std::max<index_t>(4 * line, parallel_grain() / std::max<index_t>(per_column, 1)),
      [&](index_t c0, index_t c1) {
        column_sums<T> cs;
        cs.start(o + c0, numel(out.shape()) / m, c1 - c0, count, m);
        for_each_row<2>(it, {&sx, &so}, {x.offset(), 0},
                        [&](std::array<index_t, 2> b, index_t, std::array<index_t, 2> st) {
                          T* const d = o + b[1] + c0;
                          const T* const src = p + b[0] + c0 * st[0];
                          if (st[0] == 1) tile_reduce_into<false>(src, d, c1 - c0);
                          else
                            for (index_t k = 0; k < c1 - c0; ++k) d[k] = d[k] + src[k * st[0]];
                          cs.row_done(b[1] / m);
                        });
        cs.finish();
      },
      line);
}

/// The row form's dims: the kept dims outermost, so each output's rows come one after
/// another, and dims that are one run of memory merged (a contiguous full sum is a single row).
struct row_dims {
  shape rs;
  strides rx, ro;
};

inline row_dims row_form(const shape& it, const strides& sx, const strides& so) {
  row_dims r;
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t d = 0; d < it.size(); ++d)
      if ((so[d] == 0) == (pass == 1)) {
        if (!r.rs.empty() && r.rx.back() == sx[d] * it[d] && r.ro.back() == so[d] * it[d]) {
          r.rs.back() *= it[d], r.rx.back() = sx[d], r.ro.back() = so[d];
        } else {
          r.rs.push_back(it[d]), r.rx.push_back(sx[d]), r.ro.push_back(so[d]);
        }
      }
  return r;
}

/// The row form with an output per row: blocks of outputs (one contiguous sum: blocks of
/// 2^j chunks).
template <Element T>
void sum_each_row(const shape& rs, const strides& rx, const strides& ro, index_t offset, const T* p, T* o) {
  const index_t rows = row_count(rs), len = rs.back();
  if (rows == 1 && rx.back() == 1) {
    o[0] = sum_contiguous(p + offset, len);
    return;
  }
  parallel_for(rows, std::max<index_t>(1, parallel_grain() / len), [&](index_t r0, index_t r1) {
    for_each_row<2>(
        rs, {&rx, &ro}, {offset, 0},
        [&](std::array<index_t, 2> b, index_t n, std::array<index_t, 2> st) {
          o[b[1]] = running_sum<T>::sum(p + b[0], n, st[0]);
        },
        r0, r1);
  });
}

/// The row form with several rows per output (of `outputs`), each output's rows one after
/// another: blocks of outputs.
template <Element T>
void sum_row_runs(const shape& rs, const strides& rx, const strides& ro, index_t offset, index_t outputs, const T* p,
                  T* o) {
  const index_t rows = row_count(rs), len = rs.back();
  const index_t per_output = rows / outputs;
  parallel_for(outputs, std::max<index_t>(1, parallel_grain() / (per_output * len)), [&](index_t o0, index_t o1) {
    running_sum<T> acc;
    T* cur = nullptr;
    for_each_row<2>(
        rs, {&rx, &ro}, {offset, 0},
        [&](std::array<index_t, 2> b, index_t n, std::array<index_t, 2> st) {
          if (o + b[1] != cur) {
            if (cur) *cur = acc.total();
            acc.reset();
            cur = o + b[1];
          }
          acc.add(p + b[0], n, st[0]);
        },
        o0 * per_output, o1 * per_output);
    *cur = acc.total();
  });
}

/// Sums `x` over the dims flagged in `mask` into `out` (contiguous: `x`'s shape with those dims
/// 1), each output's values in row-major order, with the one definition of a sum
/// (core/accumulate.hpp): the row form when the innermost dim of size > 1 is reduced, the
/// column form when it is kept. Dims of size 1 play no part, so the form depends on the
/// shapes only: the fused loops and the IR's programs pick the same one and get the same bits.
template <Element T>
void sum_values(const tensor<T>& x, const std::vector<bool>& mask, tensor<T>& out) {
  const T* p = x.impl()->store->data();
  T* o = out.data_ptr();
  const sum_dims d = sum_dims_of(x.shape(), x.strides(), contiguous_strides(out.shape()), mask);
  if (!d.any_reduced) return copy_values(d.it, d.sx, d.so, x.offset(), p, o);
  if (d.inner_kept) return sum_columns(x, out, d.it, d.sx, d.so, p, o);
  const row_dims r = row_form(d.it, d.sx, d.so);
  if (std::count(r.ro.begin(), r.ro.end(), index_t{0}) == 1) return sum_each_row(r.rs, r.rx, r.ro, x.offset(), p, o);
  sum_row_runs(r.rs, r.rx, r.ro, x.offset(), numel(out.shape()), p, o);
}

/// The max of `n` contiguous values (NaN propagating), on all threads: blocks of whole SIMD
/// batches, each with its own lanes, combined lane by lane in block order (a max keeps the
/// first NaN and, among equal values, the last one: the same bits as one thread's pass).
template <Element T>
T max_contiguous(const T* q, index_t n) {
  using B = simd<T>;
  constexpr index_t W = static_cast<index_t>(B::size);
  const T init = -std::numeric_limits<T>::infinity();
  const block_split s = split_items(n / W, std::max<index_t>(1, parallel_grain() / W));
  auto lanes_of = [&](index_t i0, index_t i1) {
    B acc(init);
    for (index_t i = i0; i < i1; i += W) acc = lanes::max(acc, B::load_unaligned(q + i));
    return acc;
  };
  B acc(init);
  if (s.count <= 1) {
    acc = lanes_of(0, n / W * W);
  } else {
    std::vector<B> part(static_cast<std::size_t>(s.count));
    parallel_blocks(s.count, [&](index_t b) {
      part[static_cast<std::size_t>(b)] = lanes_of(b * s.size * W, std::min(n / W, (b + 1) * s.size) * W);
    });
    for (const B& v : part) acc = lanes::max(acc, v);
  }
  alignas(64) T lanes_buf[W];
  acc.store_aligned(lanes_buf);
  T r = init;
  for (index_t k = 0; k < W; ++k) r = lanes::max(r, lanes_buf[k]);
  for (index_t i = n / W * W; i < n; ++i) r = lanes::max(r, q[i]);
  return r;
}

/// Reduces `x` over the dims flagged in `mask` (one flag per dim): its max, or its sum (for
/// `reduce_op::sum` and `mean`: a mean's caller divides). The result keeps the reduced dims
/// with size 1 (callers squeeze them when keepdim is false).
template <Element T>
tensor<T> reduce_keepdim(const tensor<T>& x, const std::vector<bool>& mask, reduce_op kind) {
  shape out_shape = x.shape();
  for (std::size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) out_shape[d] = 1;
  tensor<T> out = empty<T>(out_shape, kind == reduce_op::max ? "max" : "sum");
  T* o = out.data_ptr();
  const T init = kind == reduce_op::max ? -std::numeric_limits<T>::infinity() : T(0);
  std::fill_n(o, out.numel(), init);
  if (x.numel() == 0) return out;
  if (kind != reduce_op::max) {
    sum_values(x, mask, out);
    return out;
  }
  const T* p = x.impl()->store->data();
  if (x.is_contiguous() && out.numel() == 1) {  // full reduction over contiguous memory
    *o = max_contiguous(p + x.offset(), x.numel());
    return out;
  }
  strides ost = out.strides();
  for (std::size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) ost[d] = 0;
  for_each_row<2>(x.shape(), {&x.strides(), &ost}, {x.offset(), 0},
                  [&](std::array<index_t, 2> b, index_t n, std::array<index_t, 2> s) {
                    for (index_t k = 0; k < n; ++k) {
                      T& r = o[b[1] + k * s[1]];
                      r = lanes::max(r, p[b[0] + k * s[0]]);
                    }
                  });
  return out;
}

}  // namespace fusegrad::detail
