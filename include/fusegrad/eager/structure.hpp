#pragma once
/// \file fusegrad/eager/structure.hpp
/// Structure ops on eager tensors, each with its backward: narrow, split, chunk, stack,
/// repeat (views and cat), flip, index_select, gather, scatter_add (copies whose backwards
/// are opaque `call` nodes in a compiled-autograd capture), tril and triu (`where` with a
/// constant mask, so traced and fused), and the factories arange(start, end, step) and
/// linspace. Indices are checked: a bad one is a `fusegrad::error` naming it. Index tensors
/// hold integers in the element type (fusegrad's tensors are float or double).

#include <cmath>
#include <initializer_list>
#include <vector>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/pointwise.hpp"
#include "fusegrad/eager/lines.hpp"
#include "fusegrad/eager/views.hpp"
#include "fusegrad/ops/where.hpp"

namespace fusegrad {

/// `length` elements of dim `dim` from `start` (a view; PyTorch's `narrow`).
template <Element T>
tensor<T> narrow(const tensor<T>& x, index_t dim, index_t start, index_t length) {
  if (x.dim() == 0) detail::fail("narrow", "cannot narrow a 0-d tensor; expected at least 1 dim");
  const std::size_t d = normalize_dim("narrow", dim, x.dim());
  const index_t n = x.shape()[d], s = start < 0 ? start + n : start;
  if (s < 0 || length < 0 || s + length > n)
    detail::fail("narrow", "start ", start, " and length ", length, " for dim ", d, " of size ", n,
                 "; expected 0 <= start <= start + length <= ", n);
  return slice(x, static_cast<index_t>(d), s, s + length);
}

/// Pieces of `size` elements along `dim` (the last one shorter), as views.
template <Element T>
std::vector<tensor<T>> split(const tensor<T>& x, index_t size, index_t dim = 0) {
  if (x.dim() == 0) detail::fail("split", "cannot split a 0-d tensor; expected at least 1 dim");
  if (size <= 0) detail::fail("split", "split size ", size, "; expected a size > 0");
  const std::size_t d = normalize_dim("split", dim, x.dim());
  std::vector<tensor<T>> r;
  const index_t n = x.shape()[d];
  for (index_t a = 0; a < n || (n == 0 && r.empty()); a += size)
    r.push_back(slice(x, static_cast<index_t>(d), a, std::min(n, a + size)));
  return r;
}
/// `chunks` pieces along `dim` of ceil(n / chunks) elements (fewer when n is small, as PyTorch).
template <Element T>
std::vector<tensor<T>> chunk(const tensor<T>& x, index_t chunks, index_t dim = 0) {
  if (chunks <= 0) detail::fail("chunk", "chunks = ", chunks, "; expected chunks > 0");
  if (x.dim() == 0) detail::fail("chunk", "cannot chunk a 0-d tensor; expected at least 1 dim");
  const index_t n = x.shape()[normalize_dim("chunk", dim, x.dim())];
  return split(x, std::max<index_t>(1, (n + chunks - 1) / chunks), dim);
}

/// Stacks tensors of one shape along a new dim `dim`.
template <Element T>
tensor<T> stack(const std::vector<tensor<T>>& xs, index_t dim = 0) {
  if (xs.empty()) detail::fail("stack", "got an empty list; expected at least one tensor");
  std::vector<tensor<T>> u;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    if (xs[k].shape() != xs[0].shape())
      detail::fail("stack", "tensor ", k, " has shape ", to_string(xs[k].shape()), " but tensor 0 has shape ",
                   to_string(xs[0].shape()), "; expected equal shapes");
    u.push_back(unsqueeze(xs[k], dim));
  }
  return cat(u, dim);
}
/// `stack({a, b}, dim)`: a braced list of tensors.
template <Element T>
tensor<T> stack(std::initializer_list<tensor<T>> xs, index_t dim = 0) {
  return stack(std::vector<tensor<T>>(xs), dim);
}

/// `x` tiled `reps[i]` times along dim i (PyTorch's `repeat`; extra leading reps add dims).
template <Element T>
tensor<T> repeat(const tensor<T>& x, const std::vector<index_t>& reps) {
  if (reps.size() < x.dim())
    detail::fail("repeat", reps.size(), " repeats for a tensor of shape ", to_string(x.shape()),
                 "; expected at least one per dim");
  shape s(reps.size() - x.dim(), 1);
  s.insert(s.end(), x.shape().begin(), x.shape().end());
  shape split_shape, expanded, out;
  for (std::size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0) detail::fail("repeat", "repeat count ", reps[i], " for dim ", i, "; expected counts >= 0");
    split_shape.insert(split_shape.end(), {1, s[i]});
    expanded.insert(expanded.end(), {reps[i], s[i]});
    out.push_back(reps[i] * s[i]);
  }
  return x.reshape(split_shape).expand(expanded).reshape(out);
}

namespace detail {
/// Reverses dim `d` of `x` into a new contiguous tensor.
template <Element T>
tensor<T> flip_values(const tensor<T>& x, std::size_t d) {
  const tensor<T> c = x.detach().contiguous();
  tensor<T> y = empty<T>(x.shape(), "flip");
  const T* xv = c.data();
  T* out = y.data();
  const index_t n = x.shape()[d];
  lines(x.shape(), d).each([&](index_t at, index_t step) {
    for (index_t k = 0; k < n; ++k) out[at + k * step] = xv[at + (n - 1 - k) * step];
  });
  return y;
}
/// The checked integer indices held by `idx` (in [0, n)).
template <Element T>
std::vector<index_t> indices_of(std::string_view op, const tensor<T>& idx, index_t n) {
  std::vector<index_t> r;
  for (T v : idx.detach().to_vector()) {
    if (!(v == std::floor(v)) || v < 0 || v >= static_cast<T>(n))
      fail(op, "index ", v, " out of range; expected an integer in [0, ", n, ")");
    r.push_back(static_cast<index_t>(v));
  }
  return r;
}
/// Position `l` (row-major in `s`) with its coordinate on dim `d` replaced by `k`, in `t`'s
/// row-major order.
inline index_t repoint(index_t l, const shape& s, std::size_t d, index_t k, const shape& t) {
  index_t r = 0, stride = 1;
  for (std::size_t j = s.size(); j-- > 0;) {
    const index_t c = l % s[j];
    l /= s[j];
    r += (j == d ? k : c) * stride;
    stride *= t[j];
  }
  return r;
}
}  // namespace detail

/// `x` reversed along each of `dims`.
template <Element T>
tensor<T> flip(const tensor<T>& x, const std::vector<index_t>& dims) {
  tensor<T> y = x.detach();
  std::vector<std::size_t> ds;
  for (index_t d : dims) ds.push_back(normalize_dim("flip", d, x.dim()));
  for (std::size_t d : ds) y = detail::flip_values(y, d);
  if (ds.empty()) y = y.contiguous().clone();
  detail::record_layout(std::string_view("FlipBackward0"), x, y, [dims](const tensor<T>& g) { return flip(g, dims); });
  return y;
}

/// The slices `indices` of dim `dim`, in that order.
template <Element T>
tensor<T> index_select(const tensor<T>& x, index_t dim, const std::vector<index_t>& indices) {
  if (x.dim() == 0) detail::fail("index_select", "cannot index a 0-d tensor; expected at least 1 dim");
  const std::size_t d = normalize_dim("index_select", dim, x.dim());
  const index_t n = x.shape()[d];
  std::vector<tensor<T>> parts;
  for (index_t i : indices) {
    if (i < 0 || i >= n)
      detail::fail("index_select", "index ", i, " for dim ", d, " of size ", n, "; expected an index in [0, ", n, ")");
  }
  const tensor<T> c = x.detach().contiguous();
  shape to = x.shape();
  to[d] = static_cast<index_t>(indices.size());
  tensor<T> y = detail::empty<T>(to, "index_select");
  for (std::size_t k = 0; k < indices.size(); ++k)
    detail::copy_into(slice(y, static_cast<index_t>(d), static_cast<index_t>(k), static_cast<index_t>(k) + 1),
                      slice(c, static_cast<index_t>(d), indices[k], indices[k] + 1));
  detail::record_layout(
      std::string_view("IndexSelectBackward0"), x, y,
      [from = x.shape(), d, indices](const tensor<T>& g) {
        const auto dd = static_cast<index_t>(d);
        return detail::put_into_zeros<T>(
            "IndexSelectBackwardBackward0", g, from,
            [dd, &indices](tensor<T>& z, const tensor<T>& v) {  // index_add: repeated indices add up
              const tensor<T> gc = v.contiguous();
              for (std::size_t k = 0; k < indices.size(); ++k) {
                tensor<T> dst = slice(z, dd, indices[k], indices[k] + 1);
                detail::copy_into(dst,
                                  tensor<T>(dst + slice(gc, dd, static_cast<index_t>(k), static_cast<index_t>(k) + 1)));
              }
            },
            [dd, indices](const tensor<T>& gg) { return index_select(gg, dd, indices); }, std::nullopt);
      },
      /*traceable=*/false, std::nullopt);
  return y;
}

/// out[p] = x[p with its dim-`dim` coordinate replaced by index[p]] (`index` has x's rank and
/// at most its sizes off `dim`; PyTorch's `gather`).
template <Element T>
tensor<T> gather(const tensor<T>& x, index_t dim, const tensor<T>& index);
/// `x` plus `src[p]` added at p with its dim-`dim` coordinate replaced by index[p].
template <Element T>
tensor<T> scatter_add(const tensor<T>& x, index_t dim, const tensor<T>& index, const tensor<T>& src) {
  const std::size_t d = normalize_dim("scatter_add", dim, std::max<std::size_t>(x.dim(), 1));
  if (index.shape() != src.shape() || index.dim() != x.dim())
    detail::fail("scatter_add", "index of shape ", to_string(index.shape()), " and src of shape ",
                 to_string(src.shape()), " for a tensor of shape ", to_string(x.shape()),
                 "; expected index and src of one shape and x's rank");
  const auto idx = detail::indices_of("scatter_add", index, x.dim() ? x.shape()[d] : 1);
  tensor<T> y = x.detach().contiguous().clone();
  const auto sv = src.detach().to_vector();
  T* out = y.data();
  for (std::size_t l = 0; l < idx.size(); ++l)
    out[detail::repoint(static_cast<index_t>(l), index.shape(), d, idx[l], x.shape())] += sv[l];
  if (detail::needs_grad(x, src))
    detail::record<T>(
        "ScatterAddBackward0", {x, src}, {&y}, {index},
        [dim](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          return std::vector<tensor<T>>{
              g[0], detail::call_opaque<T>(
                        "ScatterAddBackward0", s[0].shape(),
                        [dim](const tensor<T>& gg, const tensor<T>& ii) { return gather(gg, dim, ii); }, g[0], s[0])};
        },
        std::nullopt, detail::double_backward::supported);  // gather and scatter_add: each the other's backward
  return y;
}
template <Element T>
tensor<T> gather(const tensor<T>& x, index_t dim, const tensor<T>& index) {
  const std::size_t d = normalize_dim("gather", dim, std::max<std::size_t>(x.dim(), 1));
  bool ok = index.dim() == x.dim();
  for (std::size_t j = 0; ok && j < x.dim(); ++j) ok = j == d || index.shape()[j] <= x.shape()[j];
  if (!ok)
    detail::fail("gather", "index of shape ", to_string(index.shape()), " for a tensor of shape ", to_string(x.shape()),
                 "; expected the same rank and sizes at most x's off dim ", d);
  const auto idx = detail::indices_of("gather", index, x.dim() ? x.shape()[d] : 1);
  const auto xv = x.detach().to_vector();
  std::vector<T> out(idx.size());
  for (std::size_t l = 0; l < idx.size(); ++l)
    out[l] =
        xv[static_cast<std::size_t>(detail::repoint(static_cast<index_t>(l), index.shape(), d, idx[l], x.shape()))];
  tensor<T> y = from_vector<T>(out, index.shape());
  if (detail::needs_grad(x))
    detail::record<T>(
        "GatherBackward0", {x}, {&y}, {index},
        [dim, from = x.shape()](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          return std::vector<tensor<T>>{detail::call_opaque<T>(
              "GatherBackward0", from,
              [dim, from](const tensor<T>& gg, const tensor<T>& ii) {
                return scatter_add(zeros<T>(from), dim, ii, gg);
              },
              g[0], s[0])};
        },
        std::nullopt, detail::double_backward::supported);
  return y;
}

namespace detail {
/// 1 where column - row >= k (upper) or <= k (lower), for the last two dims of `s`.
template <Element T>
tensor<T> triangle_mask(std::string_view op, const shape& s, index_t k, bool upper) {
  if (s.size() < 2) fail(op, "input of shape ", to_string(s), "; expected at least 2 dims");
  const index_t r = s[s.size() - 2], c = s.back();
  std::vector<T> m(static_cast<std::size_t>(r * c));
  for (index_t i = 0; i < r; ++i)
    for (index_t j = 0; j < c; ++j)
      m[static_cast<std::size_t>(i * c + j)] = (upper ? j - i >= k : j - i <= k) ? T(1) : T(0);
  return from_vector<T>(m, {r, c});
}
}  // namespace detail

/// The lower triangle of the last two dims (j - i <= k), zeros elsewhere.
template <Element T>
tensor<T> tril(const tensor<T>& x, index_t k = 0) {
  return where(detail::triangle_mask<T>("tril", x.shape(), k, false), x, 0.0);
}
/// The upper triangle of the last two dims (j - i >= k), zeros elsewhere.
template <Element T>
tensor<T> triu(const tensor<T>& x, index_t k = 0) {
  return where(detail::triangle_mask<T>("triu", x.shape(), k, true), x, 0.0);
}

/// start, start + step, ... below `end` (above it for a negative step), computed in double.
template <Element T>
tensor<T> arange(double start, double end, double step = 1) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    detail::fail("arange", "start ", start, ", end ", end, ", step ", step,
                 "; expected finite bounds and a nonzero step");
  const double n = std::ceil((end - start) / step);
  std::vector<T> v(static_cast<std::size_t>(std::max(0.0, n)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(start + static_cast<double>(i) * step);
  return from_vector<T>(v);
}
/// `steps` evenly spaced values from `start` to `end` inclusive (PyTorch's formula: from
/// `start` in the first half, from `end` in the second, so both ends are exact).
template <Element T>
tensor<T> linspace(double start, double end, index_t steps) {
  if (steps < 0) detail::fail("linspace", "steps = ", steps, "; expected steps >= 0");
  std::vector<T> v(static_cast<std::size_t>(steps));
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  for (index_t i = 0; i < steps; ++i)
    v[static_cast<std::size_t>(i)] =
        static_cast<T>(steps == 1 || i < steps / 2 ? start + step * static_cast<double>(i)
                                                   : end - step * static_cast<double>(steps - 1 - i));
  return from_vector<T>(v);
}

}  // namespace fusegrad
