#pragma once
/// \file fusegrad/loops/tile_reductions.hpp
/// A tile loop's reductions to one value, as both evaluators of tile loops run them (the
/// fused backend's runner, kernel/fused_runner.hpp, and the run-time programs,
/// jit/program.hpp and jit/row_step.hpp): a max fed tile by tile (`running_max`, the
/// counterpart of a sum's `running_sum`, core/accumulate.hpp), and the partial reductions of a
/// loop's parallel blocks combined as one thread's would be (`max_of_blocks`,
/// `sum_of_block_sums`). One implementation for both, so that they keep the same bits.

#include <limits>

#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/loops/tile.hpp"

namespace fusegrad::detail {

/// A max fed tile by tile (NaN propagating): its SIMD lanes and its scalar tail (`tile_max`).
/// A max is exact in any order; its ±0 and NaN payloads may differ from a sequential max.
template <Element T>
struct running_max {
  simd<T> acc;
  T tail;

  running_max() noexcept { reset(); }
  /// Starts afresh: the max of nothing, -inf.
  void reset() noexcept {
    acc = simd<T>(-std::numeric_limits<T>::infinity());
    tail = -std::numeric_limits<T>::infinity();
  }
  /// Takes in `n` contiguous values.
  void add(const T* src, index_t n) noexcept { tile_max(src, n, acc, tail); }
  /// Takes in another max's state, lane by lane (a later block's).
  void merge(const running_max& o) noexcept {
    acc = lanes::max(acc, o.acc);
    tail = lanes::max(tail, o.tail);
  }
  /// The max of everything taken in: the lanes, then the tail.
  [[nodiscard]] T total() const noexcept { return lanes::max(lanes_max(acc), tail); }
};

/// The max of a loop run in `blocks` blocks, `part(b)` block b's `running_max`: merged in
/// block order.
template <Element T, class Part>
T max_of_blocks(index_t blocks, Part&& part) {
  running_max<T> m;
  for (index_t b = 0; b < blocks; ++b) m.merge(part(b));
  return m.total();
}

/// The sum of a loop run in `blocks` blocks of 2^j sum chunks, `part(b)` block b's
/// `running_sum`: the blocks' totals (into `totals`, `blocks` long) combined by
/// `sum_of_blocks`, one thread's bits.
template <Element T, class Part>
T sum_of_block_sums(index_t blocks, Part&& part, T* totals) {
  for (index_t b = 0; b < blocks; ++b) totals[b] = part(b).total();
  return sum_of_blocks(totals, blocks);
}

}  // namespace fusegrad::detail
