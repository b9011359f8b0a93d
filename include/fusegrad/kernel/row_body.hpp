#pragma once
/// \file fusegrad/kernel/row_body.hpp
/// A stage's row body: the one part of the fused loops compiled per graph and stage (its
/// loads and direct calls of its nodes' tile kernels, with constant slots), and what it reads
/// from the run-time runner (`row_args`).

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/kernel/layout.hpp"
#include "fusegrad/loops/tile.hpp"

namespace fusegrad::detail {

/// What a stage's row body reads: tile pointers by slot (loads first, then nodes), each load's
/// row start and step (0: a broadcast buffer, 1: contiguous), each node's destination
/// `dst[q] + i * step[q]` (a tile register, step 0, or its stored tensor, step 1), and per-tile
/// hooks of the runner (null when the row has nothing for them to do).
template <Element T>
struct row_args {
  const void* const* ops;
  const T** slot;
  const T* const* lrow;
  const index_t* lstep;
  T* const* dst;
  const index_t* step;
  void (*before)(void*, index_t i, index_t m);  ///< loads to divide (a mean's gradient)
  void (*after)(void*, index_t i, index_t m);   ///< broadcast stores and reductions
  void* hook_state;
};

/// A stage's row of `n` elements, tile by tile: its loads, then its element-wise nodes as direct
/// calls of their tile kernels.
template <Element T>
using row_body_fn = void (*)(const row_args<T>&, index_t n);

/// Stage `S`'s row body (see `row_body_fn`).
template <class A, const auto& Active, const auto& Keep, int S, Element T>
void row_body(const row_args<T>& r, index_t n) {
  static constexpr auto& L = fused_layout_v<A, Active, Keep>;
  constexpr auto at = [](int v) { return static_cast<std::size_t>(v); };
  constexpr int c0 = L.first_compute[at(S)];
  constexpr std::size_t NL = at(L.first_load[at(S) + 1] - L.first_load[at(S)]);
  constexpr std::size_t NC = at(L.first_compute[at(S) + 1] - c0);
  const T** const slot = r.slot;
  for (index_t i = 0; i < n; i += tile_elems) {
    const index_t m = std::min(tile_elems, n - i);
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      ((slot[J] = r.lrow[J] + i * r.lstep[J]), ...);
    }(std::make_index_sequence<NL>{});
    if (r.before) r.before(r.hook_state, i, m);
    [&]<std::size_t... Q>(std::index_sequence<Q...>) {
      (
          [&] {
            constexpr std::size_t q = at(c0) + Q;
            constexpr auto c = at(L.compute_nodes[q]);
            T* const d = r.dst[Q] + i * r.step[Q];
            if constexpr (L.tile_register[q] < 0) {  // a custom node: its value is in another slot; copied if stored
              if (r.step[Q] != 0) std::copy(slot[L.out_slot[q]], slot[L.out_slot[q]] + m, d);
            } else {
              using E = typename A::template node_t<c>;
              using Op = std::remove_cvref_t<decltype(std::declval<const E&>().op)>;
              tile_op(*static_cast<const Op*>(r.ops[c]), slot[L.a_slot[q]], slot[L.b_slot[q]], d, m);
              slot[L.out_slot[q]] = d;
            }
          }(),
          ...);
    }(std::make_index_sequence<NC>{});
    if (r.after) r.after(r.hook_state, i, m);
  }
}

/// Per stage of a graph's loops, its row body.
template <class A, const auto& Active, const auto& Keep, Element T>
struct fused_bodies {
  static constexpr auto stages = static_cast<std::size_t>(fused_layout_v<A, Active, Keep>.stages);
  static constexpr std::array<row_body_fn<T>, stages> value = []<int... S>(std::integer_sequence<int, S...>) {
    return std::array<row_body_fn<T>, stages>{&row_body<A, Active, Keep, S, T>...};
  }(std::make_integer_sequence<int, static_cast<int>(stages)>{});
};

}  // namespace fusegrad::detail
