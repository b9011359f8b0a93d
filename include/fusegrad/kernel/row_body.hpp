#pragma once
/// \file fusegrad/kernel/row_body.hpp
/// A stage's row body: the one part of the fused loops compiled per graph and stage (each
/// SIMD batch loaded and taken through the stage's nodes in registers, with constant slots),
/// and what it reads from the run-time runner (`row_args`).

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/kernel/layout.hpp"
#include "fusegrad/loops/tile.hpp"
#include "fusegrad/ops/op.hpp"

namespace fusegrad::detail {

/// What a stage's row body reads: tile pointers by slot (loads first, then nodes), each load's
/// row start and step (0: a broadcast buffer, one SIMD batch of the value, 1: contiguous), each node's destination
/// `dst[q] + i * step[q]` (a tile register, step 0, or its stored tensor, step 1), and per-tile
/// hooks of the runner (null when the row has nothing for them to do), told the row (of the
/// call's `rows`) and the tile. Row `k` of a call starts `k * lrs[j]` after `lrow[j]` for load
/// `j` (a broadcast load: its batch for the row) and `k * drs[q]` after `dst[q]` for node `q`.
template <Element T>
struct row_args {
  const void* const* ops;
  const T** slot;
  const T* const* lrow;
  const index_t* lstep;
  T* const* dst;
  const index_t* step;
  void (*before)(void*, index_t row, index_t i, index_t m);  ///< loads to divide (a mean's gradient)
  void (*after)(void*, index_t row, index_t i, index_t m);   ///< broadcast stores and reductions
  void* hook_state;
  index_t rows = 1;              ///< rows of the call, each `n` elements
  const index_t* lrs = nullptr;  ///< per load: its start's advance per row (read where `rows` > 1)
  const index_t* drs = nullptr;  ///< per element-wise node: its destination's advance per row (the same)
};

/// A stage's `rows` rows (`row_args`) of `n` elements each, tile by tile, each tile batch by
/// batch through the stage's element-wise nodes.
template <Element T>
using row_body_fn = void (*)(const row_args<T>&, index_t n);

/// The most element-wise nodes a stage may have for its loop to run them batch by batch in
/// registers (see `stage_in_registers`), and the most when none of them is a slow op.
inline constexpr std::size_t register_stage_nodes = 16;
inline constexpr std::size_t register_cheap_stage_nodes = 64;
/// The most slow ops (a transcendental function: see `slow_op_cost`) one path through a stage
/// may hold for its loop to run batch by batch in registers: one (`cos(cos(x)) * y`'s forward,
/// its two cosines in separate clusters, runs faster than with both in registers, and as fast
/// as the hand loop).
inline constexpr int register_slow_chain = 1;
/// The most element-wise nodes of a stage run in clusters (see `stage_batches::cluster_of`)
/// when they cannot all run in registers; a larger stage runs node by node over each tile.
inline constexpr std::size_t cluster_stage_nodes = 32;
/// Whether canonical node `c` of `A` computes a slow op (a custom node computes nothing: its
/// value is its operand's).
template <class A>
constexpr bool slow_node(std::size_t c) {
  return A::cg.kind[c] != gkind::custom && A::cg.cost[c] >= slow_op_cost;
}

/// The most slow ops on one path through the nodes of stage `S` (a chain a batch waits on),
/// and how many element-wise nodes the stage has, read from the schedule.
template <class A, const auto& Active, const auto& Keep>
constexpr std::pair<int, std::size_t> slow_chain(int S) {
  constexpr auto& sch = schedule_v<A, Active, Keep>;
  std::array<int, A::M> depth{};  // per node: slow ops on the longest path to it in the stage
  int most = 0;
  std::size_t nodes = 0;
  for (std::size_t c = 0; c < A::M; ++c) {
    if (sch.roles[c] != role::compute || sch.stage[c] != S) continue;
    ++nodes;
    int d = 0;
    for (int ch : A::cg.children[c])
      if (ch >= 0) d = std::max(d, depth[static_cast<std::size_t>(ch)]);
    if (slow_node<A>(c)) ++d;
    depth[c] = d;
    most = std::max(most, d);
  }
  return {most, nodes};
}

/// Whether the batches of stage `S` go through its nodes in registers (the values of a batch
/// never leave them), else in clusters or node by node over each tile (see `stage_batches`).
/// Not where a batch would wait on a chain of slow ops: a batch through ten `tanh` in a row
/// waits for ten latencies, where over a tile the batches of one `tanh` overlap (the ten-layer
/// chain's forward runs more than twice as fast by tiles as in registers, and faster still in
/// clusters). In registers where the stage is small, or larger but of cheap ops only, whose
/// operands through L1 would cost more than the ops (the chain's backward, 50 nodes of
/// arithmetic, runs more than twice as fast in registers as by tiles); a large stage with slow
/// ops runs as fast by tiles (a 40-node function), and every op a batch inlines adds to the
/// compile time of the user's TU (slow ops are also the long ones).
template <class A, const auto& Active, const auto& Keep>
constexpr bool stage_in_registers(int S) {
  const auto [chain, nodes] = slow_chain<A, Active, Keep>(S);
  return chain <= register_slow_chain &&
         (nodes <= register_stage_nodes || (chain == 0 && nodes <= register_cheap_stage_nodes));
}

/// Whether a node of type `E` holds one value per row of a space reduced along its last
/// dim: a reduction along the last dim, or its value broadcast back along the rows.
template <class E>
inline constexpr bool along_rows = false;
template <reduce_op K, class U>
inline constexpr bool along_rows<reduce_expr<K, reduce_axis::last, U>> = true;
template <reduce_op K, std::size_t KK, class U>
inline constexpr bool along_rows<unreduce_expr<K, reduce_axis::last, KK, U>> = true;

/// Per canonical node of `A`, whether its value is, by the graph's structure, one value per
/// row (`along_rows`, a `sumto` to such a reduction's shape, or an element-wise node of such
/// values only): read by a stage's loop, it is likely broadcast along the row. A guess the
/// row body checks at run time (`stage_batches::row_wide_loads_broadcast`).
template <class A>
constexpr std::array<bool, A::M> row_constant_nodes() {
  constexpr auto along = []<std::size_t... C>(std::index_sequence<C...>) {
    return std::array<bool, A::M>{along_rows<typename A::template node_t<C>>...};
  }
  (std::make_index_sequence<A::M>{});
  constexpr auto sources = []<std::size_t... C>(std::index_sequence<C...>) {
    return std::array<int, A::M>{sumto_source<typename A::template node_t<C>>...};
  }
  (std::make_index_sequence<A::M>{});
  std::array<bool, A::M> r{};
  for (std::size_t c = 0; c < A::M; ++c) {  // operands come before their nodes
    const gkind k = A::cg.kind[c];
    if (k == gkind::reduction || k == gkind::unreduce) {
      r[c] = along[c];
    } else if (k == gkind::sumto) {
      r[c] = sources[c] >= 0 && along[static_cast<std::size_t>(sources[c])];
    } else if (k == gkind::pointwise || k == gkind::custom) {
      bool all = true, any = false;
      for (int ch : A::cg.children[c])
        if (ch >= 0) all = all && r[static_cast<std::size_t>(ch)], any = true;
      r[c] = all && any;
    }
  }
  return r;
}

/// Stage `S`'s loop body over one tile, a SIMD batch at a time (see `row_body`).
template <class A, const auto& Active, const auto& Keep, int S, Element T>
struct stage_batches {
  static constexpr auto& L = fused_layout_v<A, Active, Keep>;
  static constexpr std::size_t s = static_cast<std::size_t>(S);
  static constexpr std::size_t c0 = static_cast<std::size_t>(L.first_compute[s]);
  /// The stage's loads and element-wise nodes.
  static constexpr std::size_t load_count = static_cast<std::size_t>(L.first_load[s + 1] - L.first_load[s]);
  static constexpr std::size_t node_count = static_cast<std::size_t>(L.first_compute[s + 1] - L.first_compute[s]);
  using V = simd<T>;
  static constexpr index_t W = static_cast<index_t>(V::size);
  /// Whether the stage's batches go through its nodes in registers (`stage_in_registers`).
  static constexpr bool in_registers = stage_in_registers<A, Active, Keep>(S);
  /// Per element-wise node of the stage, its cluster: consecutive nodes that run batch by
  /// batch in registers over the whole tile before the next cluster starts, a path through
  /// one of them holding at most one slow op (a stage in registers is one cluster). Values a
  /// later cluster reads go through their tile registers (L1). The ten-layer tanh chain's
  /// forward runs as a careful hand loop does, one `tanh(h * w)` per cluster over a tile.
  static constexpr std::array<int, node_count + 1> cluster_of = [] {
    std::array<int, node_count + 1> k{};
    if (in_registers || node_count > cluster_stage_nodes) return k;
    std::array<int, A::M> depth{}, home{};  // per node: slow ops on a path to it in its cluster; its cluster
    home.fill(-1);
    int cur = 0;
    for (std::size_t q = 0; q < node_count; ++q) {
      const auto c = static_cast<std::size_t>(L.compute_nodes[c0 + q]);
      const bool slow = slow_node<A>(c);
      int d = 0;
      for (int ch : A::cg.children[c])
        if (ch >= 0 && home[static_cast<std::size_t>(ch)] == cur) d = std::max(d, depth[static_cast<std::size_t>(ch)]);
      if (d + (slow ? 1 : 0) > 1) {
        ++cur;
        d = 0;
      }
      depth[c] = d + (slow ? 1 : 0);
      home[c] = cur;
      k[q] = cur;
    }
    return k;
  }();
  static constexpr int clusters =
      in_registers ? 1 : (node_count > cluster_stage_nodes ? 0 : cluster_of[node_count > 0 ? node_count - 1 : 0] + 1);
  /// Per cluster, the slots its batches load (read, not computed in it), and per node whether
  /// a later cluster reads its value (it writes it to its tile register).
  static constexpr std::size_t slot_count = load_count + node_count + 1;
  static constexpr auto cluster_loads = [] {
    std::array<std::array<bool, slot_count>, (clusters > 0 ? clusters : 1)> need{};
    std::array<int, slot_count> made{};  // per slot: the cluster computing it (-1: a load)
    made.fill(-1);
    for (std::size_t q = 0; q < node_count; ++q)
      if (L.tile_register[c0 + q] >= 0) made[static_cast<std::size_t>(L.out_slot[c0 + q])] = cluster_of[q];
    for (std::size_t q = 0; q < node_count; ++q) {
      const auto K = static_cast<std::size_t>(cluster_of[q]);
      const bool custom_node = L.tile_register[c0 + q] < 0;
      for (int sl : {custom_node ? L.out_slot[c0 + q] : L.a_slot[c0 + q], custom_node ? -1 : L.b_slot[c0 + q]})
        if (sl >= 0 && static_cast<std::size_t>(sl) != slot_count - 1 &&
            made[static_cast<std::size_t>(sl)] != static_cast<int>(K))
          need[K][static_cast<std::size_t>(sl)] = true;
    }
    return need;
  }();
  static constexpr std::array<bool, node_count + 1> crosses = [] {
    std::array<bool, node_count + 1> x{};
    for (std::size_t q = 0; q < node_count; ++q)
      for (int K = cluster_of[q] + 1; K < clusters; ++K)
        x[q] = x[q] || (L.tile_register[c0 + q] >= 0 &&
                        cluster_loads[static_cast<std::size_t>(K)][static_cast<std::size_t>(L.out_slot[c0 + q])]);
    return x;
  }();
  /// The slots a store or a reduction of the stage reads (through the runner's per-tile
  /// hook): in memory at the end of a tile.
  static constexpr std::array<bool, load_count + node_count + 1> hooked = [] {
    std::array<bool, load_count + node_count + 1> h{};
    for (int j = L.first_store[s]; j < L.first_store[s + 1]; ++j)
      h[static_cast<std::size_t>(L.store_slot[static_cast<std::size_t>(j)])] = true;
    for (int j = L.first_reduce[s]; j < L.first_reduce[s + 1]; ++j)
      h[static_cast<std::size_t>(L.reduce_slot[static_cast<std::size_t>(j)])] = true;
    return h;
  }();
  /// Per element-wise node: whether the next node of the stage is its sibling (sin and cos of
  /// one operand, placed together by the layout) in the same cluster: the node computes both
  /// values with its op's `with_sibling`, and the next node computes nothing.
  static constexpr std::array<bool, node_count + 1> sibling_next = [] {
    std::array<bool, node_count + 1> r{};
    for (std::size_t q = 0; q + 1 < node_count; ++q)
      r[q] = L.tile_register[c0 + q] >= 0 && L.tile_register[c0 + q + 1] >= 0 &&
             A::cg.sibling[static_cast<std::size_t>(L.compute_nodes[c0 + q])] == L.compute_nodes[c0 + q + 1] &&
             cluster_of[q] == cluster_of[q + 1];
    return r;
  }();
  static constexpr std::array<bool, node_count + 1> sibling_prev = [] {
    std::array<bool, node_count + 1> r{};
    for (std::size_t q = 1; q < node_count; ++q) r[q] = sibling_next[q - 1];
    return r;
  }();
  /// The stage's row-wide nodes: element-wise nodes of row-constant values
  /// (`row_constant_nodes`) whose operands are loads of such values or row-wide nodes, not
  /// a sibling pair, in a stage run batch by batch. Where the loads they read are broadcast
  /// along the row (`row_wide_loads_broadcast`), the row body computes them once per row
  /// (`row_wide_values`) instead of at every batch: the `log` of a row's sum in log_softmax,
  /// the guard of logsumexp's shift, layer_norm's `rsqrt` of the variance. The same op on the
  /// same broadcast batch: the same bits.
  static constexpr std::array<bool, node_count + 1> row_wide_node = [] {
    std::array<bool, node_count + 1> h{};
    if (clusters == 0) return h;
    constexpr auto constant = row_constant_nodes<A>();
    std::array<bool, slot_count> wide{};  // per slot: a row-constant load, or a row-wide node's value
    for (std::size_t j = 0; j < load_count; ++j)
      wide[j] = constant[static_cast<std::size_t>(L.load_nodes[static_cast<std::size_t>(L.first_load[s]) + j])];
    wide[slot_count - 1] = true;  // the null slot: no operand
    for (std::size_t q = 0; q < node_count; ++q) {
      if (L.tile_register[c0 + q] < 0) continue;  // a custom node: its value is its operand's slot
      const auto c = static_cast<std::size_t>(L.compute_nodes[c0 + q]);
      h[q] = constant[c] && !sibling_next[q] && !sibling_prev[q] && wide[static_cast<std::size_t>(L.a_slot[c0 + q])] &&
             wide[static_cast<std::size_t>(L.b_slot[c0 + q])];
      if (h[q]) wide[static_cast<std::size_t>(L.out_slot[c0 + q])] = true;
    }
    return h;
  }();
  static constexpr auto row_wide_list = index_list([] {
    std::array<bool, node_count> m{};
    for (std::size_t q = 0; q < node_count; ++q) m[q] = row_wide_node[q];
    return m;
  });
  /// The loads the row-wide nodes read.
  static constexpr auto row_wide_load_list = index_list([] {
    std::array<bool, load_count> m{};
    for (std::size_t q = 0; q < node_count; ++q)
      if (row_wide_node[q])
        for (int sl : {L.a_slot[c0 + q], L.b_slot[c0 + q]})
          if (static_cast<std::size_t>(sl) < load_count) m[static_cast<std::size_t>(sl)] = true;
    return m;
  });
  /// Whether the row-wide nodes' loads are broadcast along the row (`lstep` 0: one batch of
  /// the row's value), so that the nodes' values are the same at every batch of a row.
  [[gnu::always_inline]] static bool row_wide_loads_broadcast(const index_t* lstep) {
    bool all = true;
    for (std::size_t j : row_wide_load_list) all = all && lstep[j] == 0;
    return all;
  }
  /// Element-wise node `Q` of the stage is a custom node (its value is its operand's).
  template <std::size_t Q>
  static constexpr bool custom = L.tile_register[c0 + Q] < 0;
  /// The op objects of the graph's nodes, by node (their constants: a scalar operand).
  using ops_t = const void* const*;

  /// Whether node `q` of the stage writes its value to `dst[q]` (`step`: the row's steps): a
  /// node whose value a store or a reduction reads; a custom node (its value is its operand's
  /// slot) only where it is stored.
  [[gnu::always_inline]] static bool writes(std::size_t q, const index_t* step) {
    return L.tile_register[c0 + q] < 0 ? step[q] != 0 : hooked[static_cast<std::size_t>(L.out_slot[c0 + q])];
  }
  /// The same, or a later cluster reads it.
  [[gnu::always_inline]] static bool writes_in_cluster(std::size_t q, const index_t* step) {
    return crosses[q] || writes(q, step);
  }
  /// Node `Q`'s value into its slot of `v` (a custom node or a sibling computed with the
  /// node before: nothing).
  template <std::size_t Q>
  [[gnu::always_inline]] static void compute(V* v, const ops_t& ops) {
    constexpr auto q = c0 + Q;
    constexpr auto out = static_cast<std::size_t>(L.out_slot[q]);
    if constexpr (!custom<Q> && !sibling_prev[Q]) {  // (a sibling's value: computed with the node before)
      using E = typename A::template node_t<static_cast<std::size_t>(L.compute_nodes[q])>;
      using Op = std::remove_cvref_t<decltype(std::declval<const E&>().op)>;
      const Op& op = *static_cast<const Op*>(ops[L.compute_nodes[q]]);
      constexpr auto a = static_cast<std::size_t>(L.a_slot[q]), b = static_cast<std::size_t>(L.b_slot[q]);
      if constexpr (sibling_next[Q]) {
        constexpr auto out2 = static_cast<std::size_t>(L.out_slot[q + 1]);
        const auto [y, s] = op.with_sibling(v[a]);
        v[out] = y, v[out2] = s;
        op_boundary(v[out2]);
      } else if constexpr (requires { op.value(v[a]); }) {
        v[out] = op.value(v[a]);
      } else {
        v[out] = op.value(v[a], v[b]);
      }
      op_boundary(v[out]);  // each node rounds as its own kernel does (eager's bits)
    }
  }
  /// Node `Q` at the batch at element `k`: its value (a row-wide node's, where `Wide`, read
  /// from the row's batch of it, `wide + Q * W`), written where a store, a reduction or a
  /// later cluster reads it.
  template <std::size_t Q, bool Wide>
  static void node(V* v, const ops_t& ops, T* const* dst, const index_t* step, index_t k,
                   [[maybe_unused]] const T* wide) {
    constexpr auto out = static_cast<std::size_t>(L.out_slot[c0 + Q]);
    if constexpr (Wide && row_wide_node[Q]) v[out] = V::load_aligned(wide + Q * W);
    else compute<Q>(v, ops);
    if (writes_in_cluster(Q, step)) v[out].store_unaligned(dst[Q] + k);
  }
  /// The row's batch of each row-wide node into `wide + q * W`, from the row's broadcast
  /// batches of its loads (`lrow`).
  template <std::size_t... I, std::size_t... P>
  static void row_wide_values(const ops_t& ops, const T* const* lrow, T* wide, std::index_sequence<I...>,
                              std::index_sequence<P...>) {
    V v[slot_count];
    ((v[row_wide_load_list[I]] = V::load_unaligned(lrow[row_wide_load_list[I]])), ...);
    (
        [&] {
          constexpr std::size_t q = row_wide_list[P];
          compute<q>(v, ops);
          v[static_cast<std::size_t>(L.out_slot[c0 + q])].store_aligned(wide + q * W);
        }(),
        ...);
  }
  /// Cluster `K`'s slots to load and its nodes, as lists (a batch instantiates nothing else).
  template <int K>
  static constexpr auto load_list = index_list([] {
    auto m = cluster_loads[static_cast<std::size_t>(K)];
    m[slot_count - 1] = false;  // the null slot
    return m;
  });
  template <int K>
  static constexpr auto node_list = index_list([] {
    std::array<bool, node_count> m{};
    for (std::size_t q = 0; q < node_count; ++q) m[q] = cluster_of[q] == K;
    return m;
  });
  /// The batch at element `k` of the tile through cluster `K`: the slots it loads from `at`
  /// (by slot: loads, then earlier clusters' values; each pointer at this batch's elements),
  /// values to `dst` (see `writes`).
  template <int K, bool Wide, std::size_t... I, std::size_t... P>
  static void batch([[maybe_unused]] const ops_t& ops, [[maybe_unused]] const T* const* at,
                    [[maybe_unused]] T* const* dst, [[maybe_unused]] const index_t* step, [[maybe_unused]] index_t k,
                    [[maybe_unused]] const T* wide, std::index_sequence<I...>, std::index_sequence<P...>) {
    V v[slot_count];
    ((v[load_list<K>[I]] = V::load_unaligned(at[load_list<K>[I]])), ...);
    (node<node_list<K>[P], Wide>(v, ops, dst, step, k, wide), ...);
  }
  /// The batches at elements [k, end) of the tile (`end - k` a multiple of `W`) through
  /// cluster `K`: one loop for the full batches and the padded last one. A slot is read at
  /// `src[slot] + (k & mask[slot])`: mask 0 for a broadcast load (one batch of its value, see
  /// `row_body`), all ones otherwise.
  template <int K, bool Wide>
  static void batches(const ops_t& ops, const T* const* src, const index_t* mask, T* const* dst, const index_t* step,
                      index_t k, index_t end, const T* wide) {
    // Each slot's pointer steps on by its own stride (0 or a batch) in the loop's own array,
    // which nothing else can reach: read from the runner's slots, the pointers would be loaded
    // again at every batch (a SIMD store may alias anything), and masking the offset takes two
    // instructions per load where the step takes one.
    const T* at[slot_count];
    index_t stride[slot_count];
    for (std::size_t j : load_list<K>) at[j] = src[j] + (k & mask[j]), stride[j] = W & mask[j];
    for (; k < end; k += W) {
      batch<K, Wide>(ops, at, dst, step, k, wide, std::make_index_sequence<load_list<K>.size()>{},
                     std::make_index_sequence<node_list<K>.size()>{});
      for (std::size_t j : load_list<K>) at[j] += stride[j];
    }
  }
  /// Every cluster in turn over [k, end) (`Wide`: the row-wide nodes' values read from the
  /// row's batches at `wide`).
  template <bool Wide, int... K>
  static void all_batches(const ops_t& ops, const T* const* src, const index_t* mask, T* const* dst,
                          const index_t* step, index_t k, index_t end, const T* wide,
                          std::integer_sequence<int, K...>) {
    (batches<K, Wide>(ops, src, mask, dst, step, k, end, wide), ...);
  }
  /// A large stage runs node by node over the whole tile instead, each node with its tile
  /// kernel (operands and results through L1).
  template <std::size_t... Q>
  static void tile_nodes(const row_args<T>& r, const T** slot, T* const* dst, index_t m, std::index_sequence<Q...>) {
    (
        [&] {
          constexpr std::size_t q = c0 + Q;
          if constexpr (custom<Q>) {  // its value is in another slot; copied if stored
            if (r.step[Q] != 0) std::copy(slot[L.out_slot[q]], slot[L.out_slot[q]] + m, dst[Q]);
          } else if constexpr (sibling_prev[Q]) {  // computed with the node before
          } else if constexpr (sibling_next[Q]) {
            using E = typename A::template node_t<static_cast<std::size_t>(L.compute_nodes[q])>;
            using Op = std::remove_cvref_t<decltype(std::declval<const E&>().op)>;
            tile_sibling_kernel(*static_cast<const Op*>(r.ops[L.compute_nodes[q]]), slot[L.a_slot[q]], dst[Q],
                                dst[Q + 1], m);
          } else {
            using E = typename A::template node_t<static_cast<std::size_t>(L.compute_nodes[q])>;
            using Op = std::remove_cvref_t<decltype(std::declval<const E&>().op)>;
            tile_op(*static_cast<const Op*>(r.ops[L.compute_nodes[q]]), slot[L.a_slot[q]], slot[L.b_slot[q]], dst[Q],
                    m);
          }
        }(),
        ...);
  }
};

/// The last, partial batch of a tile (elements [k, m)): zero-padded copies of its operands
/// through the same clusters, the valid lanes out, so that an element's bits never depend on
/// where it sits.
template <class A, const auto& Active, const auto& Keep, int S, Element T, bool Wide>
[[gnu::always_inline]] inline void row_partial_batch(const row_args<T>& r, const T* const* slot, const index_t* mask,
                                                     T* const* dst, index_t k, index_t m, const T* wide) {
  using B = stage_batches<A, Active, Keep, S, T>;
  constexpr std::size_t load_count = B::load_count, node_count = B::node_count;
  constexpr index_t W = B::W;
  const index_t rem = m - k;
  alignas(64) T in[load_count > 0 ? load_count : 1][W];
  // Every node writes its `out` row before a store reads it (`writes` implies
  // `writes_in_cluster`); zeroed anyway, as GCC cannot see that through the clusters'
  // fold and warns (-Wmaybe-uninitialized) in a release build.
  alignas(64) T out[node_count > 0 ? node_count : 1][W] = {};
  const T* src[B::slot_count];  // by slot: the loads' copies, the nodes' values (a later cluster reads)
  T* to[node_count > 0 ? node_count : 1];
  // (a masked load stored whole: the batch loads below read one store, which forwards;
  // copied element by element, each stalled)
  for (std::size_t j = 0; j < load_count; ++j)
    load_head<false>(slot[j] + (k & mask[j]), rem).store_aligned(in[j]), src[j] = in[j];
  for (std::size_t q = 0; q < node_count; ++q) src[load_count + q] = to[q] = out[q];
  src[load_count + node_count] = nullptr;
  B::template all_batches<Wide>(r.ops, src, mask, to, r.step, 0, W, wide,
                                std::make_integer_sequence<int, B::clusters>{});
  for (std::size_t q = 0; q < node_count; ++q)
    if (B::writes(q, r.step)) store_head(dst[q] + k, simd<T>::load_aligned(out[q]), rem);
}

/// Row `row` of a call of `row_body`: its tiles from `lrow` (per load) into `dstart` (per
/// node), with the broadcast masks `mask` and the nodes' destinations in `dst`.
template <class A, const auto& Active, const auto& Keep, int S, Element T, bool Wide>
[[gnu::always_inline]] inline void row_tiles(const row_args<T>& r, index_t n, index_t row, const T* const* lrow,
                                             T* const* dstart, const index_t* mask, T** dst, const T* wide) {
  using B = stage_batches<A, Active, Keep, S, T>;
  constexpr std::size_t load_count = B::load_count, node_count = B::node_count;
  constexpr index_t W = B::W;
  const T** const slot = r.slot;
  const void* const* const ops = r.ops;
  for (index_t i = 0; i < n; i += tile_elems) {
    const index_t m = std::min(tile_elems, n - i);
    for (std::size_t j = 0; j < load_count; ++j) slot[j] = lrow[j] + i * r.lstep[j];
    if (r.before) r.before(r.hook_state, row, i, m);
    for (std::size_t q = 0; q < node_count; ++q) {
      dst[q] = dstart[q] + i * r.step[q];
      if (B::L.tile_register[B::c0 + q] >= 0) slot[B::L.out_slot[B::c0 + q]] = dst[q];
    }
    if constexpr (B::clusters == 0) {  // node by node over the tile, each with its tile kernel
      B::tile_nodes(r, slot, dst, m, std::make_index_sequence<node_count>{});
    } else {
      constexpr auto clusters = std::make_integer_sequence<int, B::clusters>{};
      const index_t k = m / W * W;
      B::template all_batches<Wide>(ops, slot, mask, dst, r.step, 0, k, wide, clusters);
      if (k < m) row_partial_batch<A, Active, Keep, S, T, Wide>(r, slot, mask, dst, k, m, wide);
    }
    if (r.after) r.after(r.hook_state, row, i, m);
  }
}

/// The rows of a call of stage `S`'s row body (see `row_body`); `Wide`: the row-wide nodes
/// computed once per row (`stage_batches::row_wide_node`).
template <class A, const auto& Active, const auto& Keep, int S, Element T, bool Wide>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): a kernel's loop nest
[[gnu::always_inline]] inline void row_rows(const row_args<T>& r, index_t n) {
  using B = stage_batches<A, Active, Keep, S, T>;
  constexpr std::size_t load_count = B::load_count, node_count = B::node_count;
  T* dst[node_count > 0 ? node_count : 1];
  // A broadcast load (step 0) holds one batch of its value per row (the runner's
  // `set_row_loads` or `fill_row_batches`): the batches read it at offset `k & 0`; the node-by-node path's tile kernels
  // read it widened to the tile.
  index_t mask[B::slot_count];
  const T* lrow[load_count > 0 ? load_count : 1];
  const T* lstart[load_count > 0 ? load_count : 1];
  T* dstart[node_count > 0 ? node_count : 1];
  alignas(64) T wide[B::clusters == 0 && load_count > 0 ? load_count : 1][B::clusters == 0 ? tile_elems : 1];
  alignas(64) T row_batches[Wide ? node_count : 1][B::W];  // the row-wide nodes' batches of the row
  for (std::size_t j = 0; j < B::slot_count; ++j) mask[j] = j >= load_count || r.lstep[j] != 0 ? ~index_t{0} : 0;
  for (std::size_t j = 0; j < load_count; ++j) lstart[j] = r.lrow[j];
  for (std::size_t q = 0; q < node_count; ++q) dstart[q] = r.dst[q];
  // A short row's set-up in the runner (its loads, destinations and reductions found again)
  // cost as much as its work: a call runs a block of rows, each a few pointer steps on.
  for (index_t row = 0; row < r.rows; ++row) {
    if (row > 0) {
      for (std::size_t j = 0; j < load_count; ++j) lstart[j] += r.lrs[j];
      for (std::size_t q = 0; q < node_count; ++q) dstart[q] += r.drs[q];
    }
    for (std::size_t j = 0; j < load_count; ++j) {
      lrow[j] = lstart[j];
      if constexpr (B::clusters == 0)
        if (r.lstep[j] == 0) std::fill_n(wide[j], std::min(n, tile_elems), lstart[j][0]), lrow[j] = wide[j];
    }
    if constexpr (Wide)
      B::row_wide_values(r.ops, lrow, row_batches[0], std::make_index_sequence<B::row_wide_load_list.size()>{},
                         std::make_index_sequence<B::row_wide_list.size()>{});
    row_tiles<A, Active, Keep, S, T, Wide>(r, n, row, lrow, dstart, mask, dst, row_batches[0]);
  }
}

/// Stage `S`'s row body (see `row_body_fn`): row by row, tile by tile, the tile's batches one after
/// another, each batch through every element-wise node of the stage in registers (values a
/// store or a reduction reads are written to their tile register or their tensor as they
/// come). The last partial batch of a row runs through the same code on zero-padded copies of
/// its operands, so an element's bits never depend on where it sits (as with the tile kernels).
/// A stage with row-wide nodes whose loads are broadcast along the rows computes those once
/// per row (`row_rows` with `Wide`).
template <class A, const auto& Active, const auto& Keep, int S, Element T>
void row_body(const row_args<T>& r, index_t n) {
  using B = stage_batches<A, Active, Keep, S, T>;
  if constexpr (!B::row_wide_list.empty())
    if (B::row_wide_loads_broadcast(r.lstep)) return row_rows<A, Active, Keep, S, T, true>(r, n);
  row_rows<A, Active, Keep, S, T, false>(r, n);
}

/// Per stage of a graph's loops, its row body.
template <class A, const auto& Active, const auto& Keep, Element T>
struct fused_bodies {
  static constexpr auto stages = static_cast<std::size_t>(fused_layout_v<A, Active, Keep>.stages);
  static constexpr std::array<row_body_fn<T>, stages> value = []<int... S>(std::integer_sequence<int, S...>) {
    return std::array<row_body_fn<T>, stages>{&row_body<A, Active, Keep, S, T>...};
  }
  (std::make_integer_sequence<int, static_cast<int>(stages)>{});
};

}  // namespace fusegrad::detail
