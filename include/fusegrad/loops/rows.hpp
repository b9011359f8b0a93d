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

}  // namespace fusegrad::detail
