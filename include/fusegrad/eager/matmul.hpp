#pragma once
/// \file fusegrad/eager/matmul.hpp
/// Matrix products: `mm` (2-D), `bmm` (3-D batches), `matmul` (NumPy semantics: 1-D
/// vectors, broadcast batch dims) and `linear(x, w, b) = x wᵀ + b`. These are "extern"
/// nodes for the fused paths: fusion groups stop at them.
#include <algorithm>
#include <cmath>

#include "fusegrad/eager/pointwise.hpp"
#include "fusegrad/eager/views.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/matmul.hpp"

namespace fusegrad {
namespace detail {

/// acc + x y: one fused multiply-add where the machine has it (whatever the optimisation level
/// or the compiler's contraction rules: the products' bits do not depend on them), else two steps.
template <Element T>
inline T madd(T x, T y, T acc) {
#if defined(__FMA__)
  return std::fma(x, y, acc);
#else
  return acc + x * y;
#endif
}

/// c's rows [i, i + R) x columns [j, j + U W) (W: a SIMD batch): R x U accumulators in
/// registers, each summed over p in order from +0 with one multiply-add per step (`madd`'s
/// steps, so the scalar columns of `gemm_row_block` give the same bits), a row of b's batches
/// loaded once per p and used by the R rows.
template <index_t R, index_t U, Element T>
[[gnu::always_inline]] inline void gemm_tile(const T* __restrict a, const T* __restrict b, T* __restrict c, index_t i,
                                             index_t j, index_t k, index_t m, index_t ai, index_t ap) {
  using V = simd<T>;
  constexpr index_t W = static_cast<index_t>(V::size);
  V acc[R][U];
  for (index_t r = 0; r < R; ++r)
    for (index_t u = 0; u < U; ++u) acc[r][u] = V(T(0));
  const T* const ar = a + i * ai;
  for (index_t p = 0; p < k; ++p) {
    V bv[U];
    for (index_t u = 0; u < U; ++u) bv[u] = V::load_unaligned(b + p * m + j + u * W);
    for (index_t r = 0; r < R; ++r) {
      const V av(ar[r * ai + p * ap]);
#if defined(__FMA__)
      for (index_t u = 0; u < U; ++u) acc[r][u] = xsimd::fma(av, bv[u], acc[r][u]);
#else
      for (index_t u = 0; u < U; ++u) acc[r][u] = acc[r][u] + av * bv[u];
#endif
    }
  }
  for (index_t r = 0; r < R; ++r)
    for (index_t u = 0; u < U; ++u) acc[r][u].store_unaligned(c + (i + r) * m + j + u * W);
}

/// Rows [i, i + R) of c: two batches of columns at a time, then one, then the last columns
/// one by one (the same steps per element).
template <index_t R, Element T>
void gemm_row_block(const T* __restrict a, const T* __restrict b, T* __restrict c, index_t i, index_t k, index_t m,
                    index_t ai, index_t ap) {
  constexpr index_t W = static_cast<index_t>(simd<T>::size);
  index_t j = 0;
  for (; j + 2 * W <= m; j += 2 * W) gemm_tile<R, 2>(a, b, c, i, j, k, m, ai, ap);
  for (; j + W <= m; j += W) gemm_tile<R, 1>(a, b, c, i, j, k, m, ai, ap);
  for (; j < m; ++j)
    for (index_t r = 0; r < R; ++r) {
      T acc{};
      for (index_t p = 0; p < k; ++p) acc = madd<T>(a[(i + r) * ai + p * ap], b[p * m + j], acc);
      c[(i + r) * m + j] = acc;
    }
}

/// Rows [i0, i1) of c[n×m] = a[n×k] · b[k×m], b and c contiguous row-major, a's element
/// (i, p) at `a[i * ai + p * ap]` (row-major: ai = k, ap = 1; a transposed view: ai = 1,
/// ap = n): tiles of 4 rows x 2 SIMD batches of c held in registers over the whole sum
/// (`gemm_tile`). An element of c is summed over p in order from +0 whatever the tiles and
/// a's layout, so every cut (and every thread count) gives the same bits.
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the narrow-m loop nest beside the tiled one
void gemm_rows(const T* __restrict a, const T* __restrict b, T* __restrict c, index_t i0, index_t i1, index_t k,
               index_t m, index_t ai, index_t ap) {
  if (m < 4) {
    // A column or a few (a layer with one output, its backward): the loop over m below would
    // be scalar, each addition waiting on the last through memory. Eight rows side by side
    // instead, each output's sum in a register: the same steps in the same order (from +0,
    // over p), so the same bits.
    for (index_t j = 0; j < m; ++j) {
      index_t i = i0;
      for (; i + 8 <= i1; i += 8) {
        T acc[8] = {};
        for (index_t p = 0; p < k; ++p) {
          const T bp = b[p * m + j];
          for (index_t r = 0; r < 8; ++r) acc[r] = madd<T>(a[(i + r) * ai + p * ap], bp, acc[r]);
        }
        for (index_t r = 0; r < 8; ++r) c[(i + r) * m + j] = acc[r];
      }
      for (; i < i1; ++i) {
        T acc{};
        for (index_t p = 0; p < k; ++p) acc = madd<T>(a[i * ai + p * ap], b[p * m + j], acc);
        c[i * m + j] = acc;
      }
    }
    return;
  }
  index_t i = i0;
  for (; i + 4 <= i1; i += 4) gemm_row_block<4>(a, b, c, i, k, m, ai, ap);
  for (; i < i1; ++i) gemm_row_block<1>(a, b, c, i, k, m, ai, ap);
}

/// True when `a`'s last two dims are a contiguous matrix transposed (`w.t()` of a contiguous w,
/// `x.transpose(1, 2)` of a contiguous [B, k, n] x: its matrices one after another):
/// `gemm_rows` reads them in place.
template <Element T>
bool transposed_matrices(const tensor<T>& a) {
  const auto& s = a.shape();
  const auto& st = a.strides();
  const std::size_t r = s.size();
  if (r < 2 || r > 3) return false;
  const index_t n = s[r - 2], k = s[r - 1];
  return n > 1 && k > 1 && st[r - 2] == 1 && st[r - 1] == n && (r == 2 || s[0] == 1 || st[0] == n * k);
}

/// [B,n,k] x [B,k,m]: blocks of the B·n output rows on all threads. `a` is read in place
/// whatever its strides (a transposed view, an expanded gradient: `gemm_rows` takes its row and
/// column steps); `b` is copied when it is not contiguous, except in a row vector times
/// transposed matrices (x wᵀ, `linear` on one sample), computed as w xᵀ with w read in place.
/// Every element of c is summed over p in order from +0 with one multiply-add per step, so
/// each form gives the bits of the copied one.
template <Element T>
tensor<T> bmm_values(const tensor<T>& a, const tensor<T>& b) {
  const index_t B = a.shape()[0], n = a.shape()[1], k = a.shape()[2], m = b.shape()[2];
  const auto& as = a.strides();
  const index_t aq = B == 1 ? 0 : as[0];  // a's batch step
  if (n == 1 && as[2] == 1 && !b.is_contiguous() && transposed_matrices(b)) {
    tensor<T> c = empty<T>({B, 1, m}, "matmul");
    if (c.numel() == 0) return c;
    const T* pa = a.data_ptr();
    const T* pb = b.data_ptr();
    T* pc = c.data_ptr();
    // c's row q is w_q x_q: w_q [m, k] row-major (b's matrix q transposed), x_q a column.
    const index_t grain_rows = std::max<index_t>(1, 4 * parallel_grain() / std::max<index_t>(k, 1));
    for (index_t q = 0; q < B; ++q)
      parallel_for(m, grain_rows, [&](index_t r0, index_t r1) {
        gemm_rows(pb + q * k * m, pa + q * aq, pc + q * m, r0, r1, k, 1, k, 1);
      });
    return c;
  }
  const tensor<T> bc = b.is_contiguous() ? b : detail::contiguous_copy(b);
  tensor<T> c = empty<T>({B, n, m}, "matmul");
  if (c.numel() == 0) return c;
  if (k == 0) {  // sums of nothing, +0 as `gemm_rows` gives; a and b may hold no storage to offset
    std::fill_n(c.data_ptr(), c.numel(), T(0));
    return c;
  }
  const T* pa = a.data_ptr();
  const T* pb = bc.data_ptr();
  T* pc = c.data_ptr();
  const index_t ai = as[1], ap = as[2];
  // About 4 multiply-adds per element of the grain (one SIMD madd costs less than a cheap op).
  const index_t grain_rows = std::max<index_t>(1, 4 * parallel_grain() / std::max<index_t>(k * m, 1));
  parallel_for(B * n, grain_rows, [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1;) {  // rows of one batch at a time
      const index_t i = r / n, e = std::min(r1, (i + 1) * n);
      gemm_rows(pa + i * aq, pb + i * k * m, pc + i * n * m, r - i * n, e - i * n, k, m, ai, ap);
      r = e;
    }
  });
  return c;
}

/// The number of rows of `t` [..., k]: the product of its leading dims.
template <Element T>
index_t leading_count(const tensor<T>& t) {
  index_t n = 1;
  for (std::size_t d = 0; d + 1 < t.dim(); ++d) n *= t.shape()[d];
  return n;
}

/// `t` itself where `as_rows` can read it in place (1-D or 2-D with any strides, or contiguous),
/// else a contiguous copy (the same values).
template <Element T>
tensor<T> row_readable(const tensor<T>& t) {
  return t.dim() <= 2 || t.is_contiguous() ? t : detail::contiguous_copy(t);
}

/// `t` [..., k] (as `row_readable` returns it) as the matrix of its rows [1, rows, k], or with
/// `transposed` as that matrix's transpose [1, k, rows]: a view, nothing copied. A dense `t`
/// steps by k and 1, whatever strides its dims of size 1 carry (a permuted [1, 4, 1, 1] view
/// has strides [4, 1, 4, 4]: its rows do not step by the 4 of the dim of size 1 before the last).
template <Element T>
tensor<T> as_rows(const tensor<T>& t, bool transposed) {
  const auto& st = t.strides();
  const index_t k = t.shape().back(), rows = leading_count(t);
  const bool dense = t.is_contiguous();
  const index_t row_step = dense || t.dim() < 2 ? k : st[t.dim() - 2], col_step = dense ? 1 : st.back();
  return transposed ? alias(t, {1, k, rows}, {0, col_step, row_step}, t.offset())
                    : alias(t, {1, rows, k}, {0, row_step, col_step}, t.offset());
}

}  // namespace detail

/// Batched matrix product of [B, n, k] and [B, k, m] tensors.
template <Element T>
tensor<T> bmm(const tensor<T>& a, const tensor<T>& b) {
  if (a.dim() != 3 || b.dim() != 3 || a.shape()[0] != b.shape()[0] || a.shape()[2] != b.shape()[1])
    detail::fail("bmm", "shapes ", to_string(a.shape()), " and ", to_string(b.shape()),
                 " cannot be multiplied; expected [B, n, k] and [B, k, m]");
  tensor<T> y = detail::bmm_values(a, b);
  if (detail::needs_grad(a, b)) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    detail::record<T>(
        "BmmBackward0", {a, b}, {&y}, {a, b},
        [ga, gb](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          std::vector<tensor<T>> r(2);
          // Opaque calls in a traced backward (compiled autograd): matmul is not in the IR.
          if (ga)
            r[0] = detail::call_opaque<T>(
                "bmm", s[0].shape(), [](const tensor<T>& gy, const tensor<T>& b) { return bmm(gy, b.transpose(1, 2)); },
                g[0], s[1]);
          // b a transposed view (x.transpose(1, 2)): its gradient as one too,
          // (gyᵀ a)ᵀ, so that the view's backward hands x a contiguous gradient
          // (the same products summed in the same order: the same bits).
          if (gb && detail::transposed_matrices(s[1]))
            r[1] = detail::call_opaque<T>(
                "bmm_bt", s[1].shape(),
                [](const tensor<T>& gy, const tensor<T>& a) { return bmm(gy.transpose(1, 2), a).transpose(1, 2); },
                g[0], s[0]);
          else if (gb)
            r[1] = detail::call_opaque<T>(
                "bmm", s[1].shape(), [](const tensor<T>& gy, const tensor<T>& a) { return bmm(a.transpose(1, 2), gy); },
                g[0], s[0]);
          return r;
        },
        detail::params_of(ga, gb), detail::double_backward::supported);
  }
  return y;
}

/// Matrix product of [n, k] and [k, m] tensors.
template <Element T>
tensor<T> mm(const tensor<T>& a, const tensor<T>& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.shape()[1] != b.shape()[0])
    detail::fail("mm", "shapes ", to_string(a.shape()), " and ", to_string(b.shape()),
                 " cannot be multiplied; expected [n, k] and [k, m]");
  auto as3 = [](const tensor<T>& t) {
    return detail::alias(t, {1, t.shape()[0], t.shape()[1]}, {0, t.strides()[0], t.strides()[1]}, t.offset());
  };
  tensor<T> c3 = detail::bmm_values(as3(a), as3(b));
  tensor<T> y = detail::alias(c3, {a.shape()[0], b.shape()[1]}, contiguous_strides({a.shape()[0], b.shape()[1]}), 0);
  if (detail::needs_grad(a, b)) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    detail::record<T>(
        "MmBackward0", {a, b}, {&y}, {a, b},
        [ga, gb](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          std::vector<tensor<T>> r(2);
          if (ga)
            r[0] = detail::call_opaque<T>(
                "mm", s[0].shape(), [](const tensor<T>& gy, const tensor<T>& b) { return mm(gy, b.t()); }, g[0], s[1]);
          // b a transposed view (w.t(), as `linear` passes it): its gradient as
          // one too, (gyᵀ a)ᵀ, so that the view's backward hands w a contiguous
          // gradient (PyTorch's mm_mat2_backward; the same products summed in
          // the same order: the same bits).
          if (gb && detail::transposed_matrices(s[1]))
            r[1] = detail::call_opaque<T>(
                "mm_bt", s[1].shape(), [](const tensor<T>& gy, const tensor<T>& a) { return mm(gy.t(), a).t(); }, g[0],
                s[0]);
          else if (gb)
            r[1] = detail::call_opaque<T>(
                "mm", s[1].shape(), [](const tensor<T>& gy, const tensor<T>& a) { return mm(a.t(), gy); }, g[0], s[0]);
          return r;
        },
        detail::params_of(ga, gb), detail::double_backward::supported);
  }
  return y;
}

/// NumPy/PyTorch `matmul`: vector·vector, matrix·vector, vector·matrix, matrix·matrix, and
/// batched products whose batch dims broadcast.
template <Element T>
tensor<T> matmul(const tensor<T>& a, const tensor<T>& b) {
  detail::check_matmul(a.shape(), b.shape());
  const std::size_t ra = a.dim(), rb = b.dim();
  const index_t ka = a.shape()[ra - 1];
  if (ra == 1 && rb == 1) return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (ra == 2 && rb == 1) return mm(a, b.unsqueeze(1)).squeeze(1);
  if (ra == 1 && rb == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (ra == 2 && rb == 2) return mm(a, b);
  // Batched: promote vectors, broadcast batch dims, flatten them into one.
  const tensor<T> A = ra == 1 ? a.unsqueeze(0) : a, Bt = rb == 1 ? b.unsqueeze(1) : b;
  const shape sa(A.shape().begin(), A.shape().end() - 2), sb(Bt.shape().begin(), Bt.shape().end() - 2);
  const shape batch = broadcast_shapes("matmul", sa, sb);
  const index_t n = A.shape()[A.dim() - 2], k = ka, m = Bt.shape()[Bt.dim() - 1], nb = numel(batch);
  shape ea = batch, eb = batch, out = batch;
  ea.insert(ea.end(), {n, k});
  eb.insert(eb.end(), {k, m});
  out.insert(out.end(), {n, m});
  tensor<T> y = bmm(A.expand(ea).reshape({nb, n, k}), Bt.expand(eb).reshape({nb, k, m})).reshape(out);
  if (ra == 1) y = y.squeeze(-2);
  if (rb == 1) y = y.squeeze(-1);
  return y;
}

/// `x wᵀ + b` with x [..., in], w [out, in] and an optional bias b [out]: one tape node
/// (`LinearBackward0`, as PyTorch's `addmm` is one), not a transpose, a product and an add
/// (and, for a vector x, an unsqueeze and a squeeze). The values are those of
/// `matmul(x, w.t()) + b`, bit for bit: the same products summed in the same order, then the
/// bias added; the gradients those of that composition (gx = gy w, gw = gyᵀ x over x's rows,
/// gb = gy summed over them), written with the public ops, so differentiable again.
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the op with its backward rule's lambdas
tensor<T> linear(const tensor<T>& x, const tensor<T>& w, const tensor<T>& b = {}) {
  detail::check_linear(x.shape(), w.shape());
  if (b.defined() && (b.dim() != 1 || b.shape()[0] != w.shape()[0]))
    detail::fail("linear", "bias of shape ", to_string(b.shape()), " does not fit weight ", to_string(w.shape()),
                 "; expected bias [", w.shape()[0], "]");
  const index_t in = w.shape()[1], out = w.shape()[0];
  // x as [1, rows, in] (read in place when it is 1-D or 2-D, whatever its strides), w as the
  // transposed matrix [1, in, out].
  const tensor<T> xc = detail::row_readable(x);
  const index_t rows = detail::leading_count(x);
  const tensor<T> wt = detail::alias(w, {1, in, out}, {0, w.strides()[1], w.strides()[0]}, w.offset());
  tensor<T> c = detail::bmm_values(detail::as_rows(xc, false), wt);
  shape ys(x.shape().begin(), x.shape().end() - 1);
  ys.push_back(out);
  tensor<T> y = detail::alias(c, ys, contiguous_strides(ys), 0);
  if (b.defined() && rows > 0 && out > 0) {  // the bias, added to each row (one rounding, as y + b)
    const tensor<T> bc = b.is_contiguous() ? b : b.contiguous();
    const T* __restrict pb = bc.data_ptr();
    T* __restrict py = c.data_ptr();
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < out; ++j) py[r * out + j] += pb[j];
  }
  if (detail::needs_grad(x, w, b)) {
    const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
    detail::record<T>(
        "LinearBackward0", {x, w, b}, {&y}, {x, w},
        [gx, gw, gb](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          std::vector<tensor<T>> r(3);
          // Opaque calls in a traced backward (compiled autograd): matmul is not in the IR.
          // Without a graph to record (no create_graph), the products are computed from the
          // operands read in place, as the forward does: the same products summed in the same
          // order as the public ops' (the same bits), without their views and checks.
          if (gx)
            r[0] = detail::call_opaque<T>(
                "linear_dx", s[0].shape(),
                [](const tensor<T>& gy, const tensor<T>& w) {
                  if (detail::needs_grad(gy, w)) return matmul(gy, w);
                  const auto& ws = w.strides();
                  const index_t o = w.shape()[0], i = w.shape()[1];
                  const tensor<T> w3 = detail::alias(w, {1, o, i}, {0, ws[0], ws[1]}, w.offset());
                  tensor<T> c = detail::bmm_values(detail::as_rows(detail::row_readable(gy), false), w3);
                  shape xs(gy.shape().begin(), gy.shape().end() - 1);
                  xs.push_back(i);
                  return detail::alias(c, xs, contiguous_strides(xs), 0);
                },
                g[0], s[1]);
          if (gw)
            r[1] = detail::call_opaque<T>(
                "linear_dw", s[1].shape(),
                [](const tensor<T>& gy, const tensor<T>& x) {
                  const index_t o = gy.shape().back(), i = x.shape().back();
                  if (detail::needs_grad(gy, x)) {
                    const index_t n = o == 0 ? 0 : gy.numel() / o;
                    return mm(gy.reshape({n, o}).t(), x.reshape({n, i}));
                  }
                  tensor<T> c = detail::bmm_values(detail::as_rows(detail::row_readable(gy), true),
                                                   detail::as_rows(detail::row_readable(x), false));
                  return detail::alias(c, {o, i}, {i, 1}, 0);
                },
                g[0], s[0]);
          if (gb) r[2] = detail::sum_to(g[0], shape{g[0].shape().back()});
          return r;
        },
        detail::params_of(gx, gw, gb), detail::double_backward::supported);
  }
  return y;
}

}  // namespace fusegrad
