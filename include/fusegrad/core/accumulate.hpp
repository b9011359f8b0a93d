#pragma once
/// \file fusegrad/core/accumulate.hpp
/// How fusegrad adds up many numbers: the one definition of a sum, used by the eager
/// reductions (`reduce_keepdim`, hence `sum`, `mean`, `sum_to`), the fused backend's loops and
/// the IR's programs, so that every path gives the same bits.
///
/// The values an output sums (its reduced elements, in row-major order) are cut into chunks of
/// consecutive values; chunk sums are combined pairwise in a fixed tree (a binary counter:
/// chunk k joins the sums of the chunks before it that complete a power-of-two group, like
/// carries), and what is left at the end is folded in from the smallest group up. A chunk is
/// summed in one of two forms, by layout:
///   - row form (`running_sum`), when an output's values lie along the innermost dim (full
///     reductions, reductions over trailing dims): a chunk of `sum_chunk<T>` values, value j
///     added in order into accumulator j % `sum_lanes<T>` (SIMD lanes), the accumulators then
///     added pairwise;
///   - column form (`column_sums`), when the innermost dim is kept (an output per column, as
///     in a bias gradient): a chunk of `sum_run` values added in order, SIMD across the
///     outputs.
/// Either way a value goes through at most `sum_run` sequential additions, then the tree's
/// log2 levels: rounding error grows like (16 + log2 n) half-ulps instead of n. Summing 2^28
/// ones gives 2^28; the mean of 2^24 values 0.1f is within 2 ulps of 0.1f (one SIMD
/// accumulator over the whole tensor gave 0.0983). The result depends only on the values and
/// their order, never on how they are handed over (rows, tiles, later threads: a chunk is the
/// unit of work, the tree over chunks is fixed). Accumulators start at -0, the identity of
/// IEEE addition, so a sum of one value is that value (an empty sum is +0).

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusegrad/core/parallel.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/simd.hpp"

namespace fusegrad::detail {

/// Sequential additions per accumulator in a chunk (the values of a column-form chunk).
inline constexpr index_t sum_run = 16;
/// Accumulators of a row-form chunk: 128 bytes (4 AVX2 registers, 2 AVX-512 ones: the same
/// chunks, and so the same sums, at either width).
template <Element T>
inline constexpr index_t sum_lanes = static_cast<index_t>(128 / sizeof(T));
/// Values of a row-form chunk.
template <Element T>
inline constexpr index_t sum_chunk = sum_run* sum_lanes<T>;

/// The fixed tree over chunk sums, on `m` sums at once (`m` outputs side by side; 1 for one
/// output): `level + k * stride` holds the sum of the k-th power-of-two group still open.
template <Element T>
struct sum_tree {
  /// Adds the sum of chunk number `done` (the chunks before it are in the levels) held in
  /// `carry` (clobbered).
  static void push(T* level, index_t stride, std::uint64_t done, T* carry, index_t m) {
    int k = 0;
    for (; done & 1; done >>= 1, ++k) {
      const T* l = level + k * stride;
      for (index_t i = 0; i < m; ++i) carry[i] = l[i] + carry[i];
    }
    std::copy(carry, carry + m, level + k * stride);
  }
  /// The total of `chunks` chunks in the levels and, if `partial`, the sum of a last,
  /// incomplete chunk in `acc`; written to `acc`.
  static void total(const T* level, index_t stride, std::uint64_t chunks, bool partial, T* acc, index_t m) {
    bool any = partial;
    for (int k = 0; chunks != 0; chunks >>= 1, ++k) {
      if (!(chunks & 1)) continue;
      const T* l = level + k * stride;
      if (any)
        for (index_t i = 0; i < m; ++i) acc[i] = l[i] + acc[i];
      else std::copy(l, l + m, acc);
      any = true;
    }
    if (!any) std::fill_n(acc, m, T(0));
  }
};

/// The sum of one output's values (row form), handed over in pieces of any length.
template <Element T>
class running_sum {
 public:
  static constexpr index_t lanes = sum_lanes<T>, chunk = sum_chunk<T>;

  running_sum() noexcept { reset(); }
  void reset() noexcept {
    std::fill_n(lane_, lanes, T(-0.0));
    pos_ = 0;
    chunks_ = 0;
  }

  /// Adds `n` contiguous values.
  void add(const T* x, index_t n) noexcept {
    using V = simd<T>;
    constexpr index_t W = static_cast<index_t>(V::size), U = lanes / W;
    static_assert(lanes % W == 0, "fusegrad: a row-form chunk's accumulators are whole SIMD registers");
    while (n > 0) {
      if (pos_ == 0 && n >= chunk) {  // whole chunks, in registers
        for (; n >= chunk; x += chunk, n -= chunk) {
          alignas(64) T a[lanes];
          [&]<std::size_t... u>(std::index_sequence<u...>) {
            V acc[U] = {V(T(-0.0)) + V::load_unaligned(x + u * W)...};
            for (index_t i = lanes; i < chunk; i += lanes) ((acc[u] += V::load_unaligned(x + i + u * W)), ...);
            (acc[u].store_aligned(a + u * W), ...);
          }
          (std::make_index_sequence<static_cast<std::size_t>(U)>{});
          T c = fold<lanes>(a);
          sum_tree<T>::push(level_, 1, chunks_++, &c, 1);
        }
        continue;
      }
      if (pos_ % lanes == 0 && n >= lanes) {  // whole rounds of the accumulators
        const index_t m = std::min(n, chunk - pos_) / lanes * lanes;
        [&]<std::size_t... u>(std::index_sequence<u...>) {  // U registers, unrolled
          V acc[U] = {V::load_aligned(lane_ + u * W)...};
          for (index_t i = 0; i < m; i += lanes) ((acc[u] += V::load_unaligned(x + i + u * W)), ...);
          (acc[u].store_aligned(lane_ + u * W), ...);
        }
        (std::make_index_sequence<static_cast<std::size_t>(U)>{});
        x += m, n -= m, pos_ += m;
      } else {  // one value into its accumulator (the same addition a lane does)
        lane_[pos_ % lanes] += *x++;
        --n, ++pos_;
      }
      if (pos_ == chunk) end_chunk();
    }
  }
  /// Adds `x[j][0, n)` to `s[j]` for `j` in [0, k): what `s[j].add(x[j], n)` does, with the
  /// whole chunks of two sums interleaved (each sum's chunk is a chain of dependent additions
  /// per accumulator: two sums side by side keep the adder busy). The same bits.
  static void add_each(running_sum* const* s, const T* const* x, int k, index_t n) noexcept {
    using V = simd<T>;
    constexpr index_t W = static_cast<index_t>(V::size), U = lanes / W;
    int j = 0;
    if (n == chunk)
      for (; j + 2 <= k; j += 2) {
        running_sum& a = *s[j];
        running_sum& b = *s[j + 1];
        if (a.pos_ != 0 || b.pos_ != 0) break;
        alignas(64) T ra[lanes], rb[lanes];
        const T* xa = x[j];
        const T* xb = x[j + 1];
        [&]<std::size_t... u>(std::index_sequence<u...>) {
          V pa[U] = {V(T(-0.0)) + V::load_unaligned(xa + u * W)...};
          V pb[U] = {V(T(-0.0)) + V::load_unaligned(xb + u * W)...};
          for (index_t i = lanes; i < chunk; i += lanes) {
            ((pa[u] += V::load_unaligned(xa + i + u * W)), ...);
            ((pb[u] += V::load_unaligned(xb + i + u * W)), ...);
          }
          (pa[u].store_aligned(ra + u * W), ...);
          (pb[u].store_aligned(rb + u * W), ...);
        }
        (std::make_index_sequence<static_cast<std::size_t>(U)>{});
        T ca = fold<lanes>(ra), cb = fold<lanes>(rb);
        sum_tree<T>::push(a.level_, 1, a.chunks_++, &ca, 1);
        sum_tree<T>::push(b.level_, 1, b.chunks_++, &cb, 1);
      }
    for (; j < k; ++j) s[j]->add(x[j], n);
  }

  /// A chunk's sum from its accumulators held in `lanes / W` SIMD registers (register u holds
  /// accumulators [u W, (u + 1) W)): the pairwise fold of `fold_lanes`, the same additions in
  /// the same pairs, its upper levels on whole registers.
  static T fold_registers(const simd<T>* acc) noexcept {
    using V = simd<T>;
    constexpr index_t W = static_cast<index_t>(V::size), U = lanes / W;
    V r[U];
    for (index_t u = 0; u < U; ++u) r[u] = acc[u];
    for (index_t h = U / 2; h >= 1; h /= 2)
      for (index_t u = 0; u < h; ++u) r[u] = r[u] + r[u + h];
#if defined(__AVX512F__)
    if constexpr ((std::is_same_v<T, double> && W == 8) || (std::is_same_v<T, float> && W == 16)) return fold_zmm(r[0]);
#endif
#if defined(__AVX__)
    if constexpr ((std::is_same_v<T, double> && W == 4) || (std::is_same_v<T, float> && W == 8)) return fold_ymm(r[0]);
#endif
    alignas(64) T a[W];
    r[0].store_aligned(a);
    return fold<W>(a);
  }
#if defined(__AVX512F__)
  /// The pairwise fold of one 512-bit register's lanes, in it: the upper half, quarter, ...
  /// brought down by a shuffle and added. (The shuffles' masked forms with every lane set, the
  /// same instruction: GCC 12 warns of the unmasked ones' undefined source register.)
  static double fold_zmm(__m512d v) noexcept {
    constexpr __mmask8 all = 0xFF;
    v = _mm512_add_pd(v, _mm512_mask_shuffle_f64x2(v, all, v, v, 0xEE));  // lanes 0-3: a[i] + a[i + 4]
    v = _mm512_add_pd(v, _mm512_mask_shuffle_f64x2(v, all, v, v, 0x01));  // lanes 0-1: + 2 apart
    return _mm512_cvtsd_f64(_mm512_add_pd(v, _mm512_mask_permute_pd(v, all, v, 0x01)));
  }
  static float fold_zmm(__m512 v) noexcept {
    constexpr __mmask16 all = 0xFFFF;
    v = _mm512_add_ps(v, _mm512_mask_shuffle_f32x4(v, all, v, v, 0xEE));  // lanes 0-7: a[i] + a[i + 8]
    v = _mm512_add_ps(v, _mm512_mask_shuffle_f32x4(v, all, v, v, 0x01));  // lanes 0-3: + 4 apart
    v = _mm512_add_ps(v, _mm512_mask_permute_ps(v, all, v, 0x0E));        // lanes 0-1: + 2 apart
    return _mm512_cvtss_f32(_mm512_add_ps(v, _mm512_mask_permute_ps(v, all, v, 0x01)));
  }
#endif
#if defined(__AVX__)
  /// The pairwise fold of one 256-bit register's lanes, in registers: (a0 + a2) + (a1 + a3) for
  /// doubles; for floats the halves, the quarters, then the pair.
  static double fold_ymm(__m256d v) noexcept {
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  }
  static float fold_ymm(__m256 v) noexcept {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
  }
#endif
  /// Adds the sum of a whole chunk the caller summed itself (value j of the chunk into
  /// accumulator j % lanes, in order, each from -0; folded by `fold_registers` or
  /// `fold_lanes`): the same bits as `add` of its values. Only where a chunk starts (after
  /// `reset` or whole chunks).
  void add_chunk_sum(T c) noexcept { sum_tree<T>::push(level_, 1, chunks_++, &c, 1); }

  /// Adds `n` values `step` apart (0: one value `n` times).
  void add(const T* x, index_t n, index_t step) noexcept {
    if (step == 1) return add(x, n);
    alignas(64) T buf[tile_elems];
    for (index_t i = 0; i < n; i += tile_elems) {
      const index_t m = std::min<index_t>(tile_elems, n - i);
      for (index_t k = 0; k < m; ++k) buf[k] = x[(i + k) * step];
      add(buf, m);
    }
  }

  /// The sum of everything added since the last `reset`.
  [[nodiscard]] T total() const noexcept {
    T acc = fold_lanes(lane_);
    sum_tree<T>::total(level_, 1, chunks_, pos_ > 0, &acc, 1);
    return acc;
  }

  /// The accumulators `l[0, lanes)` added pairwise (stride halving): a chunk's sum.
  static T fold_lanes(const T* l) noexcept {
    alignas(64) T a[lanes];
    std::copy(l, l + lanes, a);
    return fold<lanes>(a);
  }

  /// The sum of `n` values `step` apart on their own: what a fresh `running_sum` fed them
  /// gives, with less work for a short run (an output of a few values, as a softmax over a
  /// short dim sums): `n` values up to `lanes` sit in the first `bit_ceil(n)` accumulators, the
  /// others stay -0 and add nothing in the pairwise fold; it runs in registers, unrolled for
  /// each `n` (a loop through memory cost several times a plain sequential sum).
  [[nodiscard]] static T sum(const T* x, index_t n, index_t step) noexcept {
    if (n == 0) return T(0);
    if (n <= lanes) return short_sums[static_cast<std::size_t>(n - 1)](x, step);
    running_sum s;
    s.add(x, n, step);
    return s.total();
  }
  /// `sum` of `n` contiguous values: up to a chunk, in registers (whole rounds of the
  /// accumulators from -0, the last values one by one into theirs, then the pairwise fold),
  /// where a `running_sum` would take its accumulators through memory and its state through a
  /// reset and a total: a softmax's row of a few hundred values, summed once per row.
  [[nodiscard]] static T sum_contiguous(const T* x, index_t n) noexcept {
    if (n <= lanes || n > chunk) return sum(x, n, 1);
    using V = simd<T>;
    constexpr index_t W = static_cast<index_t>(V::size), U = lanes / W;
    const index_t whole = n / lanes * lanes;
    V acc[U];
    for (index_t u = 0; u < U; ++u) acc[u] = V(T(-0.0));
    [&]<std::size_t... u>(std::index_sequence<u...>) {
      for (index_t i = 0; i < whole; i += lanes) ((acc[u] += V::load_unaligned(x + i + u * W)), ...);
    }
    (std::make_index_sequence<static_cast<std::size_t>(U)>{});
    if (whole == n) return fold_registers(acc);
    alignas(64) T a[lanes];
    for (index_t u = 0; u < U; ++u) acc[u].store_aligned(a + u * W);
    for (index_t k = 0; whole + k < n; ++k) a[k] += x[whole + k];
    return fold<lanes>(a);
  }

 private:
  /// `a[0]` after adding `a[0, P)` pairwise in place, stride halving (constant strides: it
  /// vectorises).
  template <index_t P>
  static T fold(T* a) noexcept {
    [&]<std::size_t... k>(std::index_sequence<k...>) { ((fold_half<(P >> (k + 1))>(a)), ...); }
    (std::make_index_sequence<static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(P)) - 1)>{});
    return a[0];
  }
  template <index_t S>
  static void fold_half(T* a) noexcept {
    for (index_t i = 0; i < S; ++i) a[i] = a[i] + a[i + S];
  }
  /// `sum` of exactly `N` values (`N` <= `lanes`), unrolled.
  template <index_t N>
  static T short_sum(const T* x, index_t step) noexcept {
    constexpr auto P = static_cast<index_t>(std::bit_ceil(static_cast<std::uint64_t>(N)));
    T a[P];
    [&]<std::size_t... i>(std::index_sequence<i...>) {
      ((a[i] = static_cast<index_t>(i) < N ? T(-0.0) + x[static_cast<index_t>(i) * step] : T(-0.0)), ...);
    }
    (std::make_index_sequence<static_cast<std::size_t>(P)>{});
    [&]<std::size_t... k>(std::index_sequence<k...>) {
      (
          [&] {
            constexpr auto h = static_cast<std::size_t>(P >> (k + 1));
            [&]<std::size_t... i>(std::index_sequence<i...>) { ((a[i] = a[i] + a[i + h]), ...); }
            (std::make_index_sequence<h>{});
          }(),
          ...);
    }
    (std::make_index_sequence<static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(P)) - 1)>{});
    return a[0];
  }
  static constexpr auto short_sums = []<std::size_t... n>(std::index_sequence<n...>) {
    return std::array<T (*)(const T*, index_t) noexcept, sizeof...(n)>{&short_sum<static_cast<index_t>(n) + 1>...};
  }
  (std::make_index_sequence<static_cast<std::size_t>(lanes)>{});
  void end_chunk() noexcept {
    T c = fold_lanes(lane_);
    sum_tree<T>::push(level_, 1, chunks_++, &c, 1);
    std::fill_n(lane_, lanes, T(-0.0));
    pos_ = 0;
  }

  alignas(64) T lane_[lanes];
  T level_[64];
  index_t pos_;
  std::uint64_t chunks_;
};

/// The sums of `rows` x `m` outputs (column form) held in `out` (row-major, output rows `ld`
/// apart: a block of columns of a wider output): each output row receives a value per output
/// by the caller adding into `out` (e.g. `tile_reduce_into`), then `row_done(r)`. `finish()`
/// writes the totals over `out`. Values per output row may arrive interleaved between output
/// rows; each output row receives them in order. Outputs are independent: any block of
/// columns summed on its own gives the same bits.
template <Element T>
class column_sums {
 public:
  /// `count`: the values each output will receive (sizes the tree). Sets `out` to -0.
  void start(T* out, index_t rows, index_t m, index_t count, index_t ld = -1) {
    out_ = out, rows_ = rows, m_ = m, ld_ = ld < 0 ? m : ld;
    for (index_t r = 0; r < rows; ++r) std::fill_n(out + r * ld_, m, T(-0.0));
    const auto chunks = static_cast<std::uint64_t>(count / sum_run);
    levels_ = chunks == 0 ? 0 : static_cast<index_t>(std::bit_width(chunks));
    level_.resize(static_cast<std::size_t>(levels_ * rows * m));
    seen_.assign(static_cast<std::size_t>(rows), 0);
  }
  /// Output row `r` received one more value per output.
  void row_done(index_t r) {
    auto& n = seen_[static_cast<std::size_t>(r)];
    if (++n % sum_run != 0) return;
    T* const row = out_ + r * ld_;
    sum_tree<T>::push(level_.data() + r * m_, rows_ * m_, n / sum_run - 1, row, m_);
    std::fill_n(row, m_, T(-0.0));
  }
  /// Writes every output's sum over `out`.
  void finish() {
    for (index_t r = 0; r < rows_; ++r) {
      const std::uint64_t n = seen_[static_cast<std::size_t>(r)];
      const T* const level = level_.empty() ? nullptr : level_.data() + r * m_;  // no chunks: no levels to offset
      sum_tree<T>::total(level, rows_ * m_, n / sum_run, n % sum_run != 0, out_ + r * ld_, m_);
    }
  }

 private:
  T* out_ = nullptr;
  index_t rows_ = 0, m_ = 0, ld_ = 0, levels_ = 0;
  std::vector<T> level_;             ///< [levels][rows * m]
  std::vector<std::uint64_t> seen_;  ///< values received, per output row
};

/// The sum of values handed over in consecutive blocks, from each block's own total (a fresh
/// `running_sum` fed the block): bitwise what one `running_sum` fed them all gives, when every
/// block but the last is exactly `2^j` whole chunks (the same j for all; `split_pow2` with
/// `sum_chunk<T>` cuts so). Such a block is a perfect subtree of the chunk tree, so its total
/// is the tree's own node; the block totals then climb the same binary counter, and the last
/// block's total (its partial chunk and smaller groups, folded as `total` does) starts the fold.
template <Element T>
T sum_of_blocks(const T* totals, index_t blocks) noexcept {
  if (blocks <= 0) return T(0);
  T level[64];
  for (index_t b = 0; b + 1 < blocks; ++b) {
    T c = totals[b];
    sum_tree<T>::push(level, 1, static_cast<std::uint64_t>(b), &c, 1);
  }
  T acc = totals[blocks - 1];
  sum_tree<T>::total(level, 1, static_cast<std::uint64_t>(blocks - 1), true, &acc, 1);
  return acc;
}

/// The sum of `n` contiguous values (`running_sum::sum`'s bits) on all threads: blocks of
/// `2^j` chunks summed on their own, combined by `sum_of_blocks`.
template <Element T>
T sum_contiguous(const T* x, index_t n) {
  const block_split s = split_pow2(n, sum_chunk<T>, parallel_grain());
  if (s.count <= 1) return running_sum<T>::sum(x, n, 1);
  std::vector<T> totals(static_cast<std::size_t>(s.count));
  parallel_blocks(s.count, [&](index_t b) {
    running_sum<T> r;
    r.add(x + b * s.size, std::min(s.size, n - b * s.size));
    totals[static_cast<std::size_t>(b)] = r.total();
  });
  return sum_of_blocks(totals.data(), s.count);
}

}  // namespace fusegrad::detail
