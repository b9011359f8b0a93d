#pragma once
/// \file fusegrad/loops/rows.hpp
/// Strided iteration: walking operands laid out with any strides over one iteration shape,
/// row by innermost row. Shared by eager kernels and the compiled paths' runners.

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "fusegrad/core/shape.hpp"

namespace fusegrad::detail {

/// Calls `f(bases, n, inner_strides)` once per innermost row of `s` in [row_begin, row_end)
/// (all rows by default; rows count in row-major order), for `N` operands laid out with
/// strides `*st[k]` from offsets `off[k]` (all over the same iteration shape `s`); `off` is
/// advanced in place (to the first row's offsets first), `inner` (N entries) receives each
/// operand's innermost stride. A range lets blocks of rows run on different threads.
template <class F>
void for_each_row_n(const shape& s, std::size_t N, const strides* const* st, index_t* off, index_t* inner, F&& f,
                    index_t row_begin = 0, index_t row_end = -1) {
  if (fusegrad::numel(s) == 0) return;
  const std::size_t r = s.size();
  if (r == 0) {
    if (row_begin > 0 || row_end == 0) return;
    std::fill_n(inner, N, index_t{0});
    f(static_cast<const index_t*>(off), index_t{1}, static_cast<const index_t*>(inner));
    return;
  }
  for (std::size_t k = 0; k < N; ++k) inner[k] = (*st[k])[r - 1];
  const index_t rows = fusegrad::numel(s) / s[r - 1];
  if (row_end < 0 || row_end > rows) row_end = rows;
  std::vector<index_t> idx(r, 0);
  // The first row's index and offsets.
  for (index_t rest = row_begin, d = static_cast<index_t>(r) - 1; d-- > 0 && rest > 0; rest /= s[static_cast<std::size_t>(d)]) {
    const auto u = static_cast<std::size_t>(d);
    idx[u] = rest % s[u];
    for (std::size_t k = 0; k < N; ++k) off[k] += idx[u] * (*st[k])[u];
  }
  for (index_t row = row_begin; row < row_end; ++row) {
    f(static_cast<const index_t*>(off), s[r - 1], static_cast<const index_t*>(inner));
    for (std::size_t d = r - 1; d-- > 0;) {
      for (std::size_t k = 0; k < N; ++k) off[k] += (*st[k])[d];
      if (++idx[d] < s[d]) break;
      for (std::size_t k = 0; k < N; ++k) off[k] -= (*st[k])[d] * s[d];
      idx[d] = 0;
    }
  }
}

/// `for_each_row_n` for a fixed number of operands, with rows handed over as arrays (rows
/// [row_begin, row_end) only, when given).
template <std::size_t N, class F>
void for_each_row(const shape& s, const std::array<const strides*, N>& st, std::array<index_t, N> off, F&& f,
                  index_t row_begin = 0, index_t row_end = -1) {
  std::array<index_t, N> inner{};
  for_each_row_n(
      s, N, st.data(), off.data(), inner.data(),
      [&](const index_t* b, index_t n, const index_t* in) {
        std::array<index_t, N> base{}, step{};
        std::copy_n(b, N, base.begin());
        std::copy_n(in, N, step.begin());
        f(base, n, step);
      },
      row_begin, row_end);
}

/// The innermost rows of `s` (1 for a 0-d shape, 0 when empty).
inline index_t row_count(const shape& s) {
  if (s.empty()) return 1;
  return s.back() == 0 ? 0 : fusegrad::numel(s) / s.back();
}

}  // namespace fusegrad::detail
