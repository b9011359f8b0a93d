#pragma once
/// \file fusegrad/eager/scan.hpp
/// Reductions and scans along one dim that are loops over lines rather than element-wise
/// ops: `prod` (exact with zeros: its gradient is the product of the other elements, by
/// prefix and suffix products), `cumsum`, `cumprod`, `argmax` and `argmin` (indices as the
/// element type, no gradient; NaN counts as the extreme, the first index wins ties, as
/// PyTorch). Under `fg::jit` they are sync points (graph breaks); in a compiled-autograd
/// capture their backward is one opaque `call` node.

#include <algorithm>
#include <cmath>
#include <vector>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/lines.hpp"
#include "fusegrad/eager/structure.hpp"
#include "fusegrad/eager/views.hpp"

namespace fusegrad {

template <Element T>
tensor<T> cumsum(const tensor<T>& x, index_t dim);
template <Element T>
tensor<T> cumprod(const tensor<T>& x, index_t dim);

namespace detail {

/// For each line, grad[k] = g · Π_{j≠k} x[j] (prefix times suffix products: exact with zeros).
template <Element T>
tensor<T> prod_backward(const tensor<T>& g, const tensor<T>& x, std::size_t d) {
  const tensor<T> gc = g.contiguous(), xc = x.contiguous();
  tensor<T> r = empty<T>(x.shape(), "prod");
  const T* xv = xc.data();
  const T* gv = gc.data();
  T* out = r.data();
  const lines L(x.shape(), d);
  index_t line = 0;
  std::vector<T> pre(static_cast<std::size_t>(L.n) + 1);
  L.each([&](index_t at, index_t step) {
    const T gl = gv[line++];
    pre[0] = T(1);
    for (index_t k = 0; k < L.n; ++k)
      pre[static_cast<std::size_t>(k) + 1] = pre[static_cast<std::size_t>(k)] * xv[at + k * step];
    T suf = T(1);
    for (index_t k = L.n; k-- > 0;) {
      out[at + k * step] = gl * (pre[static_cast<std::size_t>(k)] * suf);
      suf *= xv[at + k * step];
    }
  });
  return r;
}

// In a create_graph backward (grad mode on, an operand with a history) the rules below are
// written with recording ops, so that they are differentiable again, any number of times;
// otherwise they are the kernels above and below. Both are exact with zeros.

/// Π_{i<k} x_i along `d` (1 at k = 0), recorded: cumprod of x shifted by one.
template <Element T>
tensor<T> exclusive_cumprod(const tensor<T>& x, std::size_t d) {
  const index_t n = x.shape()[d];
  const auto di = static_cast<index_t>(d);
  if (n <= 1) return ones_like(x);
  return cumprod(cat(std::vector<tensor<T>>{ones_like(narrow(x, di, 0, 1)), narrow(x, di, 0, n - 1)}, di), di);
}
/// prod's gradient, recorded: g · (Π_{i<k} x_i) · (Π_{i>k} x_i) (`g` keeps dim `d`).
template <Element T>
tensor<T> prod_backward_recorded(const tensor<T>& g, const tensor<T>& x, std::size_t d) {
  const std::vector<index_t> dim{static_cast<index_t>(d)};
  return g * exclusive_cumprod(x, d) * flip(exclusive_cumprod(flip(x, dim), d), dim);
}
/// cumsum's gradient, recorded: the reversed running sum of `g`.
template <Element T>
tensor<T> cumsum_backward_recorded(const tensor<T>& g, std::size_t d) {
  const std::vector<index_t> dim{static_cast<index_t>(d)};
  return flip(cumsum(flip(g, dim), static_cast<index_t>(d)), dim);
}
/// cumprod's gradient, recorded: (Π_{i<k} x_i) · R_k with R_{n-1} = g_{n-1} and
/// R_k = g_k + x_{k+1} R_{k+1} (Σ_{j>=k} g_j Π_{k<i<=j} x_i: no division, exact with zeros).
template <Element T>
tensor<T> cumprod_backward_recorded(const tensor<T>& g, const tensor<T>& x, std::size_t d) {
  const index_t n = x.shape()[d];
  const auto di = static_cast<index_t>(d);
  if (n == 0) return g;
  std::vector<tensor<T>> r(static_cast<std::size_t>(n));
  r.back() = select(g, di, n - 1);
  for (index_t k = n - 1; k-- > 0;)
    r[static_cast<std::size_t>(k)] = select(g, di, k) + select(x, di, k + 1) * r[static_cast<std::size_t>(k) + 1];
  return exclusive_cumprod(x, d) * stack(r, di);
}
}  // namespace detail

/// The product of the elements along `dim` (PyTorch's `prod(x, dim, keepdim)`).
template <Element T>
tensor<T> prod(const tensor<T>& x, index_t dim, bool keepdim = false) {
  auto [c, d] = detail::line_input("prod", x, dim);
  const detail::lines L(c.shape(), d);
  tensor<T> y = detail::empty<T>(x.dim() == 0 ? shape{} : detail::drop_dim(x.shape(), d, keepdim), "prod");
  const T* xv = c.data();
  T* out = y.data();
  index_t line = 0;
  L.each([&](index_t at, index_t step) {
    T p = T(1);
    for (index_t k = 0; k < L.n; ++k) p *= xv[at + k * step];
    out[line++] = p;
  });
  if (detail::needs_grad(x))
    detail::record<T>(
        "ProdBackward1", {x}, {&y}, {x},
        [d = d, cs = c.shape(), xs = x.shape()](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          return std::vector<tensor<T>>{detail::call_opaque<T>(
              "ProdBackward1", xs,
              [d, cs, xs](const tensor<T>& gg, const tensor<T>& xx) {
                const tensor<T> gk = gg.reshape(detail::drop_dim(cs, d, true));
                if (detail::needs_grad(gg, xx))
                  return tensor<T>(detail::prod_backward_recorded(gk, xx.reshape(cs), d).reshape(xs));
                return detail::prod_backward(gk.contiguous(), xx.reshape(cs), d).reshape(xs);
              },
              g[0], s[0])};
        },
        std::nullopt, detail::double_backward::supported);
  return y;
}
/// The product of all elements (a 0-d tensor).
template <Element T>
tensor<T> prod(const tensor<T>& x) {
  return prod(x.dim() == 0 ? x : x.reshape({-1}), 0);
}

/// Running sum along `dim`; its gradient is the reversed running sum of the gradient.
template <Element T>
tensor<T> cumsum(const tensor<T>& x, index_t dim) {
  auto [c, d] = detail::line_input("cumsum", x, dim);
  tensor<T> y = detail::empty<T>(x.shape(), "cumsum");
  const T* xv = c.data();
  T* out = y.data();
  detail::lines(c.shape(), d).each([&, n = c.dim() ? c.shape()[d] : 1](index_t at, index_t step) {
    T s = T(0);
    for (index_t k = 0; k < n; ++k) out[at + k * step] = s += xv[at + k * step];
  });
  if (detail::needs_grad(x))
    detail::record<T>(
        "CumsumBackward0", {x}, {&y}, {},
        [d = d, cs = c.shape(), xs = x.shape()](const std::vector<tensor<T>>&, std::vector<tensor<T>>& g) {
          return std::vector<tensor<T>>{detail::call_opaque<T>(
              "CumsumBackward0", xs,
              [d, cs, xs](const tensor<T>& gg, const tensor<T>&) {
                if (detail::needs_grad(gg))
                  return tensor<T>(detail::cumsum_backward_recorded(gg.reshape(cs), d).reshape(xs));
                const tensor<T> gc = gg.contiguous().reshape(cs);
                tensor<T> r = detail::empty<T>(cs, "cumsum");
                const T* gv = gc.data();
                T* out = r.data();
                const index_t n = cs[d];
                detail::lines(cs, d).each([&](index_t at, index_t step) {
                  T s = T(0);
                  for (index_t k = n; k-- > 0;) out[at + k * step] = s += gv[at + k * step];
                });
                return r.reshape(xs);
              },
              g[0])};
        },
        std::nullopt, detail::double_backward::supported);
  return y;
}

/// Running product along `dim`. Gradient: Σ_{j>=k} g_j y_j / x_k on a line without zeros,
/// and the products of the other factors, term by term, on a line with one.
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the op with its backward rule's lambdas
tensor<T> cumprod(const tensor<T>& x, index_t dim) {
  auto [c, d] = detail::line_input("cumprod", x, dim);
  tensor<T> y = detail::empty<T>(x.shape(), "cumprod");
  const T* xv = c.data();
  T* out = y.data();
  detail::lines(c.shape(), d).each([&, n = c.dim() ? c.shape()[d] : 1](index_t at, index_t step) {
    T p = T(1);
    for (index_t k = 0; k < n; ++k) out[at + k * step] = p *= xv[at + k * step];
  });
  if (detail::needs_grad(x))
    detail::record<T>(
        "CumprodBackward0", {x}, {&y}, {x},
        [d = d, cs = c.shape(), xs = x.shape()](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          return std::vector<tensor<T>>{detail::call_opaque<T>(
              "CumprodBackward0", xs,
              [d, cs, xs](const tensor<T>& gg, const tensor<T>& xx) {
                if (detail::needs_grad(gg, xx))
                  return tensor<T>(detail::cumprod_backward_recorded(gg.reshape(cs), xx.reshape(cs), d).reshape(xs));
                const tensor<T> gc = gg.contiguous().reshape(cs), xc = xx.contiguous().reshape(cs);
                tensor<T> r = detail::empty<T>(cs, "cumprod");
                const T* gv = gc.data();
                const T* xv = xc.data();
                T* out = r.data();
                const index_t n = cs[d];
                detail::lines(cs, d).each([&](index_t at, index_t step) {
                  for (index_t k = 0; k < n; ++k) {  // Σ_{j>=k} g_j Π_{i<=j, i!=k} x_i
                    T acc = T(0), p = T(1);
                    for (index_t i = 0; i < k; ++i) p *= xv[at + i * step];
                    for (index_t j = k; j < n; ++j) {
                      if (j > k) p *= xv[at + j * step];
                      acc += gv[at + j * step] * p;
                    }
                    out[at + k * step] = acc;
                  }
                });
                return r.reshape(xs);
              },
              g[0], s[0])};
        },
        std::nullopt, detail::double_backward::supported);
  return y;
}

namespace detail {
template <bool Max, Element T>
tensor<T> arg_extreme(std::string_view op, const tensor<T>& x, index_t dim, bool keepdim) {
  auto [c, d] = line_input(op, x, dim);
  const lines L(c.shape(), d);
  if (L.n == 0) fail(op, "cannot reduce an empty dim (shape ", to_string(x.shape()), "); expected a non-empty dim");
  tensor<T> y = empty<T>(x.dim() == 0 ? shape{} : drop_dim(x.shape(), d, keepdim), op);
  const T* xv = c.data();
  T* out = y.data();
  index_t line = 0;
  L.each([&](index_t at, index_t step) {
    index_t best = 0;
    T bv = xv[at];
    for (index_t k = 1; k < L.n && !std::isnan(bv); ++k) {
      const T v = xv[at + k * step];
      if (std::isnan(v) || (Max ? v > bv : v < bv)) {
        best = k;
        bv = v;
      }
    }
    out[line++] = static_cast<T>(best);
  });
  return y;
}
}  // namespace detail

/// The index of the largest element along `dim` (as the element type; no gradient).
template <Element T>
tensor<T> argmax(const tensor<T>& x, index_t dim, bool keepdim = false) {
  return detail::arg_extreme<true>("argmax", x, dim, keepdim);
}
/// The index of the largest element of the flattened tensor.
template <Element T>
tensor<T> argmax(const tensor<T>& x) {
  return argmax(x.dim() == 0 ? x : x.reshape({-1}), 0);
}
/// The index of the smallest element along `dim`.
template <Element T>
tensor<T> argmin(const tensor<T>& x, index_t dim, bool keepdim = false) {
  return detail::arg_extreme<false>("argmin", x, dim, keepdim);
}
template <Element T>
tensor<T> argmin(const tensor<T>& x) {
  return argmin(x.dim() == 0 ? x : x.reshape({-1}), 0);
}

}  // namespace fusegrad
