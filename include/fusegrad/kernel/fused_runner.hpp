#pragma once
/// \file fusegrad/kernel/fused_runner.hpp
/// The fused loops' run-time code, one per element type (`fused_runner`): it runs the stages
/// of a `fused_view` (rows, tiles, loads, stores, reductions, broadcasting), calling each
/// stage's row body (fusegrad/kernel/row_body.hpp) per row.

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <vector>

#include "fusegrad/compile/node_eval.hpp"
#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/parallel.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/kernel/layout.hpp"
#include "fusegrad/kernel/row_body.hpp"
#include "fusegrad/loops/rows.hpp"
#include "fusegrad/loops/tile.hpp"

namespace fusegrad::detail {

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
/// The elements of a row group's block of rows (at least one row): 32 KiB of floats per value
/// the block reads or writes, so that the few values of a softmax's stages stay in L2 from one
/// stage to the next (and a row's in L1) while the per-block set-up is spread over many rows.
inline constexpr index_t row_block_elems = 8192;

// ---- the loops: run-time code, one per element type ----------------------------------------

/// Runs the stages of a `fused_view` over the values of one evaluation.
template <Element T>
class fused_runner {
 public:
  fused_runner(const fused_view& L, const row_body_fn<T>* bodies, node_eval<T>& g) : L_(L), bodies_(bodies), g_(g) {}

  // The entry points are defined out of the class (not inline), so that the precompiled
  // runtime's extern declaration (fusegrad/runtime.hpp) keeps the loops out of user TUs.
  /// Stages [0, n) in order; consecutive stages whose values line up row by row (see
  /// `row_group_end`) run as one row group.
  void run(int n);
  /// Stage `S`: its matrix products, then its loop.
  void stage(int S);
  /// Evaluates node `c` on whole tensors.
  void eval(int c);

 private:
  /// What a thread running rows changes: its tile registers and load buffers, the pointers the
  /// row body reads, the reductions' running state. `blocks`: a block of a parallel pass,
  /// whose full maxes stay in `acc`/`tail` (combined once every block is done).
  struct work {
    T* regs;
    T* loadbuf;
    const T** slot;
    T** dst;
    index_t* step;
    const T** lrow;
    index_t* lstep;
    simd<T>* acc;
    T* tail;
    running_sum<T>* rsum;
    T** cur;
    bool blocks;
  };
  /// A thread's own buffers for blocks of a parallel pass.
  struct block_scratch {
    std::vector<T> regs;
    std::vector<const T*> slot, lrow;
    std::vector<T*> dst;
    std::vector<index_t> step, lstep, base;
  };

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
    std::vector<int> redir;             ///< per element-wise node: the reduction it writes (-1: none)
    std::size_t nl = 0, nc = 0, nw = 0, nr = 0;  ///< the counts the buffers fit

    /// Makes the buffers fit `NL` loads, `NC` element-wise nodes, `NW` stores, `NR` reductions
    /// (a few comparisons when they do already).
    void fit(std::size_t NL, std::size_t NC, std::size_t NW, std::size_t NR) {
      if (NL <= nl && NC <= nc && NW <= nw && NR <= nr) return;
      nl = std::max(nl, NL), nc = std::max(nc, NC), nw = std::max(nw, NW), nr = std::max(nr, NR);
      grow(nl + nc + 1, slot);
      grow(nc, dst, step, redir);
      grow(nl, lrow, lstep, lp, divisor);
      grow(nw + nr, wp);
      grow(nr, acc, tail, rmax, rsum, cols, cur, colf);
      grow(nl + nw + nr, st, is, base);
    }
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
  /// The thread's scratch per stage of a row group (a block's state kept until the next).
  static std::vector<scratch>& group_scratch(std::size_t stages) {
    thread_local std::vector<scratch> g;
    if (g.size() < stages) g.resize(stages);
    return g;
  }

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

  /// Whether stage `S` has a loop: something to store or to reduce.
  bool has_loop(int S) const {
    return L_.first_store[S] != L_.first_store[S + 1] || L_.first_reduce[S] != L_.first_reduce[S + 1];
  }
  /// Whether reduction `c` of stage `S` reduces one element that the stage loads (its value is
  /// that element, whatever it sums or takes the max of, known before the loop): the gradient
  /// of a one-element output summed to its shape.
  bool of_one_element(int S, int c) const {
    const int in = ch(c)[0];
    if (numel(shp(in)) != 1) return false;
    for (int j = L_.first_load[S]; j < L_.first_load[S + 1]; ++j)
      if (L_.load_nodes[j] == in) return d(in).kind != gkind::unreduce;
    return false;
  }
  /// Stage `S`'s iteration space (it has a loop): what the reductions of more than one element
  /// read, else the largest store, else what the reductions read (a reference into the shapes,
  /// which a loop does not change: no copy per call).
  const shape& space_of(int S) const {
    const int w0 = L_.first_store[S], w1 = L_.first_store[S + 1], r0 = L_.first_reduce[S], r1 = L_.first_reduce[S + 1];
    for (int j = r0; j < r1; ++j)
      if (!of_one_element(S, L_.reduce_nodes[j])) return shp(ch(L_.reduce_nodes[j])[0]);
    if (w0 == w1) return shp(ch(L_.reduce_nodes[r0])[0]);
    const shape* best = &shp(L_.store_nodes[w0]);
    for (int j = w0; j < w1; ++j) {
      const shape& s = shp(L_.store_nodes[j]);
      if (s.size() > best->size() || (s.size() == best->size() && numel(s) > numel(*best))) best = &s;
    }
    return *best;
  }
  /// `scratch::direct` of a reduction of one element over a larger space: its value is set
  /// before the loop, which leaves it alone.
  static constexpr char set_before = 3;
  /// Stage `S`'s outputs made over `space`: its stores, its reductions filled with their
  /// identity, except those to their own input's shape (`sc.direct`: each element written
  /// once) and those of one element (computed here).
  void make_outputs(int S, const shape& space, scratch& sc) {
    const int w0 = L_.first_store[S], w1 = L_.first_store[S + 1], r0 = L_.first_reduce[S], r1 = L_.first_reduce[S + 1];
    for (int j = w0; j < w1; ++j) val(L_.store_nodes[j]) = empty<T>(shp(L_.store_nodes[j]));
    set_direct(S, space, sc);
    for (int j = r0; j < r1; ++j) {
      const int c = L_.reduce_nodes[j];
      const char direct = sc.direct[static_cast<std::size_t>(j - r0)];
      if (direct == set_before) {
        eval(c);
        continue;
      }
      val(c) = empty<T>(shp(c));
      if (!direct) fill(val(c), d(c).rkind == detail::reduce_op::max ? -std::numeric_limits<T>::infinity() : T(0));
    }
  }
  /// `sc.direct` for stage `S`'s reductions over `space` (see `make_outputs`).
  void set_direct(int S, const shape& space, scratch& sc) const {
    const int r0 = L_.first_reduce[S], r1 = L_.first_reduce[S + 1];
    grow(static_cast<std::size_t>(r1 - r0), sc.direct);
    for (int j = r0; j < r1; ++j) {
      const int c = L_.reduce_nodes[j];
      sc.direct[static_cast<std::size_t>(j - r0)] =
          of_one_element(S, c) && numel(space) > 1 ? set_before : static_cast<char>(shp(c) == space && numel(space) > 1);
    }
  }
  /// A mean's sums divided by the count each holds: outputs [e0, e1) of reduction `c`.
  void divide_mean(int c, index_t e0, index_t e1) {
    const index_t cnt = numel(shp(ch(c)[0])) / std::max<index_t>(val(c).numel(), 1);
    T* p = val(c).data_ptr();
    for (index_t e = e0; e < e1; ++e) p[e] /= static_cast<T>(cnt);
  }

  void loop(int S) {
    const int w0 = L_.first_store[S], w1 = L_.first_store[S + 1], r0 = L_.first_reduce[S], r1 = L_.first_reduce[S + 1];
    if (w0 == w1 && r0 == r1) return;
    const shape& space = space_of(S);
    // The usual case: every load and store has the space's shape and every reduction
    // reads all of it, into the same shape or into one element: one row, no strides, and
    // nothing more to check.
    bool same_shapes = true;
    for (int j = L_.first_load[S]; j < L_.first_load[S + 1] && same_shapes; ++j)
      same_shapes = d(L_.load_nodes[j]).kind != gkind::unreduce && shp(L_.load_nodes[j]) == space;
    for (int j = w0; j < w1 && same_shapes; ++j) same_shapes = shp(L_.store_nodes[j]) == space;
    for (int j = r0; j < r1 && same_shapes; ++j) {
      const shape& out = shp(L_.reduce_nodes[j]);
      same_shapes = shp(ch(L_.reduce_nodes[j])[0]) == space && (out == space || numel(out) == 1);
    }
    scratch& sc = scratch_();
    if (same_shapes && plain_pass(S, space, sc)) return;
    const bool empty_space = numel(space) == 0;
    bool one_space = true;
    if (!same_shapes) {
      for (int j = r0; j < r1; ++j)
        one_space = one_space && (shp(ch(L_.reduce_nodes[j])[0]) == space || of_one_element(S, L_.reduce_nodes[j]));
      // A store is written by visiting the space's elements: a store with elements over an
      // empty space (its dims of size 1 broadcast to 0: x [0, 3] * y [3] makes y's gradient
      // a [3] sum over nothing) would be left unwritten, so such a stage runs node by node.
      for (int j = w0; j < w1; ++j)
        one_space = one_space && broadcasts_to(shp(L_.store_nodes[j]), space) &&
                    !(empty_space && numel(shp(L_.store_nodes[j])) > 0);
      // A sum whose outputs would take their values in interleaved runs of rows (a [1, n, 1]
      // gradient of an [m, n, k] value) runs node by node too (see `sum_rows_in_order`).
      for (int j = r0; j < r1 && one_space; ++j)
        one_space = d(L_.reduce_nodes[j]).rkind == detail::reduce_op::max ||
                    sum_rows_in_order(space, sum_view(L_.reduce_nodes[j], space));
    }
    if (!one_space) {  // node by node (rare: reductions over differently broadcast values)
      for (int j = L_.first_load[S]; j < L_.first_load[S + 1]; ++j)
        if (d(L_.load_nodes[j]).kind == gkind::unreduce && !val(L_.load_nodes[j]).defined()) eval(L_.load_nodes[j]);
      for (int q = L_.first_compute[S]; q < L_.first_compute[S + 1]; ++q) {
        const int c = L_.compute_nodes[q];
        if (L_.tile_register[q] < 0) val(c) = val(L_.value_child[c]);
        else eval_pointwise(c);
      }
      for (int j = r0; j < r1; ++j) eval(L_.reduce_nodes[j]);
      return;
    }
    make_outputs(S, space, sc);
    if (!empty_space) pass(S, space, same_shapes, sc);  // an empty space: its stores are empty, the fills are the sums
    for (int j = r0; j < r1; ++j)
      if (d(L_.reduce_nodes[j]).rkind == detail::reduce_op::mean) divide_mean(L_.reduce_nodes[j], 0, val(L_.reduce_nodes[j]).numel());
  }

  /// Rows [r0, r1) of a pass's space, a row group's block (`first`: the space's first).
  struct row_block {
    index_t r0, r1;
    bool first;
  };
  /// Whether stage `S` can join a row group begun at stage `S0` over `space` (the space's rows
  /// walked block by block, each block through every stage of the group before the next): a
  /// block of rows of each value the stage reads from the group is complete once the block
  /// has passed the stages before. So the stage has the same space, no matrix product (but
  /// the group's first), and every reduction either sums or takes the max along the rows (to
  /// one value per row), or is a sum to its own input's shape, or reduces everything to one
  /// value that no stage of the group reads (it is complete only after the last block).
  bool joins_rows(int S, int S0, const shape& space) const {
    if (!has_loop(S) || !(space_of(S) == space)) return false;
    if (S > S0 && L_.first_matmul[S] != L_.first_matmul[S + 1]) return false;
    const shape row = keepdim_shape(space, reduce_axis::last);
    for (int j = L_.first_reduce[S]; j < L_.first_reduce[S + 1]; ++j) {
      const int c = L_.reduce_nodes[j];
      if (of_one_element(S, c)) continue;  // set before the loop
      if (!(shp(ch(c)[0]) == space)) return false;
      const shape v = sum_view(c, space);
      if (!(v == space || v == row || numel(v) == 1)) return false;
    }
    for (int j = L_.first_store[S]; j < L_.first_store[S + 1]; ++j)
      if (!broadcasts_to(shp(L_.store_nodes[j]), space)) return false;
    for (int j = L_.first_load[S]; j < L_.first_load[S + 1]; ++j) {
      const int l = L_.load_nodes[j];
      const bool unreduce = d(l).kind == gkind::unreduce;
      const int source = unreduce ? ch(l)[0] : l;
      for (int P = S0; P < S; ++P) {
        for (int k = L_.first_reduce[P]; k < L_.first_reduce[P + 1]; ++k) {
          if (L_.reduce_nodes[k] != source || of_one_element(P, source)) continue;
          if (numel(shp(source)) == 1) return false;  // complete only after the last block
          // Read as it is, a value of one per row must be laid out as the rows: [m, n] * sum(x,
          // -1) broadcasts an [n] sum along the columns, and a row reads every row's sum.
          if (!unreduce && !(shp(source) == row)) return false;
        }
        for (int k = L_.first_store[P]; k < L_.first_store[P + 1]; ++k)
          if (L_.store_nodes[k] == source && !(shp(source) == space || shp(source) == row)) return false;
      }
    }
    return true;
  }
  /// The end of the row group that begins at stage `S0` (`S0 + 1`: no group): the stages
  /// after it that join its rows, where the space has rows worth blocking.
  int row_group_end(int S0, int n) const {
    if (!has_loop(S0)) return S0 + 1;
    const shape& space = space_of(S0);
    if (space.empty() || space.back() <= 1 || row_count(space) < 2) return S0 + 1;
    int E = S0;
    while (E < n && joins_rows(E, S0, space)) ++E;
    return std::max(E, S0 + 1);
  }
  /// Stages [S0, E) as a row group: blocks of rows, each taken through every stage while it
  /// is in cache (the hand loop's schedule of a softmax: a row's max, then its exps and their
  /// sum, then the division, before the next row), instead of each stage over the whole
  /// space. Each row meets the same nodes in the same order as stage by stage, and the sums
  /// over everything are fed the rows in order: the bits of the stage-by-stage loops.
  /// Rows that are independent (no reduction of the group over everything) run on all
  /// threads, in ranges of whole blocks: a row's values are the same whichever thread runs it.
  void row_group(int S0, int E) {
    for (int j = L_.first_matmul[S0]; j < L_.first_matmul[S0 + 1]; ++j) eval(L_.matmul_nodes[j]);
    const shape& space = space_of(S0);
    const auto stages = static_cast<std::size_t>(E - S0);
    const index_t rows = row_count(space), per = std::max<index_t>(1, row_block_elems / space.back());
    bool apart = true;  // no sum or max over everything: blocks of rows in any order
    {
      auto& group = group_scratch(stages);
      for (int S = S0; S < E; ++S) {
        make_outputs(S, space, group[static_cast<std::size_t>(S - S0)]);
        for (int j = L_.first_reduce[S]; j < L_.first_reduce[S + 1]; ++j)
          apart = apart && (numel(shp(L_.reduce_nodes[j])) != 1 || of_one_element(S, L_.reduce_nodes[j]));
      }
    }
    // Rows [r0, r1) block by block on this thread (`first`: the thread's first rows of the call).
    auto run_rows = [&](index_t r0, index_t r1, bool first) {
      auto& group = group_scratch(stages);
      for (index_t b = r0; b < r1; b += per) {
        const row_block block{b, std::min(r1, b + per), first && b == r0};
        for (int S = S0; S < E; ++S) {
          scratch& sc = group[static_cast<std::size_t>(S - S0)];
          if (block.first) set_direct(S, space, sc);
          pass(S, space, false, sc, &block);
          for (int j = L_.first_reduce[S]; j < L_.first_reduce[S + 1]; ++j) {
            const int c = L_.reduce_nodes[j];
            if (d(c).rkind == detail::reduce_op::mean && val(c).numel() == rows) divide_mean(c, block.r0, block.r1);
          }
        }
      }
    };
    if (apart) {
      const index_t grain_rows = std::max<index_t>(per, parallel_grain() / space.back());
      parallel_for(rows, grain_rows, [&](index_t r0, index_t r1) { run_rows(r0, r1, true); }, per);
    } else {
      run_rows(0, rows, true);
    }
    for (int S = S0; S < E; ++S)
      for (int j = L_.first_reduce[S]; j < L_.first_reduce[S + 1]; ++j) {
        const int c = L_.reduce_nodes[j];
        if (d(c).rkind == detail::reduce_op::mean && val(c).numel() != rows) divide_mean(c, 0, val(c).numel());
      }
  }

  /// Where stage `S`'s lists start in the layout's tables, and their lengths.
  struct stage_span {
    int c0, l0, w0, r0;
    std::size_t NC, NR, NL, NW;
  };
  stage_span span_of(int S) const {
    const int c0 = L_.first_compute[S], l0 = L_.first_load[S], w0 = L_.first_store[S], r0 = L_.first_reduce[S];
    return {c0, l0, w0, r0, static_cast<std::size_t>(L_.first_compute[S + 1] - c0), static_cast<std::size_t>(L_.first_reduce[S + 1] - r0),
            static_cast<std::size_t>(L_.first_load[S + 1] - l0), static_cast<std::size_t>(L_.first_store[S + 1] - w0)};
  }
  /// The thread's scratch fitted to stage `S` (`sp`): its tile registers, then a load buffer
  /// per load, and the per-node lists (buffers only grow).
  scratch& fit_scratch(int S, const stage_span& sp, scratch& sc) {
    const auto need = static_cast<std::size_t>((L_.register_count[S] + static_cast<int>(sp.NL)) * tile_elems);
    if (sc.regs.size() < need) sc.regs.resize(need);
    sc.fit(sp.NL, sp.NC, sp.NW, sp.NR);
    return sc;
  }

  /// Has the element-wise node of stage `S` whose value reduction `j` of the stage sums (to
  /// its own shape) write straight into the reduction's output: `redir[q] = j` for that node
  /// `q`, where it has a tile register, is not stored and writes no other reduction.
  bool redirect(int S, std::size_t j, int* redir) const {
    const int c0 = L_.first_compute[S], NC = L_.first_compute[S + 1] - c0;
    const int rslot = L_.reduce_slot[L_.first_reduce[S] + static_cast<int>(j)];
    for (int q = 0; q < NC; ++q)
      if (L_.out_slot[c0 + q] == rslot && L_.tile_register[c0 + q] >= 0 && L_.store_index[c0 + q] < 0 && redir[q] < 0) {
        redir[q] = static_cast<int>(j);
        return true;
      }
    return false;
  }

  /// The usual stage without the general bookkeeping of `pass`: every operand has the
  /// space's shape (`same_shapes`), the space has more than one element and runs on this
  /// thread in one row, and each reduction is a sum to its own input's shape that an
  /// element-wise node of the stage writes straight into, or a copy of a load (no per-tile
  /// hooks). The same row body on the same pointers as `pass` (the same bits); false, having
  /// made no value, where the stage is not of that kind.
  bool plain_pass(int S, const shape& space, scratch& sc_) {
    const index_t total = numel(space);
    if (total <= 1 || split_pow2(total, sum_chunk<T>, parallel_grain()).count > 1) return false;
    const stage_span span = span_of(S);
    const int c0 = span.c0, l0 = span.l0, w0 = span.w0, r0 = span.r0;
    const std::size_t NC = span.NC, NR = span.NR, NL = span.NL, NW = span.NW;
    scratch& sc = fit_scratch(S, span, sc_);
    int* const redir = sc.redir.data();
    std::fill_n(redir, NC, -1);
    grow(NR, sc.direct);
    for (std::size_t j = 0; j < NR; ++j) {
      const int c = L_.reduce_nodes[r0 + static_cast<int>(j)];
      if (d(c).rkind == detail::reduce_op::max || numel(shp(c)) != total) return false;
      // Written by its node (2), or a copy of a load (1: the general pass copies it tile by
      // tile; here in one piece after the row).
      if (redirect(S, j, redir)) sc.direct[j] = 2;
      else if (L_.reduce_slot[r0 + static_cast<int>(j)] < static_cast<int>(NL)) sc.direct[j] = 1;
      else return false;
    }
    T* const regs = sc.regs.data();
    for (std::size_t j = 0; j < NL; ++j) {
      sc.lrow[j] = val(L_.load_nodes[l0 + static_cast<int>(j)]).data_ptr();
      sc.lstep[j] = 1;
    }
    for (std::size_t j = 0; j < NW; ++j) {
      const int c = L_.store_nodes[w0 + static_cast<int>(j)];
      val(c) = empty<T>(shp(c));
    }
    for (std::size_t j = 0; j < NR; ++j) {
      const int c = L_.reduce_nodes[r0 + static_cast<int>(j)];
      val(c) = empty<T>(shp(c));
    }
    for (std::size_t q = 0; q < NC; ++q) {
      const int cq = c0 + static_cast<int>(q);
      const int sw = L_.store_index[cq];
      const int reg = L_.tile_register[cq];
      T* to = reg >= 0 ? regs + static_cast<std::ptrdiff_t>(reg) * tile_elems : nullptr;
      index_t step = 0;
      if (sw >= 0) to = val(L_.store_nodes[w0 + sw]).data_ptr(), step = 1;
      else if (redir[q] >= 0) to = val(L_.reduce_nodes[r0 + redir[q]]).data_ptr(), step = 1;
      sc.dst[q] = to;
      sc.step[q] = step;
    }
    sc.slot[NL + NC] = nullptr;  // the second operand of a unary node
    const row_args<T> args{g_.state, sc.slot.data(), sc.lrow.data(), sc.lstep.data(), sc.dst.data(), sc.step.data(), nullptr, nullptr, nullptr};
    bodies_[S](args, total);
    for (std::size_t j = 0; j < NR; ++j)
      if (sc.direct[j] == 1) {
        const T* from = sc.lrow[static_cast<std::size_t>(L_.reduce_slot[r0 + static_cast<int>(j)])];
        std::copy(from, from + total, val(L_.reduce_nodes[r0 + static_cast<int>(j)]).data_ptr());
      }
    return true;
  }

  /// Reduction `c` of a value of shape `it`, seen with `it`'s rank (1 on the reduced dims).
  shape sum_view(int c, const shape& it) const {
    return d(c).kind == gkind::reduction ? keepdim_shape(it, d(c).raxis) : shp(c);
  }

  /// One pass of loop `S` over the space `it`: every sink of the stage, walked in rows, each
  /// row in tiles; the stage's tile body runs every node over the whole tile. `same_shapes`:
  /// every operand has the shape `it` (or is a reduction of all of it to one element).
  /// In a row group (`block`): only the block's rows, its sums over everything carried on
  /// from the block before (in `sc`, the stage's own scratch).
  void pass(int S, const shape& it, bool same_shapes, scratch& sc_, const row_block* block = nullptr) {
    const stage_span span = span_of(S);
    const int c0 = span.c0, l0 = span.l0, w0 = span.w0, r0 = span.r0;
    const std::size_t NC = span.NC, NR = span.NR, NL = span.NL, NW = span.NW;  // (not bindings: the lambdas below capture them)
    const int* Rn = L_.reduce_nodes + r0;
    const int* Ln = L_.load_nodes + l0;
    const int* Wn = L_.store_nodes + w0;
    const int* tile_register = L_.tile_register + c0;
    const int* store_index = L_.store_index + c0;
    const int* store_slot = L_.store_slot + w0;
    const int* reduce_slot = L_.reduce_slot + r0;
    const std::size_t N = NL + NW + NR;
    using V = simd<T>;
    scratch& sc = fit_scratch(S, span, sc_);
    const int nregs = L_.register_count[S];
    T* const regs = sc.regs.data();
    T* const loadbuf = regs + static_cast<std::ptrdiff_t>(nregs) * tile_elems;
    // Buffers only grow (`fit_scratch`); every entry a pass reads is written first.
    sc.slot[NL + NC] = nullptr;  // the second operand of a unary node
    std::fill_n(sc.divisor.begin(), NL, T(1));
    // A reduction to its own input's shape (`direct`) whose input is an element-wise node of
    // the stage not stored otherwise has that node write straight into its output (instead of
    // a tile register copied out per tile): `direct` 2, `redir[q]` the reduction.
    std::fill_n(sc.redir.begin(), NC, -1);
    for (std::size_t j = 0; j < NR; ++j) {
      if ((sc.direct[j] == 1 || sc.direct[j] == 2) && redirect(S, j, sc.redir.data())) sc.direct[j] = 2;
    }
    for (std::size_t j = 0; j < NR; ++j) {
      sc.rmax[j] = d(Rn[j]).rkind == detail::reduce_op::max;
      if (!block || block->first) sc.cur[j] = nullptr;  // a row-form sum's current output
      sc.colf[j] = 0;       // a column-form sum (set up below)
    }
    const row_body_fn<T> body = bodies_[S];
    const T* const* const lp = sc.lp.data();
    const T* const divisor = sc.divisor.data();
    T* const* const wp = sc.wp.data();
    const char* const direct = sc.direct.data();
    const int* const redir = sc.redir.data();

    work main{regs, loadbuf, sc.slot.data(), sc.dst.data(), sc.step.data(), sc.lrow.data(), sc.lstep.data(),
              sc.acc.data(), sc.tail.data(), sc.rsum.data(), sc.cur.data(), false};

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
      const int* store_slot;
      const int* reduce_slot;
      const char* direct;
      const char* rmax;
      V* acc;
      T* tail;
      running_sum<T>* rsum;
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
          if (h.is[NL + j] == 0) h.wp[j][h.base[NL + j]] = h.slot[h.store_slot[j]][0];
        for (std::size_t j = 0; j < h.NR; ++j) {
          if (h.direct[j] == set_before) continue;
          const std::size_t q = NL + NW + j;
          const T* src = h.slot[h.reduce_slot[j]];
          T* out = h.wp[NW + j] + h.base[q];
          const bool mx = h.rmax[j];
          if (h.is[q] == 0) {
            if (mx) tile_max(src, m, h.acc[j], h.tail[j]);
            else h.rsum[j].add(src, m);
          } else if (h.direct[j] == 2) {
            // written in place by the row body
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
    auto row_fn = [&](work& w, const index_t* base, index_t n, const index_t* is) {
      bool scaled = false;
      for (std::size_t j = 0; j < NL; ++j) {
        T* const buf = w.loadbuf + j * tile_elems;
        if (is[j] == 0) {
          std::fill(buf, buf + std::min(n, tile_elems), lp[j][base[j]] / divisor[j]);  // what the row's tiles read
          w.lrow[j] = buf;
          w.lstep[j] = 0;
        } else {
          w.lrow[j] = lp[j] + base[j];
          w.lstep[j] = 1;
          scaled = scaled || divisor[j] != T(1);
        }
      }
      bool one_element_store = false;
      for (std::size_t q = 0; q < NC; ++q) {
        const int sw = store_index[q];
        const bool to_store = sw >= 0 && is[NL + static_cast<std::size_t>(sw)] != 0;
        one_element_store = one_element_store || (sw >= 0 && !to_store);
        w.dst[q] = to_store              ? wp[sw] + base[NL + static_cast<std::size_t>(sw)]
                   : tile_register[q] >= 0 ? w.regs + static_cast<std::ptrdiff_t>(tile_register[q]) * tile_elems
                                           : nullptr;
        w.step[q] = to_store ? 1 : 0;
        const int rj = redir[q];
        if (rj >= 0 && is[NL + NW + static_cast<std::size_t>(rj)] != 0) {
          w.dst[q] = wp[NW + static_cast<std::size_t>(rj)] + base[NL + NW + static_cast<std::size_t>(rj)];
          w.step[q] = 1;
        }
      }
      for (std::size_t j = 0; j < NR; ++j) {
        const std::size_t q = NL + NW + j;
        if (sc.rmax[j]) {
          w.acc[j] = V(-std::numeric_limits<T>::infinity());
          w.tail[j] = -std::numeric_limits<T>::infinity();
        } else if (is[q] == 0 && direct[j] != set_before && wp[NW + j] + base[q] != w.cur[j]) {  // a row-form sum's next output
          if (w.cur[j]) *w.cur[j] = w.rsum[j].total();
          w.rsum[j].reset();
          w.cur[j] = wp[NW + j] + base[q];
        }
      }
      hooks h{w.slot, w.lrow, w.lstep, divisor, w.loadbuf, NL, NW, NR, base, is, wp, store_slot, reduce_slot, direct, sc.rmax.data(), w.acc, w.tail, w.rsum};
      const row_args<T> args{g_.state, w.slot, w.lrow, w.lstep, w.dst, w.step, scaled ? &hooks::before : nullptr,
                             NR > 0 || one_element_store ? &hooks::after : nullptr, &h};
      body(args, n);
      for (std::size_t j = 0; j < NR; ++j) {
        const std::size_t q = NL + NW + j;
        if (is[q] != 0) {
          if (sc.colf[j]) sc.cols[j].row_done(base[q] / n);
        } else if (sc.rmax[j] && !w.blocks && direct[j] != set_before) {
          T* p = wp[NW + j] + base[q];
          *p = lanes::max(*p, lanes::max(lanes_max(w.acc[j]), w.tail[j]));
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

    // Operands of one shape: one flat row, no strides to compute.
    {
      if (same_shapes && !block) {
        const index_t total = numel(it);
        std::fill_n(sc.is.begin(), N, total == 1 ? 0 : 1);
        std::fill_n(sc.base.begin(), N, 0);
        for (std::size_t j = 0; j < NL; ++j) sc.lp[j] = val(Ln[j]).data_ptr();
        for (std::size_t j = 0; j < NW; ++j) sc.wp[j] = val(Wn[j]).data_ptr();
        for (std::size_t j = 0; j < NR; ++j) {
          sc.wp[NW + j] = val(Rn[j]).data_ptr();
          if (val(Rn[j]).numel() == 1) sc.is[NL + NW + j] = 0;
        }
        if (total > 0) {
          const block_split split = split_pow2(total, sum_chunk<T>, parallel_grain());
          if (split.count <= 1) row_fn(main, sc.base.data(), total, sc.is.data());
          else parallel_row(split, total, N, NL, NC, NW, NR, nregs, row_fn, sc);
        }
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
        if (d(c).rkind == detail::reduce_op::mean)
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
    if (flat && !block) {
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
    // Rows that write disjoint elements (no reduction, every store covering the space) run in
    // blocks of rows on all threads; the others in order on this one.
    const index_t rows = row_count(space), len = space.empty() ? 1 : std::max<index_t>(space.back(), 1);
    const index_t grain_rows = std::max<index_t>(1, parallel_grain() / len);
    bool apart = !block && NR == 0 && split_items(rows, grain_rows).count > 1;
    for (std::size_t j = 0; j < NW && apart; ++j) apart = st[NL + j] == contiguous_strides(space);
    if (apart) {
      parallel_for(rows, grain_rows, [&](index_t r0, index_t r1) {
        thread_local block_scratch bs;
        work w = block_work(bs, N, NL, NC, L_.register_count[S], nullptr, nullptr, nullptr, nullptr);
        std::vector<index_t> boff(N, 0), binner(N, 0);
        for_each_row_n(
            space, N, sp.data(), boff.data(), binner.data(),
            [&](const index_t* b, index_t n, const index_t* is) { row_fn(w, b, n, is); }, r0, r1);
      });
      return;
    }
    std::vector<index_t> off(N, 0), inner(N, 0);
    for_each_row_n(
        space, N, sp.data(), off.data(), inner.data(), [&](const index_t* b, index_t n, const index_t* is) { row_fn(main, b, n, is); },
        block ? block->r0 : 0, block ? block->r1 : -1);
    finish_sums();  // (in a block: a sum over everything written so far, and carried on)
  }

  /// A `work` on a thread's own buffers `bs` (sized here), with the given reduction state.
  static work block_work(block_scratch& bs, std::size_t N, std::size_t NL, std::size_t NC, int nregs, simd<T>* acc,
                         T* tail, running_sum<T>* rsum, T** cur) {
    const auto need = static_cast<std::size_t>((nregs + static_cast<int>(NL)) * tile_elems);
    if (bs.regs.size() < need) bs.regs.resize(need);
    grow(NL + NC + 1, bs.slot);
    bs.slot[NL + NC] = nullptr;  // the second operand of a unary node
    grow(NC, bs.dst, bs.step);
    grow(NL, bs.lrow, bs.lstep);
    grow(N, bs.base);
    return work{bs.regs.data(), bs.regs.data() + static_cast<std::ptrdiff_t>(nregs) * tile_elems,
                bs.slot.data(), bs.dst.data(), bs.step.data(), bs.lrow.data(), bs.lstep.data(), acc, tail, rsum, cur, true};
  }

  /// The fast path's one row of `total` elements on all threads: blocks of 2^j sum chunks,
  /// each with its own tile registers and running reductions; full sums are combined by
  /// `sum_of_blocks` and maxes lane by lane in block order, so the bits are one thread's.
  template <class RowFn>
  void parallel_row(block_split split, index_t total, std::size_t N, std::size_t NL, std::size_t NC, std::size_t NW,
                    std::size_t NR, int nregs, RowFn& row_fn, scratch& sc) {
    using V = simd<T>;
    const auto parts = static_cast<std::size_t>(split.count) * NR;
    std::vector<V> acc(parts, V(-std::numeric_limits<T>::infinity()));
    std::vector<T> tail(parts, -std::numeric_limits<T>::infinity());
    std::vector<running_sum<T>> rsum(parts);
    std::vector<T*> cur(parts, nullptr);
    const index_t* const is = sc.is.data();
    parallel_blocks(split.count, [&](index_t b) {
      thread_local block_scratch bs;  // this thread's registers and row pointers
      const auto r = static_cast<std::size_t>(b) * NR;
      work w = block_work(bs, N, NL, NC, nregs, acc.data() + r, tail.data() + r, rsum.data() + r, cur.data() + r);
      const index_t b0 = b * split.size;
      for (std::size_t q = 0; q < N; ++q) bs.base[q] = is[q] != 0 ? b0 : 0;
      row_fn(w, bs.base.data(), std::min(split.size, total - b0), is);
    });
    std::vector<T> totals(static_cast<std::size_t>(split.count));
    for (std::size_t j = 0; j < NR; ++j) {
      const std::size_t q = NL + NW + j;
      if (is[q] != 0) continue;  // written in place (a reduction to its own shape)
      T* const out = sc.wp[NW + j];
      if (sc.rmax[j]) {
        V a(-std::numeric_limits<T>::infinity());
        T t = -std::numeric_limits<T>::infinity();
        for (index_t b = 0; b < split.count; ++b) {
          a = lanes::max(a, acc[static_cast<std::size_t>(b) * NR + j]);
          t = lanes::max(t, tail[static_cast<std::size_t>(b) * NR + j]);
        }
        *out = lanes::max(*out, lanes::max(lanes_max(a), t));
      } else {
        for (index_t b = 0; b < split.count; ++b)
          totals[static_cast<std::size_t>(b)] = rsum[static_cast<std::size_t>(b) * NR + j].total();
        *out = sum_of_blocks(totals.data(), split.count);
      }
    }
  }
  const fused_view& L_;
  const row_body_fn<T>* bodies_;
  node_eval<T>& g_;
};

template <Element T>
void fused_runner<T>::run(int n) {
  for (int S = 0; S < n;) {
    const int E = row_group_end(S, n);
    if (E - S >= 2) row_group(S, E);
    else stage(S);
    S = std::max(E, S + 1);
  }
}

template <Element T>
void fused_runner<T>::stage(int S) {
  for (int j = L_.first_matmul[S]; j < L_.first_matmul[S + 1]; ++j) eval(L_.matmul_nodes[j]);
  loop(S);
}

template <Element T>
void fused_runner<T>::eval(int c) {
  g_.values[static_cast<std::size_t>(c)] = g_.eval(c);
}

}  // namespace fusegrad::detail
