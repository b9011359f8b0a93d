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
#include "fusegrad/eager/views.hpp"

namespace fusegrad {
namespace detail {

/// The lines of a tensor of shape `s` along dim `d`: `outer` blocks of `n` elements, `inner`
/// apart; line (o, i) starts at o * n * inner + i.
struct lines {
  index_t outer = 1, n = 1, inner = 1;
  lines(const shape& s, std::size_t d) {
    for (std::size_t k = 0; k < s.size(); ++k) (k < d ? outer : k == d ? n : inner) *= s[k];
  }
  template <class F>
  void each(F f) const {  // f(first element, stride)
    for (index_t o = 0; o < outer; ++o)
      for (index_t i = 0; i < inner; ++i) f(o * n * inner + i, inner);
  }
};

/// `x` as a contiguous tensor viewed with one dim (a 0-d tensor becomes [1]).
template <Element T>
std::pair<tensor<T>, std::size_t> line_input(std::string_view op, const tensor<T>& x, index_t dim) {
  const tensor<T> c = x.detach().contiguous();
  if (x.dim() == 0) return {c.reshape({1}), 0};
  return {c, normalize_dim(op, dim, x.dim())};
}

/// The reduced shape of `s` over dim `d`.
inline shape drop_dim(const shape& s, std::size_t d, bool keepdim) {
  shape r = s;
  if (s.empty()) return r;
  if (keepdim) r[d] = 1;
  else r.erase(r.begin() + static_cast<std::ptrdiff_t>(d));
  return r;
}

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
    for (index_t k = 0; k < L.n; ++k) pre[static_cast<std::size_t>(k) + 1] = pre[static_cast<std::size_t>(k)] * xv[at + k * step];
    T suf = T(1);
    for (index_t k = L.n; k-- > 0;) {
      out[at + k * step] = gl * (pre[static_cast<std::size_t>(k)] * suf);
      suf *= xv[at + k * step];
    }
  });
  return r;
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
    detail::record<T>("ProdBackward1", {x}, {&y}, {x},
                      [d = d, cs = c.shape(), xs = x.shape()](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
                        return std::vector<tensor<T>>{detail::call_opaque<T>(
                            "ProdBackward1", xs,
                            [d, cs, xs](const tensor<T>& gg, const tensor<T>& xx) {
                              return detail::prod_backward(gg.contiguous().reshape(detail::drop_dim(cs, d, true)), xx.reshape(cs), d).reshape(xs);
                            },
                            g[0], s[0])};
                      });
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
    detail::record<T>("CumsumBackward0", {x}, {&y}, {},
                      [d = d, cs = c.shape(), xs = x.shape()](const std::vector<tensor<T>>&, std::vector<tensor<T>>& g) {
                        return std::vector<tensor<T>>{detail::call_opaque<T>(
                            "CumsumBackward0", xs,
                            [d, cs, xs](const tensor<T>& gg, const tensor<T>&) {
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
                      });
  return y;
}

/// Running product along `dim`. Gradient: Σ_{j>=k} g_j y_j / x_k on a line without zeros,
/// and the products of the other factors, term by term, on a line with one.
template <Element T>
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
    detail::record<T>("CumprodBackward0", {x}, {&y}, {x},
                      [d = d, cs = c.shape(), xs = x.shape()](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
                        return std::vector<tensor<T>>{detail::call_opaque<T>(
                            "CumprodBackward0", xs,
                            [d, cs, xs](const tensor<T>& gg, const tensor<T>& xx) {
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
                      });
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
