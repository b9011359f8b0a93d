#pragma once
/// \file fusegrad/eager/linalg.hpp
/// Linear algebra of small dense matrices on eager tensors, each with its backward (written
/// with fusegrad's own ops, so it is differentiable again): dot, outer, trace, diag (views
/// and `where`), and solve, inverse, det, logdet, cholesky (LU with partial pivoting and the
/// Cholesky factorisation, in the element type). Matrices are 2-D [n, n]; `solve`'s
/// right-hand side is [n] or [n, k]. A singular matrix makes solve and inverse throw; det is
/// then 0 (its gradient the cofactor matrix, as PyTorch's) and logdet -inf (NaN gradient); a
/// negative determinant makes logdet NaN (as PyTorch). cholesky throws unless the matrix is
/// positive definite (its upper triangle is not read, as PyTorch's).
/// Backward rules (Giles, "Collected matrix derivative results"): solve X = A⁻¹B:
/// B̄ = A⁻ᵀX̄, Ā = -B̄Xᵀ; det: Ā = ḡ det A⁻ᵀ; logdet: Ā = ḡ A⁻ᵀ; cholesky A = LLᵀ:
/// S = L⁻ᵀ Φ(LᵀL̄) L⁻¹ (Φ: the lower triangle with the diagonal halved), Ā = (S + Sᵀ)/2.

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/matmul.hpp"
#include "fusegrad/eager/reduce.hpp"
#include "fusegrad/eager/structure.hpp"
#include "fusegrad/eager/views.hpp"
#include "fusegrad/ops/all.hpp"

namespace fusegrad {

/// Σ a b of two vectors of one length.
template <Element T>
tensor<T> dot(const tensor<T>& a, const tensor<T>& b) {
  if (a.dim() != 1 || b.dim() != 1 || a.shape() != b.shape())
    detail::fail("dot", "operands of shapes ", to_string(a.shape()), " and ", to_string(b.shape()),
                 "; expected two vectors of one length");
  return sum(tensor<T>(a * b));
}
/// a bᵀ: [n] and [m] give [n, m].
template <Element T>
tensor<T> outer(const tensor<T>& a, const tensor<T>& b) {
  if (a.dim() != 1 || b.dim() != 1)
    detail::fail("outer", "operands of shapes ", to_string(a.shape()), " and ", to_string(b.shape()),
                 "; expected two vectors");
  return a.reshape({a.shape()[0], 1}) * b.reshape({1, b.shape()[0]});
}

namespace detail {
template <Element T>
tensor<T> eye_mask(index_t r, index_t c) {
  std::vector<T> m(static_cast<std::size_t>(r * c));
  for (index_t i = 0; i < std::min(r, c); ++i) m[static_cast<std::size_t>(i * c + i)] = T(1);
  return from_vector<T>(m, {r, c});
}
template <Element T>
void check_square(std::string_view op, const tensor<T>& a) {
  if (a.dim() != 2 || a.shape()[0] != a.shape()[1])
    fail(op, "matrix of shape ", to_string(a.shape()), "; expected a square matrix [n, n]");
}
}  // namespace detail

/// The identity matrix [n, n].
template <Element T>
tensor<T> eye(index_t n) {
  return detail::eye_mask<T>(n, n);
}
/// The diagonal of a matrix (a vector), or the diagonal matrix of a vector.
template <Element T>
tensor<T> diag(const tensor<T>& x) {
  if (x.dim() == 1) {
    const index_t n = x.shape()[0];
    return where(detail::eye_mask<T>(n, n), x.reshape({1, n}), 0.0);
  }
  if (x.dim() != 2) detail::fail("diag", "input of shape ", to_string(x.shape()), "; expected a vector or a matrix");
  const index_t k = std::min(x.shape()[0], x.shape()[1]);
  const tensor<T> sq = slice(slice(x, 0, 0, k), 1, 0, k);
  return sum(tensor<T>(where(detail::eye_mask<T>(k, k), sq, 0.0)), 1);
}
/// The sum of the diagonal of a matrix.
template <Element T>
tensor<T> trace(const tensor<T>& x) {
  if (x.dim() != 2) detail::fail("trace", "input of shape ", to_string(x.shape()), "; expected a matrix");
  return sum(diag(x));
}

namespace detail {
/// PA = LU of a square matrix, in place (row-major, n × n): `perm` the row order, the sign of
/// the permutation returned; `singular` set when a pivot is 0.
template <Element T>
int lu_factor(std::vector<T>& a, index_t n, std::vector<index_t>& perm, bool& singular) {
  perm.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) perm[static_cast<std::size_t>(i)] = i;
  int sign = 1;
  singular = false;
  auto at = [&](index_t i, index_t j) -> T& { return a[static_cast<std::size_t>(i * n + j)]; };
  for (index_t k = 0; k < n; ++k) {
    index_t p = k;
    for (index_t i = k + 1; i < n; ++i)
      if (std::abs(at(i, k)) > std::abs(at(p, k))) p = i;
    if (p != k) {
      for (index_t j = 0; j < n; ++j) std::swap(at(k, j), at(p, j));
      std::swap(perm[static_cast<std::size_t>(k)], perm[static_cast<std::size_t>(p)]);
      sign = -sign;
    }
    if (at(k, k) == T(0)) {
      singular = true;
      continue;
    }
    for (index_t i = k + 1; i < n; ++i) {
      const T f = at(i, k) /= at(k, k);
      for (index_t j = k + 1; j < n; ++j) at(i, j) -= f * at(k, j);
    }
  }
  return sign;
}
/// A⁻¹B by LU (no tape), B [n] or [n, k].
template <Element T>
tensor<T> solve_values(const tensor<T>& a, const tensor<T>& b) {
  const index_t n = a.shape()[0], k = b.dim() == 1 ? 1 : b.shape()[1];
  std::vector<T> lu = a.detach().to_vector(), x = b.detach().to_vector();
  std::vector<index_t> perm;
  bool singular = false;
  lu_factor(lu, n, perm, singular);
  if (singular) fail("solve", "the matrix [", n, ", ", n, "] is singular; expected an invertible matrix");
  std::vector<T> y(static_cast<std::size_t>(n * k));
  for (index_t c = 0; c < k; ++c) {
    for (index_t i = 0; i < n; ++i) {  // L y = P b
      T s = x[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)] * k + c)];
      for (index_t j = 0; j < i; ++j)
        s -= lu[static_cast<std::size_t>(i * n + j)] * y[static_cast<std::size_t>(j * k + c)];
      y[static_cast<std::size_t>(i * k + c)] = s;
    }
    for (index_t i = n; i-- > 0;) {  // U x = y
      T s = y[static_cast<std::size_t>(i * k + c)];
      for (index_t j = i + 1; j < n; ++j)
        s -= lu[static_cast<std::size_t>(i * n + j)] * y[static_cast<std::size_t>(j * k + c)];
      y[static_cast<std::size_t>(i * k + c)] = s / lu[static_cast<std::size_t>(i * n + i)];
    }
  }
  return from_vector<T>(y, b.shape());
}
}  // namespace detail

/// X with A X = B (A [n, n]; B [n] or [n, k]).
template <Element T>
tensor<T> solve(const tensor<T>& a, const tensor<T>& b) {
  detail::check_square("solve", a);
  if ((b.dim() != 1 && b.dim() != 2) || b.shape()[0] != a.shape()[0])
    detail::fail("solve", "right-hand side of shape ", to_string(b.shape()), " for a matrix of shape ",
                 to_string(a.shape()), "; expected [", a.shape()[0], "] or [", a.shape()[0], ", k]");
  tensor<T> x = detail::solve_values(a, b);
  if (detail::needs_grad(a, b))
    detail::record<T>(
        "LinalgSolveBackward0", {a, b}, {&x}, {a, x},
        [](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          const tensor<T> gb = solve(s[0].t(), g[0]);
          const tensor<T> ga = s[1].dim() == 1 ? -outer(gb, s[1]) : tensor<T>(-matmul(gb, s[1].t()));
          return std::vector<tensor<T>>{ga, gb};
        },
        std::nullopt, detail::double_backward::supported);
  return x;
}
/// A⁻¹.
template <Element T>
tensor<T> inverse(const tensor<T>& a) {
  detail::check_square("inverse", a);
  return solve(a, eye<T>(a.shape()[0]));
}

namespace detail {
/// The determinant of a row-major n × n matrix (by LU; 0 when a pivot is 0).
template <Element T>
T det_value(std::vector<T> lu, index_t n) {
  std::vector<index_t> perm;
  bool singular = false;
  T d = static_cast<T>(lu_factor(lu, n, perm, singular));
  for (index_t i = 0; i < n; ++i) d *= lu[static_cast<std::size_t>(i * n + i)];
  return singular ? T(0) : d;
}
/// The cofactor matrix of A (the adjugate's transpose, d det A / dA), each entry the signed
/// determinant of a minor: O(n⁵), for the matrices whose determinant is 0, where det A · A⁻ᵀ
/// has no value and the cofactors still do (rank n - 1: nonzero; lower: zero).
template <Element T>
tensor<T> cofactors(const tensor<T>& a) {
  const index_t n = a.shape()[0];
  const std::vector<T> v = a.detach().to_vector();
  std::vector<T> c(static_cast<std::size_t>(n * n), T(1)), minor;  // (a 1 × 1 matrix's cofactor is 1)
  for (index_t i = 0; i < n && n > 1; ++i)
    for (index_t j = 0; j < n; ++j) {
      minor.clear();
      for (index_t r = 0; r < n; ++r)
        for (index_t k = 0; k < n; ++k)
          if (r != i && k != j) minor.push_back(v[static_cast<std::size_t>(r * n + k)]);
      c[static_cast<std::size_t>(i * n + j)] = ((i + j) % 2 ? T(-1) : T(1)) * det_value(std::move(minor), n - 1);
    }
  return from_vector<T>(c, a.shape());
}
}  // namespace detail

/// The determinant (by LU). Its gradient is the cofactor matrix, det A · A⁻ᵀ where A is
/// invertible and the cofactors themselves where det A is 0 (PyTorch's value: finite at a
/// singular matrix).
template <Element T>
tensor<T> det(const tensor<T>& a) {
  detail::check_square("det", a);
  tensor<T> y = scalar_tensor<T>(detail::det_value(a.detach().to_vector(), a.shape()[0]));
  if (detail::needs_grad(a))
    detail::record<T>(
        "LinalgDetBackward0", {a}, {&y}, {a, y},
        [](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          if (s[1].item() != T(0)) return std::vector<tensor<T>>{tensor<T>(inverse(s[0]).t() * tensor<T>(g[0] * s[1]))};
          if (is_grad_enabled())  // a create_graph backward: the cofactors below are values, not on the tape
            detail::fail("det", "double backward at a matrix of determinant 0 (shape ", to_string(s[0].shape()),
                         "); expected an invertible matrix for a second derivative");
          return std::vector<tensor<T>>{tensor<T>(detail::cofactors(s[0]) * g[0])};
        },
        std::nullopt, detail::double_backward::supported);
  return y;
}
/// log det A (NaN for a negative determinant, -inf for a singular matrix).
template <Element T>
tensor<T> logdet(const tensor<T>& a) {
  detail::check_square("logdet", a);
  const index_t n = a.shape()[0];
  std::vector<T> lu = a.detach().to_vector();
  std::vector<index_t> perm;
  bool singular = false;
  int sign = detail::lu_factor(lu, n, perm, singular);
  T l = 0;
  for (index_t i = 0; i < n; ++i) {
    const T u = lu[static_cast<std::size_t>(i * n + i)];
    if (u < 0) sign = -sign;
    l += std::log(std::abs(u));
  }
  tensor<T> y = scalar_tensor<T>(singular   ? -std::numeric_limits<T>::infinity()
                                 : sign < 0 ? std::numeric_limits<T>::quiet_NaN()
                                            : l);
  if (detail::needs_grad(a))
    detail::record<T>(
        "LogdetBackward0", {a}, {&y}, {a, y},
        [](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          if (s[1].item() == -std::numeric_limits<T>::infinity())  // singular: A⁻ᵀ has no value
            return std::vector<tensor<T>>{full<T>(s[0].shape(), std::numeric_limits<T>::quiet_NaN())};
          return std::vector<tensor<T>>{tensor<T>(inverse(s[0]).t() * g[0])};
        },
        std::nullopt, detail::double_backward::supported);
  return y;
}

/// L, lower triangular with a positive diagonal, with A = L Lᵀ (A symmetric positive definite;
/// only its lower triangle is read).
template <Element T>
tensor<T> cholesky(const tensor<T>& a) {
  detail::check_square("cholesky", a);
  const index_t n = a.shape()[0];
  const std::vector<T> av = a.detach().to_vector();
  std::vector<T> l(static_cast<std::size_t>(n * n), T(0));
  for (index_t j = 0; j < n; ++j) {
    T d = av[static_cast<std::size_t>(j * n + j)];
    for (index_t k = 0; k < j; ++k)
      d -= l[static_cast<std::size_t>(j * n + k)] * l[static_cast<std::size_t>(j * n + k)];
    if (!(d > 0))
      detail::fail("cholesky", "the leading minor of order ", j + 1, " is not positive (", d,
                   "); expected a symmetric positive-definite matrix");
    const T djj = std::sqrt(d);
    l[static_cast<std::size_t>(j * n + j)] = djj;
    for (index_t i = j + 1; i < n; ++i) {
      T s = av[static_cast<std::size_t>(i * n + j)];
      for (index_t k = 0; k < j; ++k)
        s -= l[static_cast<std::size_t>(i * n + k)] * l[static_cast<std::size_t>(j * n + k)];
      l[static_cast<std::size_t>(i * n + j)] = s / djj;
    }
  }
  tensor<T> y = from_vector<T>(l, {n, n});
  if (detail::needs_grad(a))
    detail::record<T>(
        "LinalgCholeskyExBackward0", {a}, {&y}, {y},
        [](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          const tensor<T>& L = s[0];
          const index_t m = L.shape()[0];
          const tensor<T> p = matmul(L.t(), g[0]);
          const tensor<T> phi = tril(p) - tensor<T>(where(detail::eye_mask<T>(m, m), p, 0.0)) * 0.5;  // Φ(LᵀL̄)
          const tensor<T> li = inverse(L);
          const tensor<T> sm = matmul(matmul(li.t(), phi), li);
          return std::vector<tensor<T>>{tensor<T>((sm + sm.t()) * 0.5)};
        },
        std::nullopt, detail::double_backward::supported);
  return y;
}

}  // namespace fusegrad
