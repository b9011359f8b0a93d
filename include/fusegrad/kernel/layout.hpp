#pragma once
/// \file fusegrad/kernel/layout.hpp
/// The fused loops' plan for one pass of a graph, decided at compile time from its schedule:
/// per stage, its node lists, tile registers and slots (`fused_layout`), and the same tables
/// as pointers (`fused_view`), which the run-time runner reads.

#include <array>
#include <cstddef>

#include "fusegrad/kernel/schedule.hpp"

namespace fusegrad::detail {

// ---- the loops' plan: compile-time data ---------------------------------------------------
//
// Everything the loops need to know about a graph is decided at compile time and kept as
// plain arrays (`fused_layout`): the stages, each stage's node lists, the tile register and
// the slot of every element-wise node, which values are stored. The loops are ONE function
// per element type (`fused_runner`: rows, tiles, loads, stores, reductions, broadcasting)
// reading those arrays; per stage, only its batch loop is compiled (`row_body`: the loads and
// each node's value in registers, with constant slots, the part that must be fast). A
// graph thus costs the compiler its analysis, a few tables and one short function per stage.
// The runner is fusegrad/kernel/fused_runner.hpp, the row bodies fusegrad/kernel/row_body.hpp.

/// The plan of one pass: per stage, its node lists, each element-wise node's tile register
/// and slots, the slots its stores and reductions read.
template <std::size_t M>
struct fused_layout {
  int stages = 0;
  // Stage s owns entries [first_x[s], first_x[s + 1]) of each list x_nodes.
  std::array<int, M + 1> first_compute{}, first_reduce{}, first_store{}, first_load{}, first_matmul{};
  std::array<int, M> compute_nodes{};   ///< element-wise nodes, in the order the loop runs them
  std::array<int, M> reduce_nodes{};    ///< reductions the loop accumulates
  std::array<int, M> store_nodes{};     ///< element-wise values the loop stores
  std::array<int, M> matmul_nodes{};    ///< matrix products run before the loop
  std::array<int, 3 * M> load_nodes{};  ///< values the loop reads from memory
  std::array<int, M> tile_register{};   ///< per `compute_nodes` entry: its tile register (-1: a custom node)
  std::array<int, M> store_index{};     ///< per `compute_nodes` entry: its index among the stage's stores, or -1
  std::array<int, M> a_slot{}, b_slot{}, out_slot{};  ///< per `compute_nodes` entry (b: the null slot if unary)
  std::array<int, M> store_slot{};                    ///< per `store_nodes` entry: the slot holding the stored value
  std::array<int, M> reduce_slot{};                   ///< per `reduce_nodes` entry: the slot the reduction reads
  std::array<int, M + 1> register_count{};            ///< per stage: tile registers
  std::array<int, M> value_child{};                   ///< a custom node: the operand holding its value
  std::array<bool, M> kept_unreduce{};                ///< a broadcast-of-a-reduction the caller reads
  std::array<bool, M> kept{};                         ///< a value the caller reads after the pass
  // A node's own facts (kind, reduction kind and axis, operands) are its `node_desc`.
};

/// The same, as pointers: what `fused_runner` reads (one instantiation per element type).
struct fused_view {
  int stages;
  const int *first_compute, *first_reduce, *first_store, *first_load, *first_matmul;
  const int *compute_nodes, *reduce_nodes, *store_nodes, *matmul_nodes, *load_nodes;
  const int *tile_register, *store_index, *a_slot, *b_slot, *out_slot, *store_slot, *reduce_slot, *register_count,
      *value_child;
  const bool* kept;
};

/// How many entries each of a layout's node lists holds so far: the stages listed.
struct layout_ends {
  int nc = 0, nr = 0, nw = 0, nl = 0, nm = 0;  ///< compute, reduce, store, load, matmul
};

/// Stage `s`'s entries of each node list start at the ends so far.
template <std::size_t M>
constexpr void mark_list_starts(fused_layout<M>& L, std::size_t s, const layout_ends& n) {
  L.first_compute[s] = n.nc, L.first_reduce[s] = n.nr, L.first_store[s] = n.nw, L.first_load[s] = n.nl;
  L.first_matmul[s] = n.nm;
}

/// Appends stage `S`'s nodes to the node lists.
template <class A, const auto& Active, const auto& Keep>
constexpr void list_stage_nodes(fused_layout<A::M>& L, int S, layout_ends& n) {
  constexpr std::size_t M = A::M;
  constexpr auto& sch = schedule_v<A, Active, Keep>;
  constexpr auto& loads = stage_loads<A, Active, Keep>::value;
  const auto& g = A::cg;
  auto& [nc, nr, nw, nl, nm] = n;
  auto at = [](int v) { return static_cast<std::size_t>(v); };
  const auto s = at(S);
  mark_list_starts(L, s, n);
  // An element-wise node's sibling (sin and cos of one operand) runs right after it, so that
  // the loop computes the two together (`stage_batches::sibling_next`).
  std::array<bool, M> placed{};
  for (std::size_t c = 0; c < M; ++c) {
    const role r = sch.roles[c];
    const bool here = sch.stage[c] == S;
    if (r == role::compute && here && !placed[c]) {
      L.compute_nodes[at(nc++)] = static_cast<int>(c);
      const int d = g.sibling[c];
      if (d > static_cast<int>(c) && sch.roles[at(d)] == role::compute && sch.stage[at(d)] == S) {
        L.compute_nodes[at(nc++)] = d;
        placed[at(d)] = true;
      }
    }
    if (r == role::compute && here && sch.store[c]) L.store_nodes[at(nw++)] = static_cast<int>(c);
    if (r == role::reduce && here) L.reduce_nodes[at(nr++)] = static_cast<int>(c);
    if (r == role::matmul && here) L.matmul_nodes[at(nm++)] = static_cast<int>(c);
    if (loads[s][c]) L.load_nodes[at(nl++)] = static_cast<int>(c);
  }
}

/// Per node of a stage: the node whose tile register holds its value (`alias`: itself, or
/// for a custom node its operand's), and its entry in the compute list (`pos`; -1: none).
template <std::size_t M>
struct stage_positions {
  std::array<int, M> alias{}, pos{};
};

/// Stage `s`'s slots: the stage's loads first (load j is slot j), then its element-wise nodes
/// in order; a custom node shares its operand's slot; the slot after them all stays null (the
/// second operand of a unary node). Sets each element-wise node's slots and the slots the
/// stores and reductions read.
template <class A>
constexpr stage_positions<A::M> place_stage_slots(fused_layout<A::M>& L, std::size_t s, const layout_ends& n) {
  constexpr std::size_t M = A::M;
  const auto& g = A::cg;
  const auto& [nc, nr, nw, nl, nm] = n;
  auto at = [](int v) { return static_cast<std::size_t>(v); };
  const int c0 = L.first_compute[s], w0 = L.first_store[s], r0 = L.first_reduce[s], l0 = L.first_load[s];
  std::array<int, M> slot{};
  slot.fill(-1);
  for (int j = l0; j < nl; ++j) slot[at(L.load_nodes[at(j)])] = j - l0;
  const int null_slot = (nl - l0) + (nc - c0);
  stage_positions<M> p;
  auto& [alias, pos] = p;
  for (std::size_t c = 0; c < M; ++c) alias[c] = static_cast<int>(c);
  pos.fill(-1);
  for (int q = c0; q < nc; ++q) {
    const auto c = at(L.compute_nodes[at(q)]);
    pos[c] = q;
    if (g.kind[c] == gkind::custom) {
      int k = 2;
      while (k > 0 && g.children[c][at(k)] < 0) --k;
      L.value_child[c] = g.children[c][at(k)];
      alias[c] = alias[at(L.value_child[c])];
      slot[c] = slot[at(L.value_child[c])];
    } else {
      slot[c] = (nl - l0) + (q - c0);
    }
    L.a_slot[at(q)] = g.children[c][0] >= 0 ? slot[at(g.children[c][0])] : null_slot;
    L.b_slot[at(q)] = g.kind[c] != gkind::custom && g.children[c][1] >= 0 ? slot[at(g.children[c][1])] : null_slot;
    L.out_slot[at(q)] = slot[c];
  }
  for (int j = w0; j < nw; ++j) L.store_slot[at(j)] = slot[at(L.store_nodes[at(j)])];
  for (int j = r0; j < nr; ++j) L.reduce_slot[at(j)] = slot[at(g.children[at(L.reduce_nodes[at(j)])][0])];
  return p;
}

/// Per tile register holder (an `alias`): the last compute entry of stage `s` that reads it;
/// values the loop's stores and reductions read live to the end of a tile.
template <class A>
constexpr std::array<int, A::M> last_readers(const fused_layout<A::M>& L, std::size_t s, const layout_ends& n,
                                             const std::array<int, A::M>& alias) {
  const auto& g = A::cg;
  const auto& [nc, nr, nw, nl, nm] = n;
  auto at = [](int v) { return static_cast<std::size_t>(v); };
  const int c0 = L.first_compute[s], w0 = L.first_store[s], r0 = L.first_reduce[s];
  constexpr int end = 1 << 30;
  std::array<int, A::M> last{};
  last.fill(-1);
  for (int q = c0; q < nc; ++q)
    for (int ch : g.children[at(L.compute_nodes[at(q)])])
      if (ch >= 0) last[at(alias[at(ch)])] = q;
  for (int j = w0; j < nw; ++j) last[at(alias[at(L.store_nodes[at(j)])])] = end;
  for (int j = r0; j < nr; ++j) last[at(alias[at(g.children[at(L.reduce_nodes[at(j)])][0])])] = end;
  return last;
}

/// Stage `s`'s tile registers: one per element-wise node, reused after its last reader in
/// the loop (`last_readers`); sets each one's register and store index, and returns how many
/// registers the stage uses.
template <class A>
constexpr int assign_tile_registers(fused_layout<A::M>& L, std::size_t s, const layout_ends& n,
                                    const stage_positions<A::M>& p) {
  const auto& g = A::cg;
  const auto& [nc, nr, nw, nl, nm] = n;
  const auto& [alias, pos] = p;
  auto at = [](int v) { return static_cast<std::size_t>(v); };
  const int c0 = L.first_compute[s], w0 = L.first_store[s];
  const std::array<int, A::M> last = last_readers<A>(L, s, n, alias);
  std::array<int, A::M + 1> free_regs{};
  int nfree = 0, count = 0;
  for (int q = c0; q < nc; ++q) {
    const auto qq = at(q);
    const auto c = at(L.compute_nodes[qq]);
    L.tile_register[qq] = -1;
    if (g.kind[c] != gkind::custom) L.tile_register[qq] = nfree > 0 ? free_regs[at(--nfree)] : count++;
    L.store_index[qq] = -1;
    for (int j = w0; j < nw; ++j)
      if (L.store_nodes[at(j)] == static_cast<int>(c)) L.store_index[qq] = j - w0;
    std::array<int, 3> seen{-1, -1, -1};
    for (std::size_t k = 0; k < 3; ++k) {
      const int ch = g.children[c][k];
      if (ch < 0) continue;
      const int hold = alias[at(ch)];
      if (hold == seen[0] || hold == seen[1]) continue;
      seen[k] = hold;
      const int pq = pos[at(hold)];
      if (pq >= 0 && last[at(hold)] == q && L.tile_register[at(pq)] >= 0)
        free_regs[at(nfree++)] = L.tile_register[at(pq)];
    }
  }
  return count;
}

/// The plan of one pass, stage by stage: its node lists, its slots, its tile registers.
template <class A, const auto& Active, const auto& Keep>
constexpr fused_layout<A::M> make_fused_layout() {
  constexpr auto& sch = schedule_v<A, Active, Keep>;
  fused_layout<A::M> L{};
  L.stages = sch.stages;
  layout_ends n;
  for (int S = 0; S < sch.stages; ++S) {
    const auto s = static_cast<std::size_t>(S);
    list_stage_nodes<A, Active, Keep>(L, S, n);
    const stage_positions<A::M> p = place_stage_slots<A>(L, s, n);
    L.register_count[s] = assign_tile_registers<A>(L, s, n, p);
  }
  mark_list_starts(L, static_cast<std::size_t>(sch.stages), n);
  for (std::size_t c = 0; c < A::M; ++c) {
    L.kept_unreduce[c] = Keep[c] && sch.roles[c] == role::unreduce;
    L.kept[c] = Keep[c];
  }
  return L;
}

template <class A, const auto& Active, const auto& Keep>
inline constexpr fused_layout<A::M> fused_layout_v = make_fused_layout<A, Active, Keep>();

template <std::size_t M>
constexpr fused_view view_of(const fused_layout<M>& L) {
  return {.stages = L.stages,
          .first_compute = L.first_compute.data(),
          .first_reduce = L.first_reduce.data(),
          .first_store = L.first_store.data(),
          .first_load = L.first_load.data(),
          .first_matmul = L.first_matmul.data(),
          .compute_nodes = L.compute_nodes.data(),
          .reduce_nodes = L.reduce_nodes.data(),
          .store_nodes = L.store_nodes.data(),
          .matmul_nodes = L.matmul_nodes.data(),
          .load_nodes = L.load_nodes.data(),
          .tile_register = L.tile_register.data(),
          .store_index = L.store_index.data(),
          .a_slot = L.a_slot.data(),
          .b_slot = L.b_slot.data(),
          .out_slot = L.out_slot.data(),
          .store_slot = L.store_slot.data(),
          .reduce_slot = L.reduce_slot.data(),
          .register_count = L.register_count.data(),
          .value_child = L.value_child.data(),
          .kept = L.kept.data()};
}

template <class A, const auto& Active, const auto& Keep>
inline constexpr fused_view fused_view_v = view_of(fused_layout_v<A, Active, Keep>);

}  // namespace fusegrad::detail
