#pragma once
/// \file fusegrad/loops/rows.hpp
/// Strided iteration: walking operands laid out with any strides over one iteration shape,
/// row by innermost row. Shared by eager kernels and the compiled paths' runners.

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "fusegrad/core/shape.hpp"

namespace fusegrad::detail {

/// Moves index `idx` over the outer dims of `s`, and the `N` operands' offsets `off`, to the
/// next innermost row: an odometer over the outer dims (`outer`: dim d's strides, one per
/// operand, at `d * N`).
[[gnu::always_inline]] inline void next_row(const shape& s, std::size_t N, const index_t* outer, shape& idx,
                                            index_t* off) {
  for (std::size_t d = s.size() - 1; d-- > 0;) {
    const index_t* const sd = outer + d * N;
    for (std::size_t k = 0; k < N; ++k) off[k] += sd[k];
    if (++idx[d] < s[d]) return;
    for (std::size_t k = 0; k < N; ++k) off[k] -= sd[k] * s[d];
    idx[d] = 0;
  }
}

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
  shape idx(r, 0);  // inline up to 6 dims: no allocation per call
  // The outer dims' strides, dim by dim, in one flat list (read per row; each operand's own
  // list is a small_vector, whose every read checks where its elements live).
  small_vector<index_t, 32> outer((r - 1) * N);
  for (std::size_t d = 0; d + 1 < r; ++d)
    for (std::size_t k = 0; k < N; ++k) outer[d * N + k] = (*st[k])[d];
  // The first row's index and offsets.
  for (index_t rest = row_begin, d = static_cast<index_t>(r) - 1; d-- > 0 && rest > 0;
       rest /= s[static_cast<std::size_t>(d)]) {
    const auto u = static_cast<std::size_t>(d);
    idx[u] = rest % s[u];
    for (std::size_t k = 0; k < N; ++k) off[k] += idx[u] * outer[u * N + k];
  }
  for (index_t row = row_begin; row < row_end; ++row) {
    f(static_cast<const index_t*>(off), s[r - 1], static_cast<const index_t*>(inner));
    next_row(s, N, outer.data(), idx, off);
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

namespace transpose_detail {
#if defined(__AVX__)
/// Rows [i, i + 8) x columns [j, j + 8) of `transpose_rows`, floats: eight loads, the 8x8
/// transpose in registers, eight stores.
inline void block8(const float* p, index_t ld, float* o, index_t C, index_t i, index_t j) {
  __m256 r[8];
  for (int t = 0; t < 8; ++t) r[t] = _mm256_loadu_ps(p + i + (j + t) * ld);
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(o + (i + 0) * C + j, _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(o + (i + 1) * C + j, _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(o + (i + 2) * C + j, _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(o + (i + 3) * C + j, _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(o + (i + 4) * C + j, _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(o + (i + 5) * C + j, _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(o + (i + 6) * C + j, _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(o + (i + 7) * C + j, _mm256_permute2f128_ps(s3, s7, 0x31));
}
/// The same for doubles, 4x4.
inline void block4(const double* p, index_t ld, double* o, index_t C, index_t i, index_t j) {
  const __m256d r0 = _mm256_loadu_pd(p + i + j * ld), r1 = _mm256_loadu_pd(p + i + (j + 1) * ld);
  const __m256d r2 = _mm256_loadu_pd(p + i + (j + 2) * ld), r3 = _mm256_loadu_pd(p + i + (j + 3) * ld);
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
  const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(o + (i + 0) * C + j, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(o + (i + 1) * C + j, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(o + (i + 2) * C + j, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(o + (i + 3) * C + j, _mm256_permute2f128_pd(t1, t3, 0x31));
}
#endif
}  // namespace transpose_detail

/// o[i * C + j] = p[i + j * ld] for rows i in [i0, i1) and columns j in [0, C): a column-major
/// matrix (leading dimension `ld`) copied row-major, e.g. `w.t().contiguous()`. Square
/// blocks transposed in registers where the target has AVX (the reads of a column-major
/// matrix along a row are `ld` apart: element by element they cost several times more).
template <class T>
void transpose_rows(const T* __restrict p, index_t ld, T* __restrict o, index_t C, index_t i0, index_t i1) {
  index_t i = i0;
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    constexpr index_t b = std::is_same_v<T, float> ? 8 : 4;
    for (; i + b <= i1; i += b) {
      index_t j = 0;
      for (; j + b <= C; j += b) {
        if constexpr (b == 8) transpose_detail::block8(p, ld, o, C, i, j);
        else transpose_detail::block4(p, ld, o, C, i, j);
      }
      for (; j < C; ++j)
        for (index_t r = i; r < i + b; ++r) o[r * C + j] = p[r + j * ld];
    }
  }
#endif
  for (; i < i1; ++i)
    for (index_t j = 0; j < C; ++j) o[i * C + j] = p[i + j * ld];
}

/// The innermost rows of `s` (1 for a 0-d shape, 0 when empty).
inline index_t row_count(const shape& s) {
  if (s.empty()) return 1;
  return s.back() == 0 ? 0 : fusegrad::numel(s) / s.back();
}

}  // namespace fusegrad::detail
