#pragma once
/// \file fusegrad/kernel/fused_runner.hpp
/// The fused loops' run-time code, one per element type (`fused_runner`): it runs the stages
/// of a `fused_view` (rows, tiles, loads, stores, reductions, broadcasting), calling each
/// stage's row body (fusegrad/kernel/row_body.hpp) per row.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "fusegrad/compile/node_eval.hpp"
#include "fusegrad/compile/shape_memo.hpp"
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
#include "fusegrad/loops/tile_reductions.hpp"

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
/// The most elements of a row group's block of rows: 1 MiB of floats per value the block reads
/// or writes, so that a softmax's few values stay in the last-level cache from one stage to the
/// next. Each block pays every stage's pass set-up and restarts each stream of loads and
/// stores, which made L2-sized blocks the slower choice (docs/performance.md, "Softmax family").
inline constexpr index_t row_block_elems = index_t{1} << 18;
/// The fewest elements of a block where the rows are shared among threads.
inline constexpr index_t min_row_block_elems = 8192;
/// The rows of a row group's block, over `rows` rows of `len` elements shared among `threads`
/// threads: `row_block_elems` worth, but no more than a thread's share, so that every thread
/// has blocks (and no fewer than `min_row_block_elems` worth). At least one row.
inline index_t group_block_rows(index_t rows, index_t len, index_t threads) {
  const index_t t = std::max<index_t>(threads, 1), most = row_block_elems / len, share = (rows + t - 1) / t;
  return std::max<index_t>({1, std::min(most, share), std::min(most, min_row_block_elems / len)});
}

// ---- the loops: run-time code, one per element type ----------------------------------------

/// Runs the stages of a `fused_view` over the values of one evaluation.
///
/// The phases, by function: `run` walks the stages, taking consecutive stages whose rows line
/// up as a row group (`run_row_group`) and the others one by one (`stage`, `run_loop`). A
/// stage's loop picks one strategy (`choose_strategy`): the plain pass (`run_plain_pass`),
/// one contiguous row (`run_one_row`, split into blocks on all threads by
/// `run_one_row_in_blocks`), strided rows (`run_strided_rows`, in parallel blocks of rows or in
/// order), or node by node on whole tensors (`run_node_by_node`). Every pass runs each row with
/// `run_row`: its loads, destinations and reductions set up, then the stage's row body.
template <Element T>
class fused_runner {
 public:
  /// `choices`: where the loops keep what they choose per stage on these shapes (null: nowhere).
  fused_runner(const fused_view& layout, const row_body_fn<T>* bodies, node_eval<T>& nodes,
               stage_choices* choices = nullptr)
      : layout_(layout), bodies_(bodies), nodes_(nodes), choices_(choices) {}

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
  /// whose full maxes stay in `maxes` (combined once every block is done).
  struct work {
    T* regs;
    T* loadbuf;
    const T** slot;
    T** dst;
    index_t* step;
    const T** lrow;
    index_t* lstep;
    running_max<T>* maxes;
    running_sum<T>* rsum;
    T** cur;
    bool blocks;
  };
  /// A thread's own buffers for blocks of a parallel pass.
  struct block_scratch {
    std::vector<T> regs;
    std::vector<const T*> slot, lrow;
    std::vector<T*> dst;
    std::vector<index_t> step, lstep, base, inner;
  };

  /// One piece of the per-tile hook's work (`tile_hooks::after`), planned once per pass
  /// (`plan_hook_steps`): what to do with slot `slot`'s tile, into output `out` (an index into
  /// `scratch::wp`) at operand `q`'s offset, reduction `r`'s running state.
  struct hook_step {
    enum class what : unsigned char {
      store_one,  ///< a store broadcast along the row: the tile's first value
      row_max,    ///< a row's max into its own output (`scratch::per_row`)
      row_sum,    ///< a row's sum into its own output
      feed_max,   ///< the running max of a row longer than a tile
      feed_sum,   ///< a row-form running sum
      copy,       ///< a reduction to its own input's shape: a copy of a load
      max_into,   ///< a column-wise max into the output's tile
      sum_into,   ///< a column-wise sum into the output's tile
    };
    what k;
    int slot;
    std::size_t out, q, r;
  };
  /// Per-thread buffers of the loops, reused by the next pass (tile registers never shrink).
  /// Per operand (loads, then stores, then reductions): `st` its strides over the space,
  /// `base` its offset and `is` its step along the row (0: broadcast, 1: contiguous).
  struct scratch {
    std::vector<const T*> slot, lrow, lp;  ///< `lp`: per load, its data
    std::vector<T*> dst, wp;               ///< `wp`: per store, then per reduction, its output's data
    std::vector<index_t> step, lstep, is, base;
    std::vector<char> rmax, direct;           ///< per reduction: a max; written directly (see `set_direct`)
    std::vector<char> whole;                  ///< per load: a hook reads it over the tile (see `mark_whole_loads`)
    std::vector<int> dst_operand, mem_nodes;  ///< per element-wise node: see `plan_rows`
    std::vector<T*> dst_base;                 ///< per element-wise node: its destination's data (`plan_rows`)
    std::vector<T> divisor, regs;             ///< `divisor`: per load, what a mean's gradient divides by
    std::vector<strides> st;
    std::vector<const strides*> sp;  ///< per operand: its `st` (as `for_each_row_n` reads them)
    std::vector<T*> held;            ///< per operand: its rows in a block buffer (null: its tensor; `hold_in_buffer`)
    std::vector<index_t> inner;      ///< per operand: its step along the row (`for_each_row_n`'s)
    std::vector<index_t> rs, lrs, drs;  ///< per operand, load, node: the advance per row (`run_rows_in_calls`)
    std::vector<T> row_batches;         ///< per load broadcast along the rows: a batch per row (`fill_row_batches`)
    std::vector<running_max<T>> maxes;  ///< per reduction: a max (of the row, or of everything)
    std::vector<running_sum<T>> rsum;   ///< per reduction: a row-form sum
    std::vector<column_sums<T>> cols;   ///< per reduction: a column-form sum
    std::vector<T*> cur;                ///< per reduction: the output `rsum` adds up
    std::vector<char> colf;             ///< per reduction: in the column form
    std::vector<char> per_row;     ///< per reduction: a row's own output, the row one tile (see `mark_row_outputs`)
    std::vector<int> redir;        ///< per element-wise node: the reduction it writes (-1: none)
    std::vector<hook_step> steps;  ///< the per-tile hook's work (`plan_hook_steps`)
    std::size_t load_cap = 0, node_cap = 0, store_cap = 0, reduction_cap = 0;  ///< the counts the buffers fit

    /// Makes the buffers fit `loads` loads, `nodes` element-wise nodes, `stores` stores and
    /// `reductions` reductions (a few comparisons when they do already).
    void fit(std::size_t loads, std::size_t nodes, std::size_t stores, std::size_t reductions) {
      if (loads <= load_cap && nodes <= node_cap && stores <= store_cap && reductions <= reduction_cap) return;
      load_cap = std::max(load_cap, loads), node_cap = std::max(node_cap, nodes);
      store_cap = std::max(store_cap, stores), reduction_cap = std::max(reduction_cap, reductions);
      grow(load_cap + node_cap + 1, slot);
      grow(node_cap, dst, step, redir);
      grow(load_cap, lrow, lstep, lp, divisor, whole);
      grow(store_cap + reduction_cap, wp);
      grow(reduction_cap, maxes, rmax, rsum, cols, cur, colf, per_row);
      grow(load_cap + store_cap + reduction_cap, st, is, base, held);
    }
  };
  /// Makes each of `vs` at least `n` long (buffers only grow).
  template <class... X>
  static void grow(std::size_t n, std::vector<X>&... vs) {
    ((vs.size() < n ? vs.resize(n) : void()), ...);
  }
  static scratch& thread_scratch() {
    thread_local scratch s;
    return s;
  }
  /// The thread's scratch per stage of a row group (a block's state kept until the next).
  static std::vector<scratch>& group_scratch(std::size_t stages) {
    thread_local std::vector<scratch> g;
    if (g.size() < stages) g.resize(stages);
    return g;
  }

  // ---- the graph's nodes -----------------------------------------------------------------

  const std::array<int, 3>& children_of(int c) const { return nodes_.children[static_cast<std::size_t>(c)]; }
  const node_desc& desc(int c) const { return nodes_.desc[c]; }
  tensor<T>& value(int c) { return nodes_.values[static_cast<std::size_t>(c)]; }
  const shape& shape_of(int c) const { return nodes_.shapes[static_cast<std::size_t>(c)]; }
  bool is_max(int c) const { return desc(c).rkind == detail::reduce_op::max; }
  bool is_mean(int c) const { return desc(c).rkind == detail::reduce_op::mean; }

  /// An element-wise node on whole tensors, its operands broadcast to its shape (the eager
  /// path's `map_strided` with the node's tile kernel).
  void eval_pointwise(int c) {
    tensor<T> r = empty<T>(shape_of(c));
    const int b = children_of(c)[1];
    if (r.numel() > 0)
      map_strided<T>(nodes_.kernels[c], nodes_.state[c], value(children_of(c)[0]), b >= 0 ? &value(b) : nullptr, r);
    value(c) = std::move(r);
  }

  // ---- a stage's lists and space ---------------------------------------------------------

  /// Where stage `S`'s lists start in the layout's tables, and their lengths. A pass's
  /// operands are its loads, then its stores, then its reductions (`store_operand`,
  /// `reduction_operand`): each has strides, a base and a step per row.
  struct stage_span {
    int first_node, first_load, first_store, first_reduction;
    std::size_t nodes, reductions, loads, stores;
    std::size_t operand_count() const { return loads + stores + reductions; }
    std::size_t store_operand(std::size_t j) const { return loads + j; }
    std::size_t reduction_operand(std::size_t j) const { return loads + stores + j; }
  };
  stage_span span_of(int S) const {
    const int c0 = layout_.first_compute[S], l0 = layout_.first_load[S], w0 = layout_.first_store[S],
              r0 = layout_.first_reduce[S];
    return {c0,
            l0,
            w0,
            r0,
            static_cast<std::size_t>(layout_.first_compute[S + 1] - c0),
            static_cast<std::size_t>(layout_.first_reduce[S + 1] - r0),
            static_cast<std::size_t>(layout_.first_load[S + 1] - l0),
            static_cast<std::size_t>(layout_.first_store[S + 1] - w0)};
  }

  /// Whether stage `S` has a loop: something to store or to reduce.
  bool has_loop(int S) const {
    return layout_.first_store[S] != layout_.first_store[S + 1] ||
           layout_.first_reduce[S] != layout_.first_reduce[S + 1];
  }
  /// Whether reduction `c` of stage `S` reduces one element that the stage loads (its value is
  /// that element, whatever it sums or takes the max of, known before the loop): the gradient
  /// of a one-element output summed to its shape.
  bool of_one_element(int S, int c) const {
    const int in = children_of(c)[0];
    if (numel(shape_of(in)) != 1) return false;
    for (int j = layout_.first_load[S]; j < layout_.first_load[S + 1]; ++j)
      if (layout_.load_nodes[j] == in) return desc(in).kind != gkind::unreduce;
    return false;
  }
  /// Stage `S`'s iteration space (it has a loop): what the reductions of more than one element
  /// read, else the largest store, else what the reductions read (a reference into the shapes,
  /// which a loop does not change: no copy per call).
  const shape& space_of(int S) const { return shape_of(space_node(S)); }
  /// The node whose shape is stage `S`'s space (see `space_of`).
  int space_node(int S) const {
    const int w0 = layout_.first_store[S], w1 = layout_.first_store[S + 1], r0 = layout_.first_reduce[S],
              r1 = layout_.first_reduce[S + 1];
    for (int j = r0; j < r1; ++j)
      if (!of_one_element(S, layout_.reduce_nodes[j])) return children_of(layout_.reduce_nodes[j])[0];
    if (w0 == w1) return children_of(layout_.reduce_nodes[r0])[0];
    int best = layout_.store_nodes[w0];
    for (int j = w0; j < w1; ++j) {
      const shape& s = shape_of(layout_.store_nodes[j]);
      const shape& b = shape_of(best);
      if (s.size() > b.size() || (s.size() == b.size() && numel(s) > numel(b))) best = layout_.store_nodes[j];
    }
    return best;
  }
  /// Reduction `c` of a value of shape `it`, seen with `it`'s rank (1 on the reduced dims).
  shape sum_view(int c, const shape& it) const {
    return desc(c).kind == gkind::reduction ? keepdim_shape(it, desc(c).raxis) : shape_of(c);
  }

  // ---- a stage's outputs -----------------------------------------------------------------

  /// `scratch::direct` of a reduction of one element over a larger space: its value is set
  /// before the loop, which leaves it alone.
  static constexpr char set_before = 3;
  /// Stage `S`'s outputs made over `space`: its stores (but those `held` in a row group's
  /// block buffer, which get no tensor), its reductions filled with their identity, except
  /// those to their own input's shape (`sc.direct`: each element written once) and those of
  /// one element (computed here).
  void make_outputs(int S, const shape& space, scratch& sc, std::span<const int> held = {}) {
    const int w0 = layout_.first_store[S], w1 = layout_.first_store[S + 1], r0 = layout_.first_reduce[S],
              r1 = layout_.first_reduce[S + 1];
    for (int j = w0; j < w1; ++j) {
      const int c = layout_.store_nodes[j];
      if (std::find(held.begin(), held.end(), c) != held.end()) value(c) = tensor<T>();
      else value(c) = empty<T>(shape_of(c));
    }
    set_direct(S, space, sc);
    for (int j = r0; j < r1; ++j) {
      const int c = layout_.reduce_nodes[j];
      const char direct = sc.direct[static_cast<std::size_t>(j - r0)];
      if (direct == set_before) {
        eval(c);
        continue;
      }
      value(c) = empty<T>(shape_of(c));
      if (!direct) fill(value(c), is_max(c) ? -std::numeric_limits<T>::infinity() : T(0));
    }
  }
  /// `sc.direct` for stage `S`'s reductions over `space` (see `make_outputs`).
  void set_direct(int S, const shape& space, scratch& sc) const {
    const int r0 = layout_.first_reduce[S], r1 = layout_.first_reduce[S + 1];
    grow(static_cast<std::size_t>(r1 - r0), sc.direct);
    for (int j = r0; j < r1; ++j) {
      const int c = layout_.reduce_nodes[j];
      sc.direct[static_cast<std::size_t>(j - r0)] = of_one_element(S, c) && numel(space) > 1
                                                        ? set_before
                                                        : static_cast<char>(shape_of(c) == space && numel(space) > 1);
    }
  }
  /// A mean's sums divided by the count each holds: outputs [e0, e1) of reduction `c`.
  void divide_mean(int c, index_t e0, index_t e1) {
    const index_t cnt = numel(shape_of(children_of(c)[0])) / std::max<index_t>(value(c).numel(), 1);
    T* p = value(c).data_ptr();
    for (index_t e = e0; e < e1; ++e) p[e] /= static_cast<T>(cnt);
  }
  /// Every mean of stage `S`, once its sums are complete.
  void divide_means(int S) {
    for (int j = layout_.first_reduce[S]; j < layout_.first_reduce[S + 1]; ++j)
      if (is_mean(layout_.reduce_nodes[j]))
        divide_mean(layout_.reduce_nodes[j], 0, value(layout_.reduce_nodes[j]).numel());
  }

  // ---- a stage's loop: its strategies and the choice among them --------------------------

  /// How a stage's loop runs (see `choose_strategy`).
  enum class loop_strategy {
    plain_pass,    ///< one contiguous row on this thread, no per-tile hooks (`run_plain_pass`)
    one_row,       ///< one contiguous row, in blocks on all threads where it is long (`run_one_row`)
    strided_rows,  ///< operands broadcast over the space, walked in rows (`run_strided_rows`)
    node_by_node,  ///< each node on whole tensors (`run_node_by_node`)
  };
  /// Stage `S`'s loop over its space, by the strategy its shapes decide (`stage_choice_of`);
  /// the plain pass where the stage's elements also run on this thread alone.
  void run_loop(int S) {
    if (!has_loop(S)) return;
    scratch& sc = thread_scratch();
    const stage_choice k = stage_choice_of(S, sc);
    const shape& space = shape_of(k.space_node);
    switch (k.how) {
      case loop_strategy::plain_pass:
        if (runs_on_this_thread(numel(space))) return run_plain_pass(S, numel(space), sc);
        return run_pass(S, space, loop_strategy::one_row, sc);
      case loop_strategy::one_row: return run_pass(S, space, loop_strategy::one_row, sc);
      case loop_strategy::strided_rows: return run_pass(S, space, loop_strategy::strided_rows, sc);
      case loop_strategy::node_by_node: return run_node_by_node(S);
    }
  }
  /// What stage `S`'s shapes decide of its loop: its strategy and the node whose shape is its
  /// space. Kept in `choices_` (as `(space_node + 1) << 3 | (how + 1)`) by the first call on
  /// these shapes and read by the later ones, which skip the checks (a plain pass is planned
  /// in `sc` either way).
  struct stage_choice {
    loop_strategy how;
    int space_node;
  };
  stage_choice stage_choice_of(int S, scratch& sc) {
    if (const std::uint32_t w = choices_ ? choices_->get(S) : 0) {
      const stage_choice k{static_cast<loop_strategy>((w & 7U) - 1), static_cast<int>(w >> 3) - 1};
      if (k.how == loop_strategy::plain_pass) plan_plain_pass(S, numel(shape_of(k.space_node)), sc);
      return k;
    }
    const int node = space_node(S);
    const stage_choice k{choose_strategy(S, shape_of(node), sc), node};
    if (choices_) choices_->set(S, static_cast<std::uint32_t>(node + 1) << 3 | (static_cast<std::uint32_t>(k.how) + 1));
    return k;
  }
  /// The strategy of stage `S`'s loop over `space`. Operands of the space's shape run as one
  /// contiguous row: the plain pass where the stage fits it (`plan_plain_pass`, which leaves
  /// its plan in `sc`), else the general one. Others are walked in strided rows where one pass
  /// over the space computes every output (`one_pass_covers`), else node by node.
  loop_strategy choose_strategy(int S, const shape& space, scratch& sc) {
    if (operands_share_space(S, space))
      return plan_plain_pass(S, numel(space), sc) ? loop_strategy::plain_pass : loop_strategy::one_row;
    return one_pass_covers(S, space) ? loop_strategy::strided_rows : loop_strategy::node_by_node;
  }
  /// Whether a row of `total` elements runs on this thread alone (else the one-row pass splits
  /// it into blocks on all threads). The thread count may change between calls: not kept.
  static bool runs_on_this_thread(index_t total) {
    return split_pow2(total, sum_chunk<T>, parallel_grain()).count <= 1;
  }
  /// The usual case: every load and store of stage `S` has the space's shape and every
  /// reduction reads all of it, into the same shape or into one element: one row, no
  /// strides, and nothing more to check.
  bool operands_share_space(int S, const shape& space) const {
    for (int j = layout_.first_load[S]; j < layout_.first_load[S + 1]; ++j)
      if (desc(layout_.load_nodes[j]).kind == gkind::unreduce || !(shape_of(layout_.load_nodes[j]) == space))
        return false;
    for (int j = layout_.first_store[S]; j < layout_.first_store[S + 1]; ++j)
      if (!(shape_of(layout_.store_nodes[j]) == space)) return false;
    for (int j = layout_.first_reduce[S]; j < layout_.first_reduce[S + 1]; ++j) {
      const shape& out = shape_of(layout_.reduce_nodes[j]);
      if (!(shape_of(children_of(layout_.reduce_nodes[j])[0]) == space && (out == space || numel(out) == 1)))
        return false;
    }
    return true;
  }
  /// Whether one pass over `space` in rows computes every output of stage `S` (its operands
  /// of other shapes broadcast over it); else the stage runs node by node (rare: reductions
  /// over differently broadcast values).
  bool one_pass_covers(int S, const shape& space) const {
    const int w0 = layout_.first_store[S], w1 = layout_.first_store[S + 1], r0 = layout_.first_reduce[S],
              r1 = layout_.first_reduce[S + 1];
    for (int j = r0; j < r1; ++j)
      if (!(shape_of(children_of(layout_.reduce_nodes[j])[0]) == space || of_one_element(S, layout_.reduce_nodes[j])))
        return false;
    // A store is written by visiting the space's elements: a store with elements over an
    // empty space (its dims of size 1 broadcast to 0: x [0, 3] * y [3] makes y's gradient
    // a [3] sum over nothing) would be left unwritten, so such a stage runs node by node.
    const bool empty_space = numel(space) == 0;
    for (int j = w0; j < w1; ++j)
      if (!broadcasts_to(shape_of(layout_.store_nodes[j]), space) ||
          (empty_space && numel(shape_of(layout_.store_nodes[j])) > 0))
        return false;
    // A sum whose outputs would take their values in interleaved runs of rows (a [1, n, 1]
    // gradient of an [m, n, k] value) runs node by node too (see `sum_rows_in_order`).
    for (int j = r0; j < r1; ++j)
      if (!(is_max(layout_.reduce_nodes[j]) || sum_rows_in_order(space, sum_view(layout_.reduce_nodes[j], space))))
        return false;
    return true;
  }

  /// Stage `S` node by node on whole tensors: the broadcasts of reductions it loads, its
  /// element-wise nodes, then its reductions.
  void run_node_by_node(int S) {
    for (int j = layout_.first_load[S]; j < layout_.first_load[S + 1]; ++j)
      if (desc(layout_.load_nodes[j]).kind == gkind::unreduce && !value(layout_.load_nodes[j]).defined())
        eval(layout_.load_nodes[j]);
    for (int q = layout_.first_compute[S]; q < layout_.first_compute[S + 1]; ++q) {
      const int c = layout_.compute_nodes[q];
      if (layout_.tile_register[q] < 0) value(c) = value(layout_.value_child[c]);
      else eval_pointwise(c);
    }
    for (int j = layout_.first_reduce[S]; j < layout_.first_reduce[S + 1]; ++j) eval(layout_.reduce_nodes[j]);
  }

  /// Stage `S` in one pass over `space` (`how`: as one contiguous row, or in strided rows):
  /// its outputs made, every row run, its means divided.
  void run_pass(int S, const shape& space, loop_strategy how, scratch& sc) {
    make_outputs(S, space, sc);
    if (numel(space) > 0) {  // an empty space: its stores are empty, the fills are the sums
      const pass_state p = start_pass(S, sc, nullptr);
      if (how == loop_strategy::one_row) run_one_row(p, space);
      else run_strided_rows(p, space, nullptr);
    }
    divide_means(S);
  }

  // ---- the plain pass --------------------------------------------------------------------

  /// The thread's scratch fitted to stage `S` (`sp`): its tile registers, then a load buffer
  /// per load, and the per-node lists (buffers only grow).
  scratch& fit_scratch(int S, const stage_span& sp, scratch& sc) {
    const auto need = static_cast<std::size_t>((layout_.register_count[S] + static_cast<int>(sp.loads)) * tile_elems);
    if (sc.regs.size() < need) sc.regs.resize(need);
    sc.fit(sp.loads, sp.nodes, sp.stores, sp.reductions);
    return sc;
  }

  /// Has the element-wise node of stage `S` whose value reduction `j` of the stage sums (to
  /// its own shape) write straight into the reduction's output: `redir[q] = j` for that node
  /// `q`, where it has a tile register, is not stored and writes no other reduction.
  bool redirect(int S, std::size_t j, int* redir) const {
    const int c0 = layout_.first_compute[S], nodes = layout_.first_compute[S + 1] - c0;
    const int rslot = layout_.reduce_slot[layout_.first_reduce[S] + static_cast<int>(j)];
    for (int q = 0; q < nodes; ++q)
      if (layout_.out_slot[c0 + q] == rslot && layout_.tile_register[c0 + q] >= 0 && layout_.store_index[c0 + q] < 0 &&
          redir[q] < 0) {
        redir[q] = static_cast<int>(j);
        return true;
      }
    return false;
  }

  /// Whether stage `S` (every operand of the space's shape, `total` elements) fits the plain
  /// pass: the space has more than one element, and each reduction is a sum to its own
  /// input's shape that an element-wise node of the stage writes straight into, or a copy of
  /// a load (no per-tile hooks). Where it does, `sc` holds its plan (`redir`, `direct`) for
  /// `run_plain_pass`; where not (or where the row is split among threads after all),
  /// `make_outputs` and `start_pass` set both afresh.
  bool plan_plain_pass(int S, index_t total, scratch& sc_) {
    if (total <= 1) return false;
    const stage_span span = span_of(S);
    scratch& sc = fit_scratch(S, span, sc_);
    int* const redir = sc.redir.data();
    std::fill_n(redir, span.nodes, -1);
    grow(span.reductions, sc.direct);
    for (std::size_t j = 0; j < span.reductions; ++j) {
      const int c = layout_.reduce_nodes[span.first_reduction + static_cast<int>(j)];
      if (is_max(c) || numel(shape_of(c)) != total) return false;
      // Written by its node (2), or a copy of a load (1: the general pass copies it tile by
      // tile; here in one piece after the row).
      if (redirect(S, j, redir)) sc.direct[j] = 2;
      else if (layout_.reduce_slot[span.first_reduction + static_cast<int>(j)] < static_cast<int>(span.loads))
        sc.direct[j] = 1;
      else return false;
    }
    return true;
  }
  /// The usual stage without the general bookkeeping of a pass (`plan_plain_pass` chose it
  /// and planned it in `sc`): its `total` elements as one row on this thread. The same row
  /// body on the same pointers as `run_one_row` (the same bits).
  void run_plain_pass(int S, index_t total, scratch& sc) {
    const stage_span span = span_of(S);
    const int c0 = span.first_node, l0 = span.first_load, w0 = span.first_store, r0 = span.first_reduction;
    const std::size_t loads = span.loads, nodes = span.nodes;
    const int* const redir = sc.redir.data();
    T* const regs = sc.regs.data();
    for (std::size_t j = 0; j < loads; ++j) {
      sc.lrow[j] = value(layout_.load_nodes[l0 + static_cast<int>(j)]).data_ptr();
      sc.lstep[j] = 1;
    }
    for (std::size_t j = 0; j < span.stores; ++j) {
      const int c = layout_.store_nodes[w0 + static_cast<int>(j)];
      value(c) = empty<T>(shape_of(c));
    }
    for (std::size_t j = 0; j < span.reductions; ++j) {
      const int c = layout_.reduce_nodes[r0 + static_cast<int>(j)];
      value(c) = empty<T>(shape_of(c));
    }
    for (std::size_t q = 0; q < nodes; ++q) {
      const int cq = c0 + static_cast<int>(q);
      const int sw = layout_.store_index[cq];
      const int reg = layout_.tile_register[cq];
      T* to = reg >= 0 ? regs + static_cast<std::ptrdiff_t>(reg) * tile_elems : nullptr;
      index_t step = 0;
      if (sw >= 0) to = value(layout_.store_nodes[w0 + sw]).data_ptr(), step = 1;
      else if (redir[q] >= 0) to = value(layout_.reduce_nodes[r0 + redir[q]]).data_ptr(), step = 1;
      sc.dst[q] = to;
      sc.step[q] = step;
    }
    sc.slot[loads + nodes] = nullptr;  // the second operand of a unary node
    const row_args<T> args{nodes_.state,   sc.slot.data(), sc.lrow.data(), sc.lstep.data(), sc.dst.data(),
                           sc.step.data(), nullptr,        nullptr,        nullptr};
    bodies_[S](args, total);
    for (std::size_t j = 0; j < span.reductions; ++j)
      if (sc.direct[j] == 1) {
        const T* from = sc.lrow[static_cast<std::size_t>(layout_.reduce_slot[r0 + static_cast<int>(j)])];
        std::copy(from, from + total, value(layout_.reduce_nodes[r0 + static_cast<int>(j)]).data_ptr());
      }
  }

  // ---- a pass: its state and its rows ----------------------------------------------------

  /// Rows [r0, r1) of a pass's space, a row group's block (`first`: the space's first).
  struct row_block {
    index_t r0, r1;
    bool first;
  };
  /// One pass of stage `S` (see `start_pass`): the stage's lists, the scratch it runs on (the
  /// thread's, or in a row group the stage's own), and this thread's `work` on it.
  struct pass_state {
    int S;
    stage_span span;
    scratch& sc;
    work main;
    row_body_fn<T> body;
    const int* load_nodes;
    const int* store_nodes;
    const int* reduce_nodes;
    const int* tile_register;  ///< per element-wise node
    const int* store_index;    ///< per element-wise node
    const int* store_slot;     ///< per store
    const int* reduce_slot;    ///< per reduction
  };
  /// Stage `S`'s pass set up on `sc_` (fitted to it): divisors, the reductions' kinds and
  /// state, and which node writes straight into a reduction. In a row group (`block`): the
  /// block's rows only, its sums over everything carried on from the block before (a
  /// row-form sum restarts at the group's first block only).
  pass_state start_pass(int S, scratch& sc_, const row_block* block) {
    const stage_span span = span_of(S);
    scratch& sc = fit_scratch(S, span, sc_);
    T* const regs = sc.regs.data();
    T* const loadbuf = regs + static_cast<std::ptrdiff_t>(layout_.register_count[S]) * tile_elems;
    // Buffers only grow (`fit_scratch`); every entry a pass reads is written first.
    sc.slot[span.loads + span.nodes] = nullptr;  // the second operand of a unary node
    std::fill_n(sc.divisor.begin(), span.loads, T(1));
    std::fill_n(sc.held.begin(), span.operand_count(), nullptr);  // set by `hold_in_buffer` in a row group
    // A reduction to its own input's shape (`direct`) whose input is an element-wise node of
    // the stage not stored otherwise has that node write straight into its output (instead of
    // a tile register copied out per tile): `direct` 2, `redir[q]` the reduction.
    std::fill_n(sc.redir.begin(), span.nodes, -1);
    for (std::size_t j = 0; j < span.reductions; ++j) {
      if ((sc.direct[j] == 1 || sc.direct[j] == 2) && redirect(S, j, sc.redir.data())) sc.direct[j] = 2;
    }
    mark_whole_loads(span, sc);
    const int* const reduce_nodes = layout_.reduce_nodes + span.first_reduction;
    for (std::size_t j = 0; j < span.reductions; ++j) {
      sc.rmax[j] = is_max(reduce_nodes[j]);
      if (!block || block->first) sc.cur[j] = nullptr;  // a row-form sum's current output
      sc.colf[j] = 0;                                   // a column-form sum (set up by `start_column_sums`)
      sc.per_row[j] = 0;                                // a row's own output (set by `mark_row_outputs`)
    }
    const work main{regs,           loadbuf,         sc.slot.data(),  sc.dst.data(),  sc.step.data(),
                    sc.lrow.data(), sc.lstep.data(), sc.maxes.data(), sc.rsum.data(), sc.cur.data(),
                    false};
    return {S,
            span,
            sc,
            main,
            bodies_[S],
            layout_.load_nodes + span.first_load,
            layout_.store_nodes + span.first_store,
            reduce_nodes,
            layout_.tile_register + span.first_node,
            layout_.store_index + span.first_node,
            layout_.store_slot + span.first_store,
            layout_.reduce_slot + span.first_reduction};
  }

  /// `sc.whole`: the loads that a store or a reduction reads through the per-tile hook (its
  /// slot is a load's): a broadcast one is filled over the whole tile, where the row body reads
  /// one batch of it (see `set_row_loads`).
  void mark_whole_loads(const stage_span& span, scratch& sc) const {
    std::fill_n(sc.whole.begin(), span.loads, char{0});
    const auto mark = [&](int slot) {
      if (slot >= 0 && static_cast<std::size_t>(slot) < span.loads) sc.whole[static_cast<std::size_t>(slot)] = 1;
    };
    for (std::size_t j = 0; j < span.stores; ++j) mark(layout_.store_slot[span.first_store + static_cast<int>(j)]);
    // (a reduction set before the loop is no hook's: a broadcast load it reduces, the loss's
    // gradient, stays one batch, and its rows can run in calls, `rows_in_calls`)
    for (std::size_t j = 0; j < span.reductions; ++j)
      if (sc.direct[j] != set_before) mark(layout_.reduce_slot[span.first_reduction + static_cast<int>(j)]);
  }

  /// The per-tile work the row body hands back: loads to divide (a mean's gradient broadcast
  /// back), stores of one element, reductions.
  struct tile_hooks {
    const T** slot;
    const index_t* lstep;
    const T* divisor;
    T* loadbuf;
    std::size_t loads;
    const index_t* base;
    T* const* wp;
    running_max<T>* maxes;
    running_sum<T>* rsum;
    const hook_step* steps;  ///< the work of `after`, in order (`plan_hook_steps`)
    std::size_t step_count;
    const index_t* rs = nullptr;  ///< per operand: its advance per row (rows after the first of a call)
    /// Operand `q`'s offset at row `row` of the call.
    [[gnu::always_inline]] index_t at(std::size_t q, index_t row) const {
      return row == 0 ? base[q] : base[q] + row * rs[q];
    }
    static void before(void* p, index_t, index_t, index_t m) {
      auto& h = *static_cast<tile_hooks*>(p);
      for (std::size_t j = 0; j < h.loads; ++j)
        if (h.lstep[j] != 0 && h.divisor[j] != T(1)) {
          T* const buf = h.loadbuf + j * tile_elems;
          tile_div(h.slot[j], h.divisor[j], buf, m);
          h.slot[j] = buf;
        }
    }
    // A planned list, not the stores' and reductions' cases tested afresh at every tile: at a
    // softmax's rows of one tile the hook runs once per row and stage.
    static void after(void* p, index_t row, index_t i, index_t m) {
      auto& h = *static_cast<tile_hooks*>(p);
      using what = typename hook_step::what;
      for (const hook_step *s = h.steps, *e = h.steps + h.step_count; s != e; ++s) {
        const T* src = h.slot[s->slot];
        switch (s->k) {
          case what::store_one: h.wp[s->out][h.at(s->q, row)] = src[0]; break;
          case what::row_max: row_max_into(src, h.wp[s->out] + h.at(s->q, row), m); break;
          case what::row_sum: h.wp[s->out][h.at(s->q, row)] = running_sum<T>::sum_contiguous(src, m); break;
          case what::feed_max: h.maxes[s->r].add(src, m); break;
          case what::feed_sum: h.rsum[s->r].add(src, m); break;
          case what::copy: std::copy(src, src + m, h.wp[s->out] + h.at(s->q, row) + i); break;
          case what::max_into: tile_reduce_into<true>(src, h.wp[s->out] + h.at(s->q, row) + i, m); break;
          case what::sum_into: tile_reduce_into<false>(src, h.wp[s->out] + h.at(s->q, row) + i, m); break;
        }
      }
    }
    /// A row's max of its `m` values at `src` (the row in one tile) into its own output `out`:
    /// the value the running max fed this row alone gives, without its state. (A row's sum is
    /// `running_sum::sum_contiguous` of it, the same way.)
    static void row_max_into(const T* src, T* out, index_t m) {
      running_max<T> r;
      r.add(src, m);
      *out = lanes::max(*out, r.total());
    }
  };

  /// What every row of a pass shares: its operands' steps along the row (`is`: 0, broadcast;
  /// 1, contiguous), whence each element-wise node's destination (`scratch::dst_operand`) and
  /// whether the row body calls the tile hooks. Set up once per pass (`plan_rows`), so that a
  /// row only offsets its pointers (`run_planned_row`): at a softmax's short rows, setting up
  /// what every row shares cost as much as a row's work.
  struct row_plan {
    const index_t* is;
    std::size_t memory_nodes;  ///< the nodes writing to memory: `scratch::mem_nodes[0, memory_nodes)`
    bool scaled;               ///< a contiguous load is a mean's gradient to divide tile by tile
    bool one_element_store;    ///< a store broadcast along the row takes its value from the hook
    std::size_t hook_steps;    ///< the per-tile hook's work: `scratch::steps[0, hook_steps)`
  };
  /// The per-tile hook's work for the pass (steps `is`), into `p.sc.steps`: the stores
  /// broadcast along the row, then each reduction but those set before the loop or written in
  /// place by the row body, in the order `after` once tested them. Returns their count.
  static std::size_t plan_hook_steps(const pass_state& p, const index_t* is) {
    scratch& sc = p.sc;
    using what = typename hook_step::what;
    grow(p.span.stores + p.span.reductions, sc.steps);
    std::size_t n = 0;
    for (std::size_t j = 0; j < p.span.stores; ++j)
      if (is[p.span.store_operand(j)] == 0)
        sc.steps[n++] = {what::store_one, p.store_slot[j], j, p.span.store_operand(j), 0};
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      const std::size_t q = p.span.reduction_operand(j);
      const bool mx = sc.rmax[j];
      what k{};
      if (sc.direct[j] == set_before || (is[q] != 0 && sc.direct[j] == 2)) continue;
      if (is[q] == 0 && sc.per_row[j]) k = mx ? what::row_max : what::row_sum;
      else if (is[q] == 0) k = mx ? what::feed_max : what::feed_sum;
      else if (sc.direct[j]) k = what::copy;
      else k = mx ? what::max_into : what::sum_into;
      sc.steps[n++] = {k, p.reduce_slot[j], p.span.stores + j, q, j};
    }
    return n;
  }
  /// The pass's `row_plan` for steps `is` (written into `p.sc` before any thread reads it).
  row_plan plan_rows(const pass_state& p, const index_t* is) const {
    scratch& sc = p.sc;
    grow(p.span.nodes, sc.dst_operand, sc.dst_base, sc.mem_nodes);
    row_plan plan{is, 0, false, false, plan_hook_steps(p, is)};
    for (std::size_t j = 0; j < p.span.loads; ++j) plan.scaled = plan.scaled || (is[j] != 0 && sc.divisor[j] != T(1));
    for (std::size_t q = 0; q < p.span.nodes; ++q) {
      const int sw = p.store_index[q], rj = sc.redir[q];
      const std::size_t so = sw >= 0 ? p.span.store_operand(static_cast<std::size_t>(sw)) : 0;
      const std::size_t ro = rj >= 0 ? p.span.reduction_operand(static_cast<std::size_t>(rj)) : 0;
      plan.one_element_store = plan.one_element_store || (sw >= 0 && is[so] == 0);
      int operand = -1;
      T* to = nullptr;
      if (rj >= 0 && is[ro] != 0)
        operand = static_cast<int>(ro), to = sc.wp[p.span.stores + static_cast<std::size_t>(rj)];
      else if (sw >= 0 && is[so] != 0) operand = static_cast<int>(so), to = sc.wp[static_cast<std::size_t>(sw)];
      sc.dst_operand[q] = operand;
      sc.dst_base[q] = to;
      if (operand >= 0) sc.mem_nodes[plan.memory_nodes++] = static_cast<int>(q);
    }
    return plan;
  }
  /// A work's rows under a plan: the per-tile hooks and the row body's arguments, the same
  /// for every row but its offsets (`tile_hooks::base`).
  struct bound_rows {
    tile_hooks hooks;
    row_args<T> args;
  };
  /// `w`'s steps, its fixed destinations (tile registers) and its hooks under `plan`, into `b`
  /// (which `b.args` points into: made in place).
  void bind_rows(const pass_state& p, const row_plan& plan, work& w, bound_rows& b) const {
    for (std::size_t j = 0; j < p.span.loads; ++j) w.lstep[j] = plan.is[j] != 0 ? 1 : 0;
    for (std::size_t q = 0; q < p.span.nodes; ++q) {
      const bool memory = p.sc.dst_operand[q] >= 0;
      w.step[q] = memory ? 1 : 0;
      if (!memory)
        w.dst[q] =
            p.tile_register[q] >= 0 ? w.regs + static_cast<std::ptrdiff_t>(p.tile_register[q]) * tile_elems : nullptr;
    }
    scratch& sc = p.sc;
    b.hooks = tile_hooks{w.slot,  w.lstep, sc.divisor.data(), w.loadbuf,      p.span.loads, nullptr, sc.wp.data(),
                         w.maxes, w.rsum,  sc.steps.data(),   plan.hook_steps};
    b.args = row_args<T>{nodes_.state,
                         w.slot,
                         w.lrow,
                         w.lstep,
                         w.dst,
                         w.step,
                         plan.scaled ? &tile_hooks::before : nullptr,
                         plan.hook_steps > 0 ? &tile_hooks::after : nullptr,
                         &b.hooks};
  }
  /// One row of `n` elements on its own (`base`, `is`: see `run_planned_row`).
  void run_row(const pass_state& p, work& w, const index_t* base, index_t n, const index_t* is) const {
    const row_plan plan = plan_rows(p, is);
    bound_rows b;
    bind_rows(p, plan, w, b);
    run_planned_row(p, plan, w, b, base, n);
  }
  /// One row of a pass planned by `plan_rows` (`w` bound into `b` by `bind_rows`): `base`
  /// offsets, `n` elements. Its loads and memory destinations offset, its reductions started,
  /// the stage's row body over its tiles, its reductions ended.
  void run_planned_row(const pass_state& p, const row_plan& plan, work& w, bound_rows& b, const index_t* base,
                       index_t n) const {
    set_row_loads(p, w, base, n, plan.is);
    const scratch& sc = p.sc;
    for (std::size_t k = 0; k < plan.memory_nodes; ++k) {
      const auto q = static_cast<std::size_t>(sc.mem_nodes[k]);
      w.dst[q] = sc.dst_base[q] + base[sc.dst_operand[q]];
    }
    start_row_reductions(p, w, base, plan.is);
    b.hooks.base = base;
    p.body(b.args, n);
    end_row_reductions(p, w, base, n, plan.is);
  }
  /// The row's loads: a contiguous one read in place, a broadcast one (step 0) filled into
  /// its load buffer: one SIMD batch, which the row body reads at every batch of the row (a
  /// row-scalar such as a row's max costs one store per row, not one per element), or the
  /// tile where a hook reads it (`sc.whole`).
  [[gnu::always_inline]] static void set_row_loads(const pass_state& p, work& w, const index_t* base, index_t n,
                                                   const index_t* is) {
    const T* const* const lp = p.sc.lp.data();
    const T* const divisor = p.sc.divisor.data();
    const char* const whole = p.sc.whole.data();
    for (std::size_t j = 0; j < p.span.loads; ++j) {
      if (is[j] == 0) {
        T* const buf = w.loadbuf + j * tile_elems;
        const T v = lp[j][base[j]] / divisor[j];
        if (whole[j]) std::fill(buf, buf + std::min(n, tile_elems), v);
        else simd<T>(v).store_unaligned(buf);
        w.lrow[j] = buf;
      } else {
        w.lrow[j] = lp[j] + base[j];
      }
    }
  }
  /// The reductions' state at the row's start: a max starts afresh; a row-form sum moving on
  /// to its next output stores the total of the one before.
  [[gnu::always_inline]] static void start_row_reductions(const pass_state& p, work& w, const index_t* base,
                                                          const index_t* is) {
    const scratch& sc = p.sc;
    T* const* const wp = sc.wp.data();
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      const std::size_t q = p.span.reduction_operand(j);
      if (sc.per_row[j]) continue;  // reduced by the hook at once
      if (sc.rmax[j]) {
        w.maxes[j].reset();
      } else if (is[q] == 0 && sc.direct[j] != set_before && wp[p.span.stores + j] + base[q] != w.cur[j]) {
        if (w.cur[j]) *w.cur[j] = w.rsum[j].total();
        w.rsum[j].reset();
        w.cur[j] = wp[p.span.stores + j] + base[q];
      }
    }
  }
  /// The reductions at the row's end: a column-form sum takes the row; a max to one element
  /// per row takes the row's max (in a block of a parallel pass, kept for `merge_block_reductions`).
  [[gnu::always_inline]] static void end_row_reductions(const pass_state& p, work& w, const index_t* base, index_t n,
                                                        const index_t* is) {
    scratch& sc = p.sc;
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      const std::size_t q = p.span.reduction_operand(j);
      if (is[q] != 0) {
        if (sc.colf[j]) sc.cols[j].row_done(base[q] / n);
      } else if (sc.rmax[j] && !w.blocks && sc.direct[j] != set_before && !sc.per_row[j]) {
        T* out = sc.wp[p.span.stores + j] + base[q];
        *out = lanes::max(*out, w.maxes[j].total());
      }
    }
  }
  /// The sums' totals, once every row has passed (in a row group's block: a sum over
  /// everything written so far, and carried on).
  static void finish_sums(const pass_state& p) {
    scratch& sc = p.sc;
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      if (sc.cur[j]) *sc.cur[j] = sc.rsum[j].total();
      if (sc.colf[j]) sc.cols[j].finish();
    }
  }

  // ---- strategy: one contiguous row ------------------------------------------------------

  /// Operands of one shape: one flat row of the space's elements, no strides to compute; on
  /// this thread, or in blocks on all threads where it is long (`run_one_row_in_blocks`).
  void run_one_row(const pass_state& p, const shape& space) {
    scratch& sc = p.sc;
    const std::size_t operands_n = p.span.operand_count();
    const index_t total = numel(space);
    std::fill_n(sc.is.begin(), operands_n, total == 1 ? 0 : 1);
    std::fill_n(sc.base.begin(), operands_n, 0);
    for (std::size_t j = 0; j < p.span.loads; ++j) sc.lp[j] = value(p.load_nodes[j]).data_ptr();
    for (std::size_t j = 0; j < p.span.stores; ++j) sc.wp[j] = value(p.store_nodes[j]).data_ptr();
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      sc.wp[p.span.stores + j] = value(p.reduce_nodes[j]).data_ptr();
      if (value(p.reduce_nodes[j]).numel() == 1) sc.is[p.span.reduction_operand(j)] = 0;
    }
    if (total > 0) {
      const block_split split = split_pow2(total, sum_chunk<T>, parallel_grain());
      work main = p.main;
      if (split.count <= 1) run_row(p, main, sc.base.data(), total, sc.is.data());
      else run_one_row_in_blocks(p, split, total);
    }
    finish_sums(p);
  }

  /// A `work` on a thread's own buffers `bs` (sized here for pass `p`), with the given
  /// reduction state.
  work block_work(block_scratch& bs, const pass_state& p, running_max<T>* maxes, running_sum<T>* rsum, T** cur) const {
    const int nregs = layout_.register_count[p.S];
    const std::size_t loads = p.span.loads, nodes = p.span.nodes;
    const auto need = static_cast<std::size_t>((nregs + static_cast<int>(loads)) * tile_elems);
    if (bs.regs.size() < need) bs.regs.resize(need);
    grow(loads + nodes + 1, bs.slot);
    bs.slot[loads + nodes] = nullptr;  // the second operand of a unary node
    grow(nodes, bs.dst, bs.step);
    grow(loads, bs.lrow, bs.lstep);
    grow(p.span.operand_count(), bs.base);
    return work{bs.regs.data(),
                bs.regs.data() + static_cast<std::ptrdiff_t>(nregs) * tile_elems,
                bs.slot.data(),
                bs.dst.data(),
                bs.step.data(),
                bs.lrow.data(),
                bs.lstep.data(),
                maxes,
                rsum,
                cur,
                true};
  }

  /// The one row of `total` elements on all threads: blocks of 2^j sum chunks, each with its
  /// own tile registers and running reductions, merged by `merge_block_reductions`.
  void run_one_row_in_blocks(const pass_state& p, block_split split, index_t total) {
    const std::size_t reductions = p.span.reductions, operands_n = p.span.operand_count();
    const auto parts = static_cast<std::size_t>(split.count) * reductions;
    std::vector<running_max<T>> maxes(parts);
    std::vector<running_sum<T>> rsum(parts);
    std::vector<T*> cur(parts, nullptr);
    const index_t* const is = p.sc.is.data();
    const row_plan plan = plan_rows(p, is);
    parallel_blocks(split.count, [&](index_t b) {
      thread_local block_scratch bs;  // this thread's registers and row pointers
      const auto r = static_cast<std::size_t>(b) * reductions;
      work w = block_work(bs, p, maxes.data() + r, rsum.data() + r, cur.data() + r);
      bound_rows bound;
      bind_rows(p, plan, w, bound);
      const index_t b0 = b * split.size;
      for (std::size_t q = 0; q < operands_n; ++q) bs.base[q] = is[q] != 0 ? b0 : 0;
      run_planned_row(p, plan, w, bound, bs.base.data(), std::min(split.size, total - b0));
    });
    merge_block_reductions(p, split.count, maxes.data(), rsum.data());
  }
  /// The blocks' reductions to one element, combined as one thread's would be: full sums by
  /// `sum_of_block_sums` and maxes lane by lane in block order by `max_of_blocks`
  /// (loops/tile_reductions.hpp, which the run-time programs' loops share).
  static void merge_block_reductions(const pass_state& p, index_t blocks, const running_max<T>* maxes,
                                     const running_sum<T>* rsum) {
    const std::size_t reductions = p.span.reductions;
    const scratch& sc = p.sc;
    std::vector<T> totals(static_cast<std::size_t>(blocks));
    for (std::size_t j = 0; j < reductions; ++j) {
      if (sc.is[p.span.reduction_operand(j)] != 0) continue;  // written in place (a reduction to its own shape)
      T* const out = sc.wp[p.span.stores + j];
      auto at = [&](index_t b) { return static_cast<std::size_t>(b) * reductions + j; };
      if (sc.rmax[j])
        *out = lanes::max(*out, max_of_blocks<T>(
                                    blocks, [&](index_t b) -> auto& { return maxes[at(b)]; }));
      else
        *out = sum_of_block_sums<T>(
            blocks, [&](index_t b) -> auto& { return rsum[at(b)]; }, totals.data());
    }
  }

  // ---- strategy: strided rows ------------------------------------------------------------

  /// Operands broadcast over the space `it`, walked in rows along its innermost dim of size
  /// > 1, each row in tiles: rows that write disjoint elements in blocks of rows on all
  /// threads (`rows_write_apart`), the others in order on this one. In a row group (`block`):
  /// the block's rows only, in order.
  void run_strided_rows(const pass_state& p, const shape& it, const row_block* block) {
    set_operand_strides(p, it);
    const shape space = walked_space(p, it, block);
    start_column_sums(p, it, space);
    mark_row_outputs(p, space);
    scratch& sc = p.sc;
    const std::size_t operands_n = p.span.operand_count();
    // The operands' strides, steps along the rows (as `for_each_row_n` hands them to every
    // row) and row offsets live in the scratch: a row group runs this per block and stage,
    // which allocated them each time.
    grow(operands_n, sc.sp, sc.inner);
    for (std::size_t q = 0; q < operands_n; ++q) sc.sp[q] = &sc.st[q];
    const index_t rows = row_count(space), len = space.empty() ? 1 : std::max<index_t>(space.back(), 1);
    const index_t grain_rows = std::max<index_t>(1, parallel_grain() / len);
    for (std::size_t q = 0; q < operands_n; ++q) sc.is[q] = space.empty() ? 0 : sc.st[q].back();
    const row_plan plan = plan_rows(p, sc.is.data());
    if (!block && rows_write_apart(p, space, rows, grain_rows)) {
      parallel_for(rows, grain_rows, [&](index_t r0, index_t r1) {
        thread_local block_scratch bs;
        work w = block_work(bs, p, nullptr, nullptr, nullptr);
        bound_rows bound;
        bind_rows(p, plan, w, bound);
        grow(operands_n, bs.inner);
        std::fill_n(bs.base.begin(), operands_n, 0);
        for_each_row_n(
            space, operands_n, sc.sp.data(), bs.base.data(), bs.inner.data(),
            [&](const index_t* b, index_t n, const index_t*) { run_planned_row(p, plan, w, bound, b, n); }, r0, r1);
      });
      return;
    }
    work main = p.main;
    bound_rows bound;
    bind_rows(p, plan, main, bound);
    // A value held in a block buffer has the block's first row at its start.
    for (std::size_t q = 0; q < operands_n; ++q) sc.base[q] = sc.held[q] && block ? -block->r0 * len : 0;
    const index_t r0 = block ? block->r0 : 0, r1 = block ? block->r1 : rows;
    if (rows_in_calls(p, plan, space)) {
      run_rows_in_calls(p, plan, main, bound, len, r0, r1);
    } else {
      for_each_row_n(
          space, operands_n, sc.sp.data(), sc.base.data(), sc.inner.data(),
          [&](const index_t* b, index_t n, const index_t*) { run_planned_row(p, plan, main, bound, b, n); }, r0, r1);
    }
    finish_sums(p);
  }
  /// Whether the rows of walked space `space` (a pass planned by `plan`) run `row_call_rows`
  /// at a time through the row body (`run_rows_in_calls`): rows of one tile each, in a 2-D
  /// space (each operand a row stride), where no row needs its own set-up or wrap-up in the
  /// runner: no load to divide tile by tile or to widen to the tile for a hook, no column-form
  /// sum, and each reduction a row's own output taken at once (`mark_row_outputs`), one
  /// that every row feeds (a sum over all of them), to its input's shape, or set before.
  static bool rows_in_calls(const pass_state& p, const row_plan& plan, const shape& space) {
    const scratch& sc = p.sc;
    if (space.size() != 2 || space.back() > tile_elems || plan.scaled) return false;
    for (std::size_t j = 0; j < p.span.loads; ++j)
      if (plan.is[j] == 0 && sc.whole[j]) return false;
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      const std::size_t q = p.span.reduction_operand(j);
      if (sc.colf[j]) return false;
      if (plan.is[q] == 0 && !sc.per_row[j] && sc.direct[j] != set_before && (sc.rmax[j] || sc.st[q][0] != 0))
        return false;
    }
    return true;
  }
  /// The most rows of one call of the row body: their broadcast batches (`fill_row_batches`)
  /// stay in L1.
  static constexpr index_t row_call_rows = 64;
  /// Rows [r0, r1) of `len` elements (`rows_in_calls`), `row_call_rows` per call of the row
  /// body: each call's first row set up as `run_planned_row` does, the others a row stride
  /// on (`row_args::lrs`, `drs`; the hooks' `tile_hooks::rs`). The same nodes on the same
  /// values, the reductions fed the same rows in order: the bits of a call per row.
  void run_rows_in_calls(const pass_state& p, const row_plan& plan, work& w, bound_rows& b, index_t len, index_t r0,
                         index_t r1) const {
    scratch& sc = p.sc;
    const std::size_t operands_n = p.span.operand_count(), loads = p.span.loads, nodes = p.span.nodes;
    grow(operands_n, sc.rs);
    grow(loads, sc.lrs);
    grow(nodes, sc.drs);
    grow(loads * static_cast<std::size_t>(row_call_rows * simd<T>::size), sc.row_batches);
    index_t* const rs = sc.rs.data();
    for (std::size_t q = 0; q < operands_n; ++q) rs[q] = sc.st[q][0];
    // `sc.base` holds each operand's offset before row 0 (a held value's shift): row r0's.
    for (std::size_t q = 0; q < operands_n; ++q) sc.base[q] += r0 * rs[q];
    std::fill_n(sc.drs.begin(), nodes, 0);
    for (std::size_t k = 0; k < plan.memory_nodes; ++k) {
      const auto q = static_cast<std::size_t>(sc.mem_nodes[k]);
      sc.drs[q] = rs[sc.dst_operand[q]];
    }
    b.hooks.rs = rs;
    b.args.lrs = sc.lrs.data();
    b.args.drs = sc.drs.data();
    for (index_t c0 = r0; c0 < r1; c0 += row_call_rows) {
      const index_t n_rows = std::min(row_call_rows, r1 - c0);
      const index_t* const base = sc.base.data();
      set_row_loads(p, w, base, len, plan.is);
      fill_row_batches(p, w, base, n_rows);
      for (std::size_t k = 0; k < plan.memory_nodes; ++k) {
        const auto q = static_cast<std::size_t>(sc.mem_nodes[k]);
        w.dst[q] = sc.dst_base[q] + base[sc.dst_operand[q]];
      }
      start_row_reductions(p, w, base, plan.is);
      b.hooks.base = base;
      b.args.rows = n_rows;
      p.body(b.args, len);
      for (std::size_t q = 0; q < operands_n; ++q) sc.base[q] += n_rows * rs[q];
    }
    b.args.rows = 1;
  }
  /// The call's advance per row of each load (`row_args::lrs`): a contiguous load's row
  /// stride; a broadcast load's batch of each of the call's `n_rows` rows, filled here as
  /// `set_row_loads` fills the first (0 where every row reads the same value).
  static void fill_row_batches(const pass_state& p, work& w, const index_t* base, index_t n_rows) {
    scratch& sc = p.sc;
    constexpr auto W = static_cast<index_t>(simd<T>::size);
    const index_t* const rs = sc.rs.data();
    for (std::size_t j = 0; j < p.span.loads; ++j) {
      sc.lrs[j] = rs[j];
      if (sc.is[j] != 0 || rs[j] == 0) continue;
      T* const batches = sc.row_batches.data() + static_cast<index_t>(j) * row_call_rows * W;
      const T* const src = sc.lp[j] + base[j];
      for (index_t k = 0; k < n_rows; ++k) simd<T>(src[k * rs[j]] / sc.divisor[j]).store_unaligned(batches + k * W);
      w.lrow[j] = batches;
      sc.lrs[j] = W;
    }
  }
  /// Each operand's data and strides over `it`: a load that broadcasts a reduction back reads
  /// the reduction's value with its reduced dims kept (and divides a mean's gradient by the
  /// count); a smaller store rides along (the same value rewritten); a reduction is seen
  /// with `it`'s rank (`sum_view`).
  void set_operand_strides(const pass_state& p, const shape& it) {
    scratch& sc = p.sc;
    auto& st = sc.st;
    for (std::size_t j = 0; j < p.span.loads; ++j) {
      const int c = p.load_nodes[j];
      if (sc.held[j]) {
        st[j] = contiguous_strides(it);
        sc.lp[j] = sc.held[j];
      } else if (desc(c).kind == gkind::unreduce) {
        const tensor<T>& src = value(children_of(c)[0]);
        const shape& to = shape_of(c);
        const shape ks = keepdim_shape(to, desc(c).raxis);
        st[j] = broadcast_strides(alias(src, ks, contiguous_strides(ks), src.offset()), it);
        sc.lp[j] = src.data_ptr();
        // NOLINTNEXTLINE(bugprone-integer-division): exact: a sum's output count divides its input count
        if (is_mean(c)) sc.divisor[j] = static_cast<T>(numel(to) / std::max<index_t>(numel(ks), 1));  // eager: g / n
      } else {
        st[j] = broadcast_strides(value(c), it);
        sc.lp[j] = value(c).data_ptr();
      }
    }
    for (std::size_t j = 0; j < p.span.stores; ++j) {
      const std::size_t q = p.span.store_operand(j);
      st[q] = sc.held[q] ? contiguous_strides(it) : broadcast_strides(value(p.store_nodes[j]), it);
      sc.wp[j] = sc.held[q] ? sc.held[q] : value(p.store_nodes[j]).data_ptr();
    }
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      const int c = p.reduce_nodes[j];
      sc.wp[p.span.stores + j] = value(c).data_ptr();
      const shape view_shape = sum_view(c, it);
      st[p.span.reduction_operand(j)] =
          broadcast_strides(alias(value(c), view_shape, contiguous_strides(view_shape), 0), it);
    }
  }
  /// The space the rows walk, the operands' strides rewritten to it: one 1-D row when every
  /// operand covers the whole space (or a reduction covers none of it), else `it` without its
  /// dims of size 1 (they play no part: rows run along the innermost dim of size > 1, which
  /// decides the form of a sum, core/accumulate.hpp, as it does in eager mode). Its phases
  /// are inlined into one body.
  shape walked_space(const pass_state& p, const shape& it, const row_block* block) const {
    if (!block && covers_whole_space(p, it)) return walk_one_row(p, it);
    if (std::find(it.begin(), it.end(), index_t{1}) != it.end()) return walk_without_unit_dims(p, it);
    return it;
  }
  /// Whether every stride of `x` is 0.
  [[gnu::always_inline]] static bool all_zero(const strides& x) {
    return std::all_of(x.begin(), x.end(), [](index_t v) { return v == 0; });
  }
  /// Whether every operand covers the whole space `it` (contiguous strides), or is a reduction
  /// that covers none of it (all strides 0).
  [[gnu::always_inline]] static bool covers_whole_space(const pass_state& p, const shape& it) {
    const auto& st = p.sc.st;
    const std::size_t operands_n = p.span.operand_count(), first_reduction = p.span.reduction_operand(0);
    const strides full = contiguous_strides(it);
    bool flat = true;
    for (std::size_t q = 0; q < operands_n && flat; ++q)
      flat = st[q] == full || (q >= first_reduction && all_zero(st[q]));
    return flat;
  }
  /// `it` as one 1-D row, each operand's strides rewritten to it (0 for a reduction to one value).
  [[gnu::always_inline]] static shape walk_one_row(const pass_state& p, const shape& it) {
    auto& st = p.sc.st;
    const std::size_t operands_n = p.span.operand_count();
    for (std::size_t q = 0; q < operands_n; ++q)
      st[q] = strides{all_zero(st[q]) && numel(it) != 1 ? 0 : (numel(it) == 1 ? 0 : 1)};
    return shape{numel(it)};
  }
  /// `it` without its dims of size 1, and each operand's strides without theirs.
  [[gnu::always_inline]] static shape walk_without_unit_dims(const pass_state& p, const shape& it) {
    auto& st = p.sc.st;
    const std::size_t operands_n = p.span.operand_count();
    shape space;
    for (std::size_t k = 0; k < it.size(); ++k)
      if (it[k] != 1) space.push_back(it[k]);
    for (std::size_t q = 0; q < operands_n; ++q) {
      strides t;
      for (std::size_t k = 0; k < it.size(); ++k)
        if (it[k] != 1) t.push_back(st[q][k]);
      st[q] = std::move(t);
    }
    return space;
  }
  /// A sum whose output runs along the rows (the innermost dim kept) is in the column form:
  /// its partial sums are the output, the chunks and the tree are kept by `column_sums`.
  void start_column_sums(const pass_state& p, const shape& it, const shape& space) {
    scratch& sc = p.sc;
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      const std::size_t q = p.span.reduction_operand(j);
      if (sc.rmax[j] || sc.direct[j] || numel(space) == 0 || space.empty() || sc.st[q].back() == 0) continue;
      tensor<T>& out = value(p.reduce_nodes[j]);
      const index_t m = space.back();
      sc.cols[j].start(out.data_ptr(), out.numel() / m, m, numel(it) / out.numel());
      sc.colf[j] = 1;
    }
  }
  /// `sc.per_row`: the reductions to one value per row whose every row has an output of its
  /// own (a row's max or sum: strides along every outer dim of `space` longer than 1), where a
  /// row is one tile. Its tile hook reduces the row at once into the output (`row_max_into`,
  /// or `running_sum::sum_contiguous`) instead of a running reduction reset, fed and totalled
  /// per row: at a softmax's rows of 128 values that bookkeeping cost a fifth of the pass. The
  /// same values in the same order: the same bits.
  static void mark_row_outputs(const pass_state& p, const shape& space) {
    scratch& sc = p.sc;
    if (space.empty() || space.back() > tile_elems) return;
    for (std::size_t j = 0; j < p.span.reductions; ++j) {
      const strides& st = sc.st[p.span.reduction_operand(j)];
      bool own = st.back() == 0 && sc.direct[j] != set_before && !sc.colf[j];
      for (std::size_t d = 0; d + 1 < space.size() && own; ++d) own = space[d] == 1 || st[d] != 0;
      sc.per_row[j] = static_cast<char>(own);
    }
  }
  /// Whether the rows of `space` write disjoint elements (no reduction, every store covering
  /// the space) and are enough for more than one thread.
  static bool rows_write_apart(const pass_state& p, const shape& space, index_t rows, index_t grain_rows) {
    if (p.span.reductions != 0 || split_items(rows, grain_rows).count <= 1) return false;
    for (std::size_t j = 0; j < p.span.stores; ++j)
      if (!(p.sc.st[p.span.store_operand(j)] == contiguous_strides(space))) return false;
    return true;
  }

  // ---- row groups ------------------------------------------------------------------------

  /// Whether stage `S` can join a row group begun at stage `S0` over `space` (the space's rows
  /// walked block by block, each block through every stage of the group before the next): a
  /// block of rows of each value the stage reads from the group is complete once the block
  /// has passed the stages before. So the stage has the same space, no matrix product (but
  /// the group's first), and every reduction either sums or takes the max along the rows (to
  /// one value per row), or is a sum to its own input's shape, or reduces everything to one
  /// value that no stage of the group reads (it is complete only after the last block).
  bool joins_rows(int S, int S0, const shape& space) const {
    if (!has_loop(S) || !(space_of(S) == space)) return false;
    if (S > S0 && layout_.first_matmul[S] != layout_.first_matmul[S + 1]) return false;
    const shape row = keepdim_shape(space, reduce_axis::last);
    for (int j = layout_.first_reduce[S]; j < layout_.first_reduce[S + 1]; ++j) {
      const int c = layout_.reduce_nodes[j];
      if (of_one_element(S, c)) continue;  // set before the loop
      if (!(shape_of(children_of(c)[0]) == space)) return false;
      const shape v = sum_view(c, space);
      if (!(v == space || v == row || numel(v) == 1)) return false;
    }
    for (int j = layout_.first_store[S]; j < layout_.first_store[S + 1]; ++j)
      if (!broadcasts_to(shape_of(layout_.store_nodes[j]), space)) return false;
    for (int j = layout_.first_load[S]; j < layout_.first_load[S + 1]; ++j)
      if (!group_has_read(S, S0, layout_.load_nodes[j], space, row)) return false;
    return true;
  }
  /// Whether load `l` of stage `S` finds a block's rows complete when stages [S0, S) of the
  /// group made its value (or its reduction's, for a broadcast back).
  bool group_has_read(int S, int S0, int l, const shape& space, const shape& row) const {
    const bool unreduce = desc(l).kind == gkind::unreduce;
    const int source = unreduce ? children_of(l)[0] : l;
    for (int P = S0; P < S; ++P) {
      for (int k = layout_.first_reduce[P]; k < layout_.first_reduce[P + 1]; ++k) {
        if (layout_.reduce_nodes[k] != source || of_one_element(P, source)) continue;
        if (numel(shape_of(source)) == 1) return false;  // complete only after the last block
        // Read as it is, a value of one per row must be laid out as the rows: [m, n] * sum(x,
        // -1) broadcasts an [n] sum along the columns, and a row reads every row's sum.
        if (!unreduce && !(shape_of(source) == row)) return false;
      }
      for (int k = layout_.first_store[P]; k < layout_.first_store[P + 1]; ++k)
        if (layout_.store_nodes[k] == source && !(shape_of(source) == space || shape_of(source) == row)) return false;
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
  void run_row_group(int S0, int E) {
    for (int j = layout_.first_matmul[S0]; j < layout_.first_matmul[S0 + 1]; ++j) eval(layout_.matmul_nodes[j]);
    const shape& space = space_of(S0);
    const index_t rows = row_count(space);
    // A reference, which the workers' lambda captures (a name of the thread_local itself
    // would be each worker's own, empty, list).
    thread_local std::vector<int> held_nodes;
    std::vector<int>& held = held_nodes;
    find_held(S0, E, space, held);
    if (make_group_outputs(S0, E, space, held)) {
      const index_t per = group_block_rows(rows, space.back(), get_num_threads());
      const index_t grain_rows = std::max<index_t>(per, parallel_grain() / space.back());
      parallel_for(
          rows, grain_rows, [&](index_t r0, index_t r1) { run_group_rows(S0, E, space, per, held, r0, r1); }, per);
    } else {
      run_group_rows(S0, E, space, group_block_rows(rows, space.back(), 1), held, 0, rows);
    }
    divide_group_means(S0, E, rows);
  }
  /// The values that stages [S0, E) store and only the group reads, into `held`: stored over
  /// the whole `space`, not read by the caller, and neither loaded nor multiplied by a stage
  /// after the group. A block's rows of such a value are complete and read within the block
  /// (`joins_rows`), so each thread holds them in a buffer of one block (`run_group_rows`),
  /// reused by the next: a backward's group stores dy = g * gout and per-element terms that
  /// only its next stage reads, which full tensors would take through memory.
  void find_held(int S0, int E, const shape& space, std::vector<int>& held) const {
    held.clear();
    const auto read_later = [&](int c) {
      for (int S = E; S < layout_.stages; ++S) {
        for (int j = layout_.first_load[S]; j < layout_.first_load[S + 1]; ++j)
          if (layout_.load_nodes[j] == c) return true;
        for (int j = layout_.first_matmul[S]; j < layout_.first_matmul[S + 1]; ++j)
          for (int ch : children_of(layout_.matmul_nodes[j]))
            if (ch == c) return true;
      }
      return false;
    };
    for (int j = layout_.first_store[S0]; j < layout_.first_store[E]; ++j) {
      const int c = layout_.store_nodes[j];
      if (!layout_.kept[c] && shape_of(c) == space && !read_later(c)) held.push_back(c);
    }
  }
  /// The outputs of the group's stages (each in its stage's scratch), no tensor for those
  /// `held`; true where the group's rows are independent: no sum or max over everything, so
  /// blocks of rows in any order.
  bool make_group_outputs(int S0, int E, const shape& space, const std::vector<int>& held) {
    auto& group = group_scratch(static_cast<std::size_t>(E - S0));
    bool apart = true;
    for (int S = S0; S < E; ++S) {
      make_outputs(S, space, group[static_cast<std::size_t>(S - S0)], held);
      for (int j = layout_.first_reduce[S]; j < layout_.first_reduce[S + 1]; ++j)
        apart = apart && (numel(shape_of(layout_.reduce_nodes[j])) != 1 || of_one_element(S, layout_.reduce_nodes[j]));
    }
    return apart;
  }
  /// Rows [r0, r1) of the group on this thread, `per` rows a block, each block through every
  /// stage (a pass over the block's strided rows), its means of one value per row divided;
  /// the values `held` in the thread's buffer, one block of each.
  void run_group_rows(int S0, int E, const shape& space, index_t per, const std::vector<int>& held, index_t r0,
                      index_t r1) {
    auto& group = group_scratch(static_cast<std::size_t>(E - S0));
    const index_t rows = row_count(space), block_elems = per * space.back();
    thread_local std::vector<T> buffer;  // never shrinks: the next call's blocks reuse it
    grow(held.size() * static_cast<std::size_t>(block_elems), buffer);
    for (index_t b = r0; b < r1; b += per) {
      const row_block block{b, std::min(r1, b + per), b == r0};
      for (int S = S0; S < E; ++S) {
        scratch& sc = group[static_cast<std::size_t>(S - S0)];
        if (block.first) set_direct(S, space, sc);
        const pass_state p = start_pass(S, sc, &block);
        hold_in_buffer(p, held, buffer.data(), block_elems);
        run_strided_rows(p, space, &block);
        for (int j = layout_.first_reduce[S]; j < layout_.first_reduce[S + 1]; ++j) {
          const int c = layout_.reduce_nodes[j];
          if (is_mean(c) && value(c).numel() == rows) divide_mean(c, block.r0, block.r1);
        }
      }
    }
  }
  /// `p.sc.held`: the pass's loads and stores of values `held` (the k-th at `buffer + k *
  /// block_elems`).
  static void hold_in_buffer(const pass_state& p, const std::vector<int>& held, T* buffer, index_t block_elems) {
    const auto at = [&](int c) -> T* {
      const auto k = std::find(held.begin(), held.end(), c);
      return k == held.end() ? nullptr : buffer + (k - held.begin()) * block_elems;
    };
    if (held.empty()) return;
    for (std::size_t j = 0; j < p.span.loads; ++j) p.sc.held[j] = at(p.load_nodes[j]);
    for (std::size_t j = 0; j < p.span.stores; ++j) p.sc.held[p.span.store_operand(j)] = at(p.store_nodes[j]);
  }
  /// The group's means over more than one row each, once every block has passed.
  void divide_group_means(int S0, int E, index_t rows) {
    for (int S = S0; S < E; ++S)
      for (int j = layout_.first_reduce[S]; j < layout_.first_reduce[S + 1]; ++j) {
        const int c = layout_.reduce_nodes[j];
        if (is_mean(c) && value(c).numel() != rows) divide_mean(c, 0, value(c).numel());
      }
  }

  const fused_view& layout_;
  const row_body_fn<T>* bodies_;
  node_eval<T>& nodes_;
  stage_choices* choices_;
};

template <Element T>
void fused_runner<T>::run(int n) {
  for (int S = 0; S < n;) {
    const int E = row_group_end(S, n);
    if (E - S >= 2) run_row_group(S, E);
    else stage(S);
    S = std::max(E, S + 1);
  }
}

template <Element T>
void fused_runner<T>::stage(int S) {
  for (int j = layout_.first_matmul[S]; j < layout_.first_matmul[S + 1]; ++j) eval(layout_.matmul_nodes[j]);
  run_loop(S);
}

template <Element T>
void fused_runner<T>::eval(int c) {
  nodes_.values[static_cast<std::size_t>(c)] = nodes_.eval(c);
}

}  // namespace fusegrad::detail
