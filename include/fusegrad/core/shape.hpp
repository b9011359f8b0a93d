#pragma once
/// \file fusegrad/core/shape.hpp
/// Shapes, strides, broadcasting and dim normalisation, shared by eager tensors,
/// fused kernels and the run-time IR.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/small_vector.hpp"

namespace fusegrad {

using index_t = std::int64_t;

/// A tensor's sizes, outermost first. `shape{}` is a 0-d (scalar) shape. Up to rank 6 held in
/// place (no allocation); it converts from and to `std::vector<index_t>`.
using shape = small_vector<index_t, 6>;
/// Element strides, outermost first; 0 marks a broadcast (expanded) dimension.
using strides = small_vector<index_t, 6>;

/// Writes a shape the way PyTorch prints it: `[2, 3]`, `[]` for 0-d.
inline std::string to_string(const shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

/// Number of elements of a shape (1 for 0-d, 0 if any size is 0).
inline index_t numel(const shape& s) noexcept {
  index_t n = 1;
  for (index_t d : s) n *= d;
  return n;
}

/// Sets `st` to the row-major strides of a contiguous tensor of shape `s` (in place).
inline void set_contiguous_strides(strides& st, const shape& s) {
  st.resize(s.size());
  index_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<index_t>(s[i], 1);
  }
}
/// The row-major strides of `s` (see `set_contiguous_strides`).
inline strides contiguous_strides(const shape& s) {
  strides st;
  set_contiguous_strides(st, s);
  return st;
}

/// True when `st` are the row-major strides of `s` (size-1 dims may have any stride).
inline bool is_contiguous(const shape& s, const strides& st) noexcept {
  for (index_t d : s)
    if (d == 0) return true;  // an empty tensor is contiguous, whatever its strides
  index_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != acc) return false;
    acc *= s[i];
  }
  return true;
}

/// Validates a shape before a tensor of it is made (factories, user data, reshape, expand,
/// broadcast and matmul results, allocation): every size must be >= 0, and the product of the
/// sizes (a 0 counted as 1, so that contiguous strides fit too) must fit in `index_t`; throws
/// naming `op` otherwise. Returns the number of elements. The one overflow-checked product of
/// sizes: `numel` and `contiguous_strides` rely on shapes that passed it.
inline index_t check_shape(std::string_view op, const shape& s) {
  index_t span = 1;
  bool empty = false;
  for (index_t d : s) {
    if (d < 0) detail::fail(op, "invalid shape ", to_string(s), "; expected every size >= 0");
    empty = empty || d == 0;
    if (__builtin_mul_overflow(span, d == 0 ? index_t{1} : d, &span))
      detail::fail(op, "shape ", to_string(s),
                   " has too many elements (the product of its sizes overflows a 64-bit "
                   "index); expected at most ",
                   std::numeric_limits<index_t>::max(), " elements");
  }
  return empty ? 0 : span;
}

/// NumPy broadcasting of two shapes; throws naming `op` when they are incompatible.
inline shape broadcast_shapes(std::string_view op, const shape& a, const shape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  shape r(n);
  for (std::size_t i = 0; i < n; ++i) {
    const index_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const index_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      detail::fail(op, "shapes ", to_string(a), " and ", to_string(b), " cannot be broadcast together (dim ", i, ": ",
                   da, " vs ", db, "); expected equal sizes or 1");
    r[i] = da == 1 ? db : da;
  }
  check_shape(op, r);  // [n, 1] with [1, n] can have more elements than either operand
  return r;
}

/// Whether shape `s` broadcasts to `to` (NumPy rules).
inline bool broadcasts_to(const shape& s, const shape& to) {
  if (s.size() > to.size()) return false;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const index_t a = s[s.size() - 1 - k], b = to[to.size() - 1 - k];
    if (a != b && a != 1) return false;
  }
  return true;
}

/// Maps a possibly negative dim into [0, rank); throws naming `op` when out of range.
inline std::size_t normalize_dim(std::string_view op, index_t dim, std::size_t rank) {
  const auto r = static_cast<index_t>(rank);
  const index_t lo = rank == 0 ? -1 : -r, hi = rank == 0 ? 0 : r - 1;
  if (dim < lo || dim > hi)
    detail::fail(op, "dim ", dim, " is out of range for a tensor of rank ", rank, "; expected a dim in [", lo, ", ", hi,
                 "]");
  return static_cast<std::size_t>(dim < 0 ? dim + std::max<index_t>(r, 1) : dim);
}

}  // namespace fusegrad
