#pragma once
// The registry's second table: ops that are not element-wise (reductions, the softmax family,
// scans, structure ops, linear algebra). An entry is a generic callable on tensors with the
// operand shapes to run it on, the paths it runs on, and (for reductions along the last dim)
// a reference per row plus edge rows with their expected results. The generated tests
// (tests/opinfo/test_opinfo_structured.cpp): values against the reference, edge rows, gradcheck in
// double, fg::jit and compiled autograd (and fg::compile where `compiles`) against eager.
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "opinfo.hpp"

namespace opinfo {
namespace fg = fusegrad;

/// A row reduction or row map along the last dim: the expected results of one row.
using row_ref = std::vector<long double> (*)(const std::vector<long double>&);

/// An edge row and its expected results.
struct edge_row {
  std::vector<double> row, want;
};

template <std::size_t N, class F, bool Compiles>
struct sinfo {
  static constexpr std::size_t arity = N;
  static constexpr bool compiles = Compiles;  ///< runs inside fg::compile
  std::string_view name, call, derivative, paths;
  F f;
  std::vector<std::array<fg::shape, N>> shapes;
  std::array<domain, N> dom{};
  bool differentiable = true;  ///< false: the result never requires grad
  row_ref ref = nullptr;       ///< unary entries reducing or mapping the last dim
  std::vector<edge_row> edges{};
  std::string_view note{};

  sinfo& no_grad() {
    differentiable = false;
    return *this;
  }
  sinfo& reference(row_ref r) {
    ref = r;
    return *this;
  }
  sinfo& rows(std::vector<edge_row> e) {
    edges = std::move(e);
    return *this;
  }
  sinfo& domains(std::array<domain, N> d) {
    dom = d;
    return *this;
  }
  sinfo& differs(std::string_view n) {
    note = n;
    return *this;
  }
};

template <std::size_t N, bool Compiles = false, class F>
sinfo<N, F, Compiles> smake(std::string_view name, std::string_view call, std::string_view derivative,
                            std::string_view paths, F f, std::vector<std::array<fg::shape, N>> shapes) {
  sinfo<N, F, Compiles> r{name, call, derivative, paths, f, std::move(shapes)};
  r.dom.fill(any);
  return r;
}

namespace rowref {
using L = long double;
using V = std::vector<L>;
inline L lmax(const V& r) {
  L m = -INFINITY;
  for (L v : r) m = std::isnan(v) || std::isnan(m) ? NAN : std::max(m, v);
  return m;
}
inline V logsumexp(const V& r) {
  L m = lmax(r);
  if (std::isinf(m)) m = 0;
  L s = 0;
  for (L v : r) s += std::exp(v - m);
  return {std::log(s) + m};
}
// softmax and log_softmax shift by the max as it is (PyTorch's kernels): a row holding +inf is
// NaN throughout; only logsumexp replaces an infinite max by 0.
inline V log_softmax(const V& r) {
  const L m = lmax(r);
  L s = 0;
  for (L v : r) s += std::exp(v - m);
  V o;
  for (L v : r) o.push_back((v - m) - std::log(s));
  return o;
}
inline V softmax(const V& r) {
  V o = log_softmax(r);
  for (L& v : o) v = std::exp(v);
  return o;
}
inline V layer_norm(const V& r) {
  const L n = L(r.size());
  L mean = 0, var = 0;
  for (L v : r) mean += v;
  mean /= n;
  for (L v : r) var += (v - mean) * (v - mean);
  var /= n;
  V o;
  for (L v : r) o.push_back((v - mean) / std::sqrt(var + L(1e-5)));
  return o;
}
inline V rms_norm(const V& r) {
  L ms = 0;
  for (L v : r) ms += v * v;
  ms /= L(r.size());
  V o;
  for (L v : r) o.push_back(v / std::sqrt(ms + L(1e-6)));
  return o;
}
inline V min(const V& r) {
  L m = INFINITY;
  for (L v : r) m = std::isnan(v) || std::isnan(m) ? NAN : std::min(m, v);
  return {m};
}
inline V amax(const V& r) { return {lmax(r)}; }
inline V var(const V& r) {
  const L mean = std::accumulate(r.begin(), r.end(), L(0)) / L(r.size());
  L s = 0;
  for (L v : r) s += (v - mean) * (v - mean);
  return {s / L(r.size() - 1)};
}
inline V stddev0(const V& r) {
  const L v = var(r)[0] * L(r.size() - 1) / L(r.size());
  return {std::sqrt(v)};
}
inline V norm1(const V& r) {
  L s = 0;
  for (L v : r) s += std::abs(v);
  return {s};
}
inline V norm2(const V& r) {
  L s = 0;
  for (L v : r) s += v * v;
  return {std::sqrt(s)};
}
inline V norminf(const V& r) {
  L m = 0;
  for (L v : r) m = std::isnan(v) || std::isnan(m) ? NAN : std::max(m, std::abs(v));
  return {m};
}
inline V prod(const V& r) {
  L p = 1;
  for (L v : r) p *= v;
  return {p};
}
inline V cumsum(const V& r) {
  V o;
  L s = 0;
  for (L v : r) o.push_back(s += v);
  return o;
}
inline V cumprod(const V& r) {
  V o;
  L p = 1;
  for (L v : r) o.push_back(p *= v);
  return o;
}
inline V argmax(const V& r) {
  std::size_t b = 0;
  for (std::size_t k = 1; k < r.size() && !std::isnan(r[b]); ++k)
    if (std::isnan(r[k]) || r[k] > r[b]) b = k;
  return {L(b)};
}
inline V argmin(const V& r) {
  std::size_t b = 0;
  for (std::size_t k = 1; k < r.size() && !std::isnan(r[b]); ++k)
    if (std::isnan(r[k]) || r[k] < r[b]) b = k;
  return {L(b)};
}
inline V flip(const V& r) { return V(r.rbegin(), r.rend()); }
}  // namespace rowref

inline const auto& structured() {
  using S = std::array<fg::shape, 1>;
  using S2 = std::array<fg::shape, 2>;
  const std::vector<S> rows = {S{fg::shape{5, 37}}, S{fg::shape{37}}, S{fg::shape{1}}, S{fg::shape{3, 1}}};
  constexpr double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::string_view all = "eager, compile, jit, CA", runtime = "eager, jit, CA";
  static const auto r = std::make_tuple(
      // ---- reductions and the softmax family (composites: every path, fused) ----------------
      smake<1, true>(
          "logsumexp", "logsumexp(x, -1)", "softmax(x)", all, [](const auto& x) { return fg::logsumexp(x, -1); }, rows)
          .reference(rowref::logsumexp)
          .rows({{{1000, 0, -1000}, {1000}},
                 {{-inf, -inf}, {-inf}},
                 {{inf, 1}, {inf}},
                 {{nan, 1}, {nan}},
                 {{-1000, -1000}, {-1000 + std::log(2.0)}}}),
      smake<1, true>(
          "softmax", "softmax(x, -1)", "y (g - Σ g y)", all, [](const auto& x) { return fg::softmax(x, -1); }, rows)
          .reference(rowref::softmax)
          .rows({{{1000, 0}, {1, 0}}, {{-1000, -1000}, {0.5, 0.5}}, {{nan, 1}, {nan, nan}}, {{inf, 1}, {nan, nan}}}),
      smake<1, true>(
          "log_softmax", "log_softmax(x, -1)", "g - softmax(x) Σ g", all,
          [](const auto& x) { return fg::log_softmax(x, -1); }, rows)
          .reference(rowref::log_softmax)
          .rows({{{1000, 0}, {0, -1000}},
                 {{-1000, -1000}, {-std::log(2.0), -std::log(2.0)}},
                 {{-inf, 0}, {-inf, 0}},
                 {{inf, 1}, {nan, nan}}}),
      smake<1, true>(
          "layer_norm", "layer_norm(x)", "(g - mean g - y mean(g y)) / σ", all,
          [](const auto& x) { return fg::layer_norm(x); }, rows)
          .reference(rowref::layer_norm)
          .rows({{{1, 1, 1}, {0, 0, 0}}, {{inf, 1}, {nan, nan}}}),
      smake<1, true>(
          "rms_norm", "rms_norm(x)", "(g - y mean(g y)) / rms", all, [](const auto& x) { return fg::rms_norm(x); },
          rows)
          .reference(rowref::rms_norm)
          .rows({{{0, 0}, {0, 0}}, {{nan, 1}, {nan, nan}}}),
      smake<1, true>(
          "min", "min(x, -1)", "[x = y] / #ties", all, [](const auto& x) { return fg::min(x, -1); }, rows)
          .reference(rowref::min)
          .rows({{{nan, 1}, {nan}}, {{-inf, 1}, {-inf}}}),
      smake<1, true>(
          "amax", "amax(x, -1, true)", "[x = y] / #ties", all, [](const auto& x) { return fg::amax(x, -1, true); },
          rows)
          .reference(rowref::amax),
      smake<1, true>("amin_all", "amin(x)", "[x = y] / #ties", all, [](const auto& x) { return fg::amin(x); },
                     {S{fg::shape{5, 37}}, S{fg::shape{}}}),
      smake<1, true>("var", "var(x, -1)", "2 (x - mean) / (n - 1)", all, [](const auto& x) { return fg::var(x, -1); },
                     {S{fg::shape{5, 37}}, S{fg::shape{37}}})
          .reference(rowref::var)
          .rows({{{1, 1, 1}, {0}}, {{1}, {nan}}, {{inf, 1}, {nan}}}),
      smake<1, true>("stddev", "stddev(x, -1, 0, true)", "(x - mean) / (n y)", all,
                     [](const auto& x) { return fg::stddev(x, -1, 0.0, true); },
                     {S{fg::shape{5, 37}}, S{fg::shape{37}}})
          .reference(rowref::stddev0)
          .differs("named stddev: a function named std would hide namespace std inside fusegrad"),
      smake<1>(
          "norm2", "norm(x, 2, -1)", "x / y, 0 where y = 0", runtime, [](const auto& x) { return fg::norm(x, 2, -1); },
          rows)
          .reference(rowref::norm2)
          .rows({{{3, 4}, {5}}, {{0, 0}, {0}}, {{inf, 1}, {inf}}}),
      smake<1>(
          "norm1", "norm(x, 1, -1)", "sign(x)", runtime, [](const auto& x) { return fg::norm(x, 1, -1); }, rows)
          .reference(rowref::norm1),
      smake<1>(
          "norm_inf", "norm(x, inf, -1)", "sign(x) [|x| = y] / #ties", runtime,
          [](const auto& x) { return fg::norm(x, std::numeric_limits<double>::infinity(), -1); }, rows)
          .reference(rowref::norminf),
      // ---- loops along a dim (eager; graph breaks under fg::jit) -----------------------------
      smake<1>(
          "prod", "prod(x, -1)", "Π of the others (exact with zeros)", runtime,
          [](const auto& x) { return fg::prod(x, -1); }, rows)
          .reference(rowref::prod)
          .rows({{{2, 0, 3}, {0}}, {{inf, 0}, {nan}}}),
      smake<1>(
          "cumsum", "cumsum(x, -1)", "reversed cumsum of g", runtime, [](const auto& x) { return fg::cumsum(x, -1); },
          rows)
          .reference(rowref::cumsum),
      smake<1>("cumprod", "cumprod(x, -1)", "Σ_{j>=k} g_j Π_{i<=j, i≠k} x_i", runtime,
               [](const auto& x) { return fg::cumprod(x, -1); }, {S{fg::shape{5, 7}}, S{fg::shape{6}}})
          .reference(rowref::cumprod)
          .rows({{{2, 0, 3}, {2, 0, 0}}}),
      smake<1>(
          "argmax", "argmax(x, -1)", "none", runtime, [](const auto& x) { return fg::argmax(x, -1); }, rows)
          .no_grad()
          .reference(rowref::argmax)
          .rows({{{1, 3, 3}, {1}}, {{1, nan, 5}, {1}}})
          .differs("indices in the element type (fusegrad's tensors are float or double), not int64"),
      smake<1>(
          "argmin", "argmin(x, -1)", "none", runtime, [](const auto& x) { return fg::argmin(x, -1); }, rows)
          .no_grad()
          .reference(rowref::argmin)
          .rows({{{3, 1, 1}, {1}}, {{1, nan, -5}, {1}}})
          .differs("indices in the element type, not int64"),
      // ---- structure ---------------------------------------------------------------------------
      smake<1>(
          "flip", "flip(x, {-1})", "flip(g)", runtime, [](const auto& x) { return fg::flip(x, {-1}); }, rows)
          .reference(rowref::flip),
      smake<1>("narrow", "narrow(x, 1, 2, 3)", "g in the slice", runtime,
               [](const auto& x) { return fg::narrow(x, 1, 2, 3); }, {S{fg::shape{4, 6}}}),
      smake<1>("split", "split(x, 2, 1)[1]", "g in the piece", runtime,
               [](const auto& x) { return fg::split(x, 2, 1)[1]; }, {S{fg::shape{3, 5}}}),
      smake<1>("chunk", "chunk(x, 3, 0)[2]", "g in the piece", runtime,
               [](const auto& x) { return fg::chunk(x, 3, 0)[2]; }, {S{fg::shape{7, 2}}}),
      smake<2>("cat", "cat({a, b}, 1)", "slices of g", runtime,
               [](const auto& a, const auto& b) {
                 return fg::cat(std::vector{a, b}, 1);
               },
               {S2{fg::shape{3, 2}, fg::shape{3, 4}}}),
      smake<2>("stack", "stack({a, b}, 1)", "slices of g", runtime,
               [](const auto& a, const auto& b) {
                 return fg::stack(std::vector{a, b}, 1);
               },
               {S2{fg::shape{3, 4}, fg::shape{3, 4}}}),
      smake<1>("repeat", "repeat(x, {2, 1, 3})", "Σ over the copies", runtime,
               [](const auto& x) {
                 return fg::repeat(x, {2, 1, 3});
               },
               {S{fg::shape{3, 4}}, S{fg::shape{2}}}),
      smake<1>("index_select", "index_select(x, 1, {3, 0, 3})", "index_add of g", runtime,
               [](const auto& x) {
                 return fg::index_select(x, 1, {3, 0, 3});
               },
               {S{fg::shape{2, 5}}}),
      smake<1>("gather", "gather(x, 1, idx)", "scatter_add of g", runtime,
               [](const auto& x) {
                 return fg::gather(x, 1, fg::from_vector<fg::element_of<decltype(x)>>({0, 3, 1, 1, 2, 0}, {3, 2}));
               },
               {S{fg::shape{3, 4}}}),
      smake<2>("scatter_add", "scatter_add(x, 1, idx, src)", "g, gather(g)", runtime,
               [](const auto& x, const auto& s) {
                 return fg::scatter_add(x, 1, fg::from_vector<fg::element_of<decltype(x)>>({0, 3, 1, 1, 2, 0}, {3, 2}),
                                        s);
               },
               {S2{fg::shape{3, 4}, fg::shape{3, 2}}}),
      smake<1>("tril", "tril(x, 1)", "tril(g, 1)", runtime, [](const auto& x) { return fg::tril(x, 1); },
               {S{fg::shape{4, 5}}, S{fg::shape{2, 3, 3}}}),
      smake<1>("triu", "triu(x)", "triu(g)", runtime, [](const auto& x) { return fg::triu(x); }, {S{fg::shape{4, 5}}}),
      // ---- linear algebra ----------------------------------------------------------------------
      smake<2>("dot", "dot(a, b)", "b, a", runtime, [](const auto& a, const auto& b) { return fg::dot(a, b); },
               {S2{fg::shape{7}, fg::shape{7}}}),
      smake<2>("outer", "outer(a, b)", "g b, gᵀ a", runtime,
               [](const auto& a, const auto& b) { return fg::outer(a, b); }, {S2{fg::shape{4}, fg::shape{3}}}),
      smake<1>("trace", "trace(x)", "I", runtime, [](const auto& x) { return fg::trace(x); },
               {S{fg::shape{4, 4}}, S{fg::shape{3, 5}}}),
      smake<1>("diag", "diag(x)", "diag(g)", runtime, [](const auto& x) { return fg::diag(x); },
               {S{fg::shape{4, 3}}, S{fg::shape{5}}}),
      smake<2>("solve", "solve(A + 3I, B)", "B̄ = A⁻ᵀḡ, Ā = -B̄Xᵀ", runtime,
               [](const auto& a, const auto& b) {
                 return fg::solve(a + fg::eye<fg::element_of<decltype(a)>>(a.shape()[0]) * 3.0, b);
               },
               {S2{fg::shape{4, 4}, fg::shape{4, 2}}, S2{fg::shape{3, 3}, fg::shape{3}}}),
      smake<1>("inverse", "inverse(A + 3I)", "-A⁻ᵀ ḡ A⁻ᵀ", runtime,
               [](const auto& a) { return fg::inverse(a + fg::eye<fg::element_of<decltype(a)>>(a.shape()[0]) * 3.0); },
               {S{fg::shape{4, 4}}}),
      smake<1>("det", "det(A + 3I)", "ḡ cof A (= ḡ det A⁻ᵀ where invertible)", runtime,
               [](const auto& a) { return fg::det(a + fg::eye<fg::element_of<decltype(a)>>(a.shape()[0]) * 3.0); },
               {S{fg::shape{4, 4}}}),
      smake<1>("logdet", "logdet(A + 3I)", "ḡ A⁻ᵀ", runtime,
               [](const auto& a) { return fg::logdet(a + fg::eye<fg::element_of<decltype(a)>>(a.shape()[0]) * 3.0); },
               {S{fg::shape{4, 4}}}),
      smake<1>("cholesky", "cholesky(X Xᵀ + I)", "L⁻ᵀ Φ(LᵀL̄) L⁻¹, symmetrised", runtime,
               [](const auto& x) {
                 return fg::cholesky(fg::matmul(x, x.t()) + fg::eye<fg::element_of<decltype(x)>>(x.shape()[0]));
               },
               {S{fg::shape{4, 4}}}));
  return r;
}

}  // namespace opinfo
