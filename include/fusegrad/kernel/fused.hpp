#pragma once
/// \file fusegrad/kernel/fused.hpp
/// The `fused` backend (Inductor's counterpart): each stage of the schedule is ONE pass over
/// memory. The pass loads its operands as xsimd batches (a broadcast operand is splatted),
/// evaluates every element-wise node of the stage in registers with the very `value`
/// functions eager mode uses, stores what later stages read, and accumulates the stage's
/// reductions as the tiles pass (sums with the one definition of core/accumulate.hpp, so
/// they equal eager mode's bits). Every element goes through the op's own SIMD `value`.

#include <cmath>
#include <limits>

#include "fusegrad/compile/compile.hpp"
#include "fusegrad/kernel/schedule.hpp"
#include "fusegrad/kernel/tile.hpp"

namespace fusegrad::detail {

/// Whether shape `s` broadcasts to `to` (NumPy rules).
inline bool broadcasts_to(const shape& s, const shape& to) {
  if (s.size() > to.size()) return false;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const index_t a = s[s.size() - 1 - k], b = to[to.size() - 1 - k];
    if (a != b && a != 1) return false;
  }
  return true;
}

/// Whether a sum of a value of shape `space` to `out` (aligned on the right, 1 where reduced)
/// reaches each output's values one after another when `space` is walked in rows along its
/// innermost dim of size > 1: always when that dim is kept (the column form of a sum,
/// core/accumulate.hpp: outputs side by side), else when no kept dim lies inside a reduced one
/// (the row form: each output's rows in a run).
inline bool sum_rows_in_order(const shape& space, const shape& out) {
  bool reduced_seen = false, kept_inside = false, inner_kept = false;
  for (std::size_t d = 0; d < space.size(); ++d) {
    if (space[d] == 1) continue;
    const std::size_t back = space.size() - d;
    const bool kept = back <= out.size() && out[out.size() - back] != 1;
    kept_inside = kept_inside || (kept && reduced_seen);
    reduced_seen = reduced_seen || !kept;
    inner_kept = kept;
  }
  return inner_kept || !kept_inside;
}

// ---- the loops' plan: compile-time data ---------------------------------------------------
//
// Everything the loops need to know about a graph is decided at compile time and kept as
// plain arrays (`fused_layout`): the stages, each stage's node lists, the tile register and
// the slot of every element-wise node, which values are stored. The loops are ONE function
// per element type (`fused_runner`: rows, tiles, loads, stores, reductions, broadcasting)
// reading those arrays; per stage, only its tile loop is compiled (`row_body`: the loads and
// direct calls of the nodes' tile kernels with constant slots, the part that must be fast). A
// graph thus costs the compiler its analysis, a few tables and one short function per stage.

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

template <std::size_t M>
struct fused_layout {
  int stages = 0;
  // Stage s owns entries [x_at[s], x_at[s + 1]) of each list.
  std::array<int, M + 1> c_at{}, r_at{}, w_at{}, l_at{}, m_at{};
  std::array<int, M> cn{};         ///< element-wise nodes, in the order the loop runs them
  std::array<int, M> rn{};         ///< reductions the loop accumulates
  std::array<int, M> wn{};         ///< element-wise values the loop stores
  std::array<int, M> mn{};         ///< matrix products run before the loop
  std::array<int, 3 * M> ln{};     ///< values the loop reads from memory
  std::array<int, M> reg{};        ///< per `cn` entry: its tile register (-1: a custom node)
  std::array<int, M> store_of{};   ///< per `cn` entry: its index among the stage's stores, or -1
  std::array<int, M> a_slot{}, b_slot{}, out_slot{};  ///< per `cn` entry (b: the null slot if unary)
  std::array<int, M> w_slot{};     ///< per `wn` entry: the slot holding the stored value
  std::array<int, M> r_slot{};     ///< per `rn` entry: the slot the reduction reads
  std::array<int, M + 1> nregs{};  ///< per stage: tile registers
  std::array<int, M> value_child{};  ///< a custom node: the operand holding its value
  std::array<bool, M> kept_unreduce{};  ///< a broadcast-of-a-reduction the caller reads
  // A node's own facts (kind, reduction kind and axis, operands) are its `node_desc`.
};

/// The same, as pointers: what `fused_runner` reads (one instantiation per element type).
struct fused_view {
  int stages;
  const int *c_at, *r_at, *w_at, *l_at, *m_at, *cn, *rn, *wn, *mn, *ln, *reg, *store_of, *a_slot, *b_slot, *out_slot,
      *w_slot, *r_slot, *nregs, *value_child;
};

template <class A, const auto& Active, const auto& Keep>
constexpr fused_layout<A::M> make_fused_layout() {
  constexpr std::size_t M = A::M;
  constexpr auto& sch = schedule_v<A, Active, Keep>;
  constexpr auto& loads = stage_loads<A, Active, Keep>::value;
  const auto& g = A::cg;
  fused_layout<M> L{};
  L.stages = sch.stages;
  int nc = 0, nr = 0, nw = 0, nl = 0, nm = 0;
  auto at = [](int v) { return static_cast<std::size_t>(v); };
  for (int S = 0; S < sch.stages; ++S) {
    const auto s = at(S);
    L.c_at[s] = nc, L.r_at[s] = nr, L.w_at[s] = nw, L.l_at[s] = nl, L.m_at[s] = nm;
    for (std::size_t c = 0; c < M; ++c) {
      const role r = sch.roles[c];
      const bool here = sch.stage[c] == S;
      if (r == role::compute && here) L.cn[at(nc++)] = static_cast<int>(c);
      if (r == role::compute && here && sch.store[c]) L.wn[at(nw++)] = static_cast<int>(c);
      if (r == role::reduce && here) L.rn[at(nr++)] = static_cast<int>(c);
      if (r == role::matmul && here) L.mn[at(nm++)] = static_cast<int>(c);
      if (loads[s][c]) L.ln[at(nl++)] = static_cast<int>(c);
    }
    const int c0 = L.c_at[s], w0 = L.w_at[s], r0 = L.r_at[s], l0 = L.l_at[s];
    // Slots: load j is slot j, element-wise node q is slot NL + q; a custom node shares its
    // operand's slot; slot NL + NC stays null (the second operand of a unary node).
    std::array<int, M> slot{};
    slot.fill(-1);
    for (int j = l0; j < nl; ++j) slot[at(L.ln[at(j)])] = j - l0;
    const int null_slot = (nl - l0) + (nc - c0);
    // Tile registers: one per element-wise node, reused after its last reader in the loop;
    // values the loop's stores and reductions read live to the end of a tile.
    constexpr int end = 1 << 30;
    std::array<int, M> alias{};
    for (std::size_t c = 0; c < M; ++c) alias[c] = static_cast<int>(c);
    std::array<int, M> pos{};
    pos.fill(-1);
    for (int q = c0; q < nc; ++q) {
      const auto c = at(L.cn[at(q)]);
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
    for (int j = w0; j < nw; ++j) L.w_slot[at(j)] = slot[at(L.wn[at(j)])];
    for (int j = r0; j < nr; ++j) L.r_slot[at(j)] = slot[at(g.children[at(L.rn[at(j)])][0])];
    std::array<int, M> last{};
    last.fill(-1);
    for (int q = c0; q < nc; ++q)
      for (int ch : g.children[at(L.cn[at(q)])])
        if (ch >= 0) last[at(alias[at(ch)])] = q;
    for (int j = w0; j < nw; ++j) last[at(alias[at(L.wn[at(j)])])] = end;
    for (int j = r0; j < nr; ++j) last[at(alias[at(g.children[at(L.rn[at(j)])][0])])] = end;
    std::array<int, M + 1> free_regs{};
    int nfree = 0, count = 0;
    for (int q = c0; q < nc; ++q) {
      const auto qq = at(q);
      const auto c = at(L.cn[qq]);
      L.reg[qq] = -1;
      if (g.kind[c] != gkind::custom) L.reg[qq] = nfree > 0 ? free_regs[at(--nfree)] : count++;
      L.store_of[qq] = -1;
      for (int j = w0; j < nw; ++j)
        if (L.wn[at(j)] == static_cast<int>(c)) L.store_of[qq] = j - w0;
      std::array<int, 3> seen{-1, -1, -1};
      for (std::size_t k = 0; k < 3; ++k) {
        const int ch = g.children[c][k];
        if (ch < 0) continue;
        const int hold = alias[at(ch)];
        if (hold == seen[0] || hold == seen[1]) continue;
        seen[k] = hold;
        const int pq = pos[at(hold)];
        if (pq >= 0 && last[at(hold)] == q && L.reg[at(pq)] >= 0) free_regs[at(nfree++)] = L.reg[at(pq)];
      }
    }
    L.nregs[s] = count;
  }
  const auto s = at(sch.stages);
  L.c_at[s] = nc, L.r_at[s] = nr, L.w_at[s] = nw, L.l_at[s] = nl, L.m_at[s] = nm;
  for (std::size_t c = 0; c < M; ++c) L.kept_unreduce[c] = Keep[c] && sch.roles[c] == role::unreduce;
  return L;
}

template <class A, const auto& Active, const auto& Keep>
inline constexpr fused_layout<A::M> fused_layout_v = make_fused_layout<A, Active, Keep>();

template <std::size_t M>
constexpr fused_view view_of(const fused_layout<M>& L) {
  return {L.stages,        L.c_at.data(),     L.r_at.data(),      L.w_at.data(),     L.l_at.data(),
          L.m_at.data(),   L.cn.data(),       L.rn.data(),        L.wn.data(),       L.mn.data(),
          L.ln.data(),     L.reg.data(),      L.store_of.data(),  L.a_slot.data(),   L.b_slot.data(),
          L.out_slot.data(), L.w_slot.data(), L.r_slot.data(),    L.nregs.data(),    L.value_child.data()};
}

template <class A, const auto& Active, const auto& Keep>
inline constexpr fused_view fused_view_v = view_of(fused_layout_v<A, Active, Keep>);

/// Stage `S`'s row body (see `row_body_fn`).
template <class A, const auto& Active, const auto& Keep, int S, Element T>
void row_body(const row_args<T>& r, index_t n) {
  static constexpr auto& L = fused_layout_v<A, Active, Keep>;
  constexpr auto at = [](int v) { return static_cast<std::size_t>(v); };
  constexpr int c0 = L.c_at[at(S)];
  constexpr std::size_t NL = at(L.l_at[at(S) + 1] - L.l_at[at(S)]);
  constexpr std::size_t NC = at(L.c_at[at(S) + 1] - c0);
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
            constexpr auto c = at(L.cn[q]);
            T* const d = r.dst[Q] + i * r.step[Q];
            if constexpr (L.reg[q] < 0) {  // a custom node: its value is in another slot; copied if stored
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

// ---- the loops: run-time code, one per element type ----------------------------------------

/// Runs the stages of a `fused_view` over the values of one evaluation.
template <Element T>
class fused_runner {
 public:
  fused_runner(const fused_view& L, const row_body_fn<T>* bodies, node_eval<T>& g) : L_(L), bodies_(bodies), g_(g) {}

  // The entry points are defined out of the class (not inline), so that the precompiled
  // runtime's extern declaration (fusegrad/runtime.hpp) keeps the loops out of user TUs.
  /// Stage `S`: its matrix products, then its loop.
  void stage(int S);
  /// Evaluates node `c` on whole tensors.
  void eval(int c);

 private:
  const std::array<int, 3>& ch(int c) const { return g_.children[static_cast<std::size_t>(c)]; }
  const node_desc& d(int c) const { return g_.desc[c]; }
  tensor<T>& val(int c) { return g_.values[static_cast<std::size_t>(c)]; }
  const shape& shp(int c) const { return g_.shapes[static_cast<std::size_t>(c)]; }

  /// An element-wise node on whole tensors, its operands broadcast to its shape (the eager
  /// path's `map_strided` with the node's tile kernel).
  void eval_pointwise(int c) {
    tensor<T> r = empty<T>(shp(c));
    const int b = ch(c)[1];
    if (r.numel() > 0) map_strided<T>(g_.kernels[c], g_.state[c], val(ch(c)[0]), b >= 0 ? &val(b) : nullptr, r);
    val(c) = std::move(r);
  }

  void loop(int S) {
    const int w0 = L_.w_at[S], w1 = L_.w_at[S + 1], r0 = L_.r_at[S], r1 = L_.r_at[S + 1];
    if (w0 == w1 && r0 == r1) return;
    // The iteration space: what the reductions read, else the largest store (a reference
    // into the shapes, which a loop does not change: no copy per call).
    const shape& space = [&]() -> const shape& {
      if (r0 < r1) return shp(ch(L_.rn[r0])[0]);
      const shape* best = &shp(L_.wn[w0]);
      for (int j = w0; j < w1; ++j) {
        const shape& s = shp(L_.wn[j]);
        if (s.size() > best->size() || (s.size() == best->size() && numel(s) > numel(*best))) best = &s;
      }
      return *best;
    }();
    bool one_space = true;
    for (int j = r0; j < r1; ++j) one_space = one_space && shp(ch(L_.rn[j])[0]) == space;
    // A store is written by visiting the space's elements: a store with elements over an
    // empty space (its dims of size 1 broadcast to 0: x [0, 3] * y [3] makes y's gradient
    // a [3] sum over nothing) would be left unwritten, so such a stage runs node by node.
    const bool empty_space = numel(space) == 0;
    for (int j = w0; j < w1; ++j)
      one_space = one_space && broadcasts_to(shp(L_.wn[j]), space) && !(empty_space && numel(shp(L_.wn[j])) > 0);
    // A sum whose outputs would take their values in interleaved runs of rows (a [1, n, 1]
    // gradient of an [m, n, k] value) runs node by node too (see `sum_rows_in_order`).
    for (int j = r0; j < r1 && one_space; ++j)
      one_space = d(L_.rn[j]).rkind == reduce_kind_t::max || sum_rows_in_order(space, sum_view(L_.rn[j], space));
    if (!one_space) {  // node by node (rare: reductions over differently broadcast values)
      for (int j = L_.l_at[S]; j < L_.l_at[S + 1]; ++j)
        if (d(L_.ln[j]).kind == gkind::unreduce && !val(L_.ln[j]).defined()) eval(L_.ln[j]);
      for (int q = L_.c_at[S]; q < L_.c_at[S + 1]; ++q) {
        const int c = L_.cn[q];
        if (L_.reg[q] < 0) val(c) = val(L_.value_child[c]);
        else eval_pointwise(c);
      }
      for (int j = r0; j < r1; ++j) eval(L_.rn[j]);
      return;
    }
    scratch& sc = scratch_();
    for (int j = w0; j < w1; ++j) val(L_.wn[j]) = empty<T>(shp(L_.wn[j]));
    grow(static_cast<std::size_t>(r1 - r0), sc.direct);
    for (int j = r0; j < r1; ++j) {
      const int c = L_.rn[j];
      val(c) = empty<T>(shp(c));
      // A reduction to the shape of its own input (sumto of a gradient that was not
      // broadcast) sees each element once: it is written directly, without a fill.
      const bool direct = shp(c) == space && numel(space) > 1;
      sc.direct[static_cast<std::size_t>(j - r0)] = direct;
      if (!direct) fill(val(c), d(c).rkind == reduce_kind_t::max ? -std::numeric_limits<T>::infinity() : T(0));
    }
    if (!empty_space) pass(S, space);  // an empty space: its stores are empty, the fills are the sums
    for (int j = r0; j < r1; ++j) {
      const int c = L_.rn[j];
      if (d(c).rkind != reduce_kind_t::mean) continue;
      const index_t cnt = numel(space) / std::max<index_t>(val(c).numel(), 1);
      T* p = val(c).data_ptr();
      for (index_t e = 0; e < val(c).numel(); ++e) p[e] /= static_cast<T>(cnt);
    }
  }

  /// Reduction `c` of a value of shape `it`, seen with `it`'s rank (1 on the reduced dims).
  shape sum_view(int c, const shape& it) const {
    return d(c).kind == gkind::reduction ? keepdim_shape(it, d(c).raxis) : shp(c);
  }

  /// One pass of loop `S` over the space `it`: every sink of the stage, walked in rows, each
  /// row in tiles; the stage's tile body runs every node over the whole tile.
  void pass(int S, const shape& it) {
    const int c0 = L_.c_at[S], l0 = L_.l_at[S], w0 = L_.w_at[S], r0 = L_.r_at[S];
    const int* Rn = L_.rn + r0;
    const int* Ln = L_.ln + l0;
    const int* Wn = L_.wn + w0;
    const int* reg = L_.reg + c0;
    const int* store_of = L_.store_of + c0;
    const int* w_slot = L_.w_slot + w0;
    const int* r_slot = L_.r_slot + r0;
    const auto NC = static_cast<std::size_t>(L_.c_at[S + 1] - c0);
    const auto NR = static_cast<std::size_t>(L_.r_at[S + 1] - r0);
    const auto NL = static_cast<std::size_t>(L_.l_at[S + 1] - l0);
    const auto NW = static_cast<std::size_t>(L_.w_at[S + 1] - w0);
    const std::size_t N = NL + NW + NR;
    using V = simd<T>;
    constexpr index_t tile = tile_elems;
    scratch& sc = scratch_();
    const int nregs = L_.nregs[S];
    const auto need = static_cast<std::size_t>((nregs + static_cast<int>(NL)) * tile);
    if (sc.regs.size() < need) sc.regs.resize(need);
    T* const regs = sc.regs.data();
    T* const loadbuf = regs + static_cast<std::ptrdiff_t>(nregs) * tile;
    // Buffers only grow; every entry a pass reads is written first.
    grow(NL + NC + 1, sc.slot);
    sc.slot[NL + NC] = nullptr;  // the second operand of a unary node
    grow(NC, sc.dst, sc.step);
    grow(NL, sc.lrow, sc.lstep, sc.lp, sc.divisor);
    std::fill_n(sc.divisor.begin(), NL, T(1));
    grow(NW + NR, sc.wp);
    grow(NR, sc.acc, sc.tail, sc.rmax, sc.rsum, sc.cols, sc.cur, sc.colf);
    grow(N, sc.st, sc.is, sc.base);
    for (std::size_t j = 0; j < NR; ++j) {
      sc.rmax[j] = d(Rn[j]).rkind == reduce_kind_t::max;
      sc.cur[j] = nullptr;  // a row-form sum's current output
      sc.colf[j] = 0;       // a column-form sum (set up below)
    }
    const row_body_fn<T> body = bodies_[S];
    const T** const slot = sc.slot.data();
    T** const dst = sc.dst.data();
    index_t* const step = sc.step.data();
    const T** const lrow = sc.lrow.data();
    index_t* const lstep = sc.lstep.data();
    const T* const* const lp = sc.lp.data();
    const T* const divisor = sc.divisor.data();
    T* const* const wp = sc.wp.data();
    const char* const direct = sc.direct.data();

    // The per-tile work the row body hands back: loads to divide (a mean's gradient broadcast
    // back), stores of one element, reductions.
    struct hooks {
      const T** slot;
      const T* const* lrow;
      const index_t* lstep;
      const T* divisor;
      T* loadbuf;
      std::size_t NL, NW, NR;
      const index_t* base;
      const index_t* is;
      T* const* wp;
      const int* w_slot;
      const int* r_slot;
      const char* direct;
      scratch* sc;
      static void before(void* p, index_t, index_t m) {
        auto& h = *static_cast<hooks*>(p);
        for (std::size_t j = 0; j < h.NL; ++j)
          if (h.lstep[j] != 0 && h.divisor[j] != T(1)) {
            T* const buf = h.loadbuf + j * tile_elems;
            tile_div(h.slot[j], h.divisor[j], buf, m);
            h.slot[j] = buf;
          }
      }
      static void after(void* p, index_t i, index_t m) {
        auto& h = *static_cast<hooks*>(p);
        const std::size_t NL = h.NL, NW = h.NW;
        for (std::size_t j = 0; j < NW; ++j)
          if (h.is[NL + j] == 0) h.wp[j][h.base[NL + j]] = h.slot[h.w_slot[j]][0];
        for (std::size_t j = 0; j < h.NR; ++j) {
          const std::size_t q = NL + NW + j;
          const T* src = h.slot[h.r_slot[j]];
          T* out = h.wp[NW + j] + h.base[q];
          const bool mx = h.sc->rmax[j];
          if (h.is[q] == 0) {
            if (mx) tile_max(src, m, h.sc->acc[j], h.sc->tail[j]);
            else h.sc->rsum[j].add(src, m);
          } else if (h.direct[j]) {
            std::copy(src, src + m, out + i);
          } else if (mx) {
            tile_reduce_into<true>(src, out + i, m);
          } else {
            tile_reduce_into<false>(src, out + i, m);
          }
        }
      }
    };

    // One row: `base` offsets, `n` elements, `is` each operand's step along the row (0:
    // broadcast, 1: contiguous). What is fixed along the row is resolved here; the stage's
    // row body walks the tiles.
    auto row_fn = [&](const index_t* base, index_t n, const index_t* is) {
      bool scaled = false;
      for (std::size_t j = 0; j < NL; ++j) {
        T* const buf = loadbuf + j * tile;
        if (is[j] == 0) {
          std::fill(buf, buf + tile, lp[j][base[j]] / divisor[j]);
          lrow[j] = buf;
          lstep[j] = 0;
        } else {
          lrow[j] = lp[j] + base[j];
          lstep[j] = 1;
          scaled = scaled || divisor[j] != T(1);
        }
      }
      bool one_element_store = false;
      for (std::size_t q = 0; q < NC; ++q) {
        const int w = store_of[q];
        const bool to_store = w >= 0 && is[NL + static_cast<std::size_t>(w)] != 0;
        one_element_store = one_element_store || (w >= 0 && !to_store);
        dst[q] = to_store ? wp[w] + base[NL + static_cast<std::size_t>(w)]
                          : (reg[q] >= 0 ? regs + static_cast<std::ptrdiff_t>(reg[q]) * tile : nullptr);
        step[q] = to_store ? 1 : 0;
      }
      for (std::size_t j = 0; j < NR; ++j) {
        const std::size_t q = NL + NW + j;
        if (sc.rmax[j]) {
          sc.acc[j] = V(-std::numeric_limits<T>::infinity());
          sc.tail[j] = -std::numeric_limits<T>::infinity();
        } else if (is[q] == 0 && wp[NW + j] + base[q] != sc.cur[j]) {  // a row-form sum's next output
          if (sc.cur[j]) *sc.cur[j] = sc.rsum[j].total();
          sc.rsum[j].reset();
          sc.cur[j] = wp[NW + j] + base[q];
        }
      }
      hooks h{slot, lrow, lstep, divisor, loadbuf, NL, NW, NR, base, is, wp, w_slot, r_slot, direct, &sc};
      const row_args<T> args{g_.state, slot, lrow, lstep, dst, step, scaled ? &hooks::before : nullptr,
                             NR > 0 || one_element_store ? &hooks::after : nullptr, &h};
      body(args, n);
      for (std::size_t j = 0; j < NR; ++j) {
        const std::size_t q = NL + NW + j;
        if (is[q] != 0) {
          if (sc.colf[j]) sc.cols[j].row_done(base[q] / n);
        } else if (sc.rmax[j]) {
          T* p = wp[NW + j] + base[q];
          *p = lanes::max(*p, lanes::max(lanes_max(sc.acc[j]), sc.tail[j]));
        }
      }
    };
    // The sums' totals, once every row has passed.
    auto finish_sums = [&] {
      for (std::size_t j = 0; j < NR; ++j) {
        if (sc.cur[j]) *sc.cur[j] = sc.rsum[j].total();
        if (sc.colf[j]) sc.cols[j].finish();
      }
    };

    // Fast path: every operand has the iteration shape (or is a full reduction): one flat row,
    // no strides to compute.
    {
      bool fast = true;
      for (std::size_t j = 0; j < NL && fast; ++j) fast = d(Ln[j]).kind != gkind::unreduce && shp(Ln[j]) == it;
      for (std::size_t j = 0; j < NW && fast; ++j) fast = shp(Wn[j]) == it;
      for (std::size_t j = 0; j < NR && fast; ++j) fast = val(Rn[j]).numel() == 1 || shp(Rn[j]) == it;
      if (fast) {
        const index_t total = numel(it);
        std::fill_n(sc.is.begin(), N, total == 1 ? 0 : 1);
        std::fill_n(sc.base.begin(), N, 0);
        for (std::size_t j = 0; j < NL; ++j) sc.lp[j] = val(Ln[j]).data_ptr();
        for (std::size_t j = 0; j < NW; ++j) sc.wp[j] = val(Wn[j]).data_ptr();
        for (std::size_t j = 0; j < NR; ++j) {
          sc.wp[NW + j] = val(Rn[j]).data_ptr();
          if (val(Rn[j]).numel() == 1) sc.is[NL + NW + j] = 0;
        }
        if (total > 0) row_fn(sc.base.data(), total, sc.is.data());
        finish_sums();
        return;
      }
    }
    auto& st = sc.st;
    for (std::size_t j = 0; j < NL; ++j) {
      const int c = Ln[j];
      if (d(c).kind == gkind::unreduce) {
        const tensor<T>& src = val(ch(c)[0]);
        const shape& to = shp(c);
        const shape ks = keepdim_shape(to, d(c).raxis);
        st[j] = broadcast_strides(alias(src, ks, contiguous_strides(ks), src.offset()), it);
        sc.lp[j] = src.data_ptr();
        if (d(c).rkind == reduce_kind_t::mean)
          sc.divisor[j] = static_cast<T>(numel(to) / std::max<index_t>(numel(ks), 1));  // eager: g / n
      } else {
        st[j] = broadcast_strides(val(c), it);
        sc.lp[j] = val(c).data_ptr();
      }
    }
    for (std::size_t j = 0; j < NW; ++j) {
      st[NL + j] = broadcast_strides(val(Wn[j]), it);  // a smaller store rides along (same value rewritten)
      sc.wp[j] = val(Wn[j]).data_ptr();
    }
    for (std::size_t j = 0; j < NR; ++j) {
      const int c = Rn[j];
      sc.wp[NW + j] = val(c).data_ptr();
      const shape view_shape = sum_view(c, it);
      st[NL + NW + j] = broadcast_strides(alias(val(c), view_shape, contiguous_strides(view_shape), 0), it);
    }
    // One 1-D pass when every operand covers the whole space (or a reduction covers none of it).
    const strides full = contiguous_strides(it);
    auto is_zero = [](const strides& x) { return std::all_of(x.begin(), x.end(), [](index_t v) { return v == 0; }); };
    bool flat = true;
    for (std::size_t q = 0; q < N && flat; ++q) flat = st[q] == full || (q >= NL + NW && is_zero(st[q]));
    shape space = it;
    if (flat) {
      space = shape{numel(it)};
      for (std::size_t q = 0; q < N; ++q) st[q] = strides{is_zero(st[q]) && numel(it) != 1 ? 0 : (numel(it) == 1 ? 0 : 1)};
    } else if (std::find(it.begin(), it.end(), index_t{1}) != it.end()) {
      // Dims of size 1 play no part: rows run along the innermost dim of size > 1, which
      // decides the form of a sum (core/accumulate.hpp) as it does in eager mode.
      space.clear();
      for (std::size_t k = 0; k < it.size(); ++k)
        if (it[k] != 1) space.push_back(it[k]);
      for (std::size_t q = 0; q < N; ++q) {
        strides t;
        for (std::size_t k = 0; k < it.size(); ++k)
          if (it[k] != 1) t.push_back(st[q][k]);
        st[q] = std::move(t);
      }
    }
    // A sum whose output runs along the rows (the innermost dim kept) is in the column form:
    // its partial sums are the output, the chunks and the tree are kept by `column_sums`.
    for (std::size_t j = 0; j < NR; ++j) {
      const std::size_t q = NL + NW + j;
      if (sc.rmax[j] || direct[j] || numel(space) == 0 || space.empty() || st[q].back() == 0) continue;
      tensor<T>& out = val(Rn[j]);
      const index_t m = space.back();
      sc.cols[j].start(out.data_ptr(), out.numel() / m, m, numel(it) / out.numel());
      sc.colf[j] = 1;
    }
    std::vector<const strides*> sp(N);
    for (std::size_t q = 0; q < N; ++q) sp[q] = &st[q];
    std::vector<index_t> off(N, 0), inner(N, 0);
    for_each_row_n(space, N, sp.data(), off.data(), inner.data(), row_fn);
    finish_sums();
  }

  /// Per-thread buffers of the loops, reused by the next pass (tile registers never shrink).
  struct scratch {
    std::vector<const T*> slot, lrow, lp;
    std::vector<T*> dst, wp;
    std::vector<index_t> step, lstep, is, base;
    std::vector<char> rmax, direct;
    std::vector<T> divisor, tail, regs;
    std::vector<strides> st;
    std::vector<simd<T>> acc;
    std::vector<running_sum<T>> rsum;   ///< per reduction: a row-form sum
    std::vector<column_sums<T>> cols;   ///< per reduction: a column-form sum
    std::vector<T*> cur;                ///< per reduction: the output `rsum` adds up
    std::vector<char> colf;             ///< per reduction: in the column form
  };
  /// Makes each of `vs` at least `n` long (buffers only grow).
  template <class... X>
  static void grow(std::size_t n, std::vector<X>&... vs) {
    ((vs.size() < n ? vs.resize(n) : void()), ...);
  }
  static scratch& scratch_() {
    thread_local scratch s;
    return s;
  }

  const fused_view& L_;
  const row_body_fn<T>* bodies_;
  node_eval<T>& g_;
};

template <Element T>
void fused_runner<T>::stage(int S) {
  for (int j = L_.m_at[S]; j < L_.m_at[S + 1]; ++j) eval(L_.mn[j]);
  loop(S);
}

template <Element T>
void fused_runner<T>::eval(int c) {
  g_.values[static_cast<std::size_t>(c)] = g_.eval(c);
}


/// The leaves' values and every other scheduled node's shape, in topological order.
template <Element T>
void fused_shapes(node_eval<T>& g, const role* roles, const bool* active, std::size_t m) {
  for (std::size_t c = 0; c < m; ++c) {
    if (roles[c] == role::none) continue;
    const bool input = g.desc[c].kind == gkind::input || g.desc[c].kind == gkind::grad_input;
    if (roles[c] == role::leaf && active[c] && input) g.values[c] = g.eval(static_cast<int>(c));
    if (roles[c] == role::leaf) g.shapes[c] = g.values[c].shape();
    else g.infer_shape(static_cast<int>(c));
  }
}

template <class A, const auto& Active, const auto& Keep, Element T>
void fused_evaluate(eval_context<A, T>& ctx) {
  static constexpr auto& sch = schedule_v<A, Active, Keep>;
  static constexpr auto& layout = fused_layout_v<A, Active, Keep>;
  node_eval<T> g = nodes_of<A>(ctx.instance, ctx.values, ctx.shapes, ctx.inputs, ctx.grads);
  fused_shapes(g, sch.roles.data(), Active.data(), A::M);
  fused_runner<T> run(fused_view_v<A, Active, Keep>, fused_bodies<A, Active, Keep, T>::value.data(), g);
  for (int s = 0; s < layout.stages; ++s) run.stage(s);
  // A kept broadcast-of-a-reduction is materialised directly.
  for (std::size_t c = 0; c < A::M; ++c)
    if (layout.kept_unreduce[c]) run.eval(static_cast<int>(c));
}

}  // namespace fusegrad::detail

namespace fusegrad::backend {
/// One vectorised pass over memory per fusion group, forward and backward (the default).
struct fused {
  static constexpr std::string_view name = "fused";
  bool fullgraph = false;  ///< as a compiled-autograd backend: a graph break throws
  static constexpr bool runs_graph = true;
  template <class A, const auto& Active, const auto& Keep, Element T>
  static void evaluate(eval_context<A, T>& ctx) {
    detail::fused_evaluate<A, Active, Keep, T>(ctx);
  }
};
}  // namespace fusegrad::backend
