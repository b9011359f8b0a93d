#pragma once
/// \file fusegrad/jit/program.hpp
/// A compiled IR graph: a tile program (the run-time counterpart of the fused backend).
///
/// Nodes are grouped into steps. A *loop* is one pass over memory for the nodes of one stage
/// that share an iteration shape (a reduction's result is readable one stage later): it walks
/// its space in tiles of `tile` elements, and each instruction runs one op over a whole tile
/// with the op struct's own SIMD `value` (the tile kernels of the compile-time fused
/// backend), reading operands from inputs, from stored values or from small tile registers
/// that stay in L1. Dispatch is per instruction and tile, never per element, and every op's
/// kernel is compiled once for all graphs. Full reductions accumulate inside loops.
///
/// The nodes around reductions over the last dim (softmax and its kin, forward and backward)
/// form a *row step* (row_step.hpp): run row by row, each row in L1 across the passes its
/// reductions need. Other nodes a tile cannot express — broadcasting other than "equal shapes
/// or one element", reductions over other dims, summing a gradient down to a broadcast shape —
/// are *eager steps*: the eager kernel of the same op, on whole tensors, between loops. `call_hook` and
/// `call` nodes are eager steps too: their functions run on whole values.
///
/// A program may run on shapes other than the ones it was lowered for (the shape-generic
/// entries of the kernel cache): `fits(sizes)` says whether its loops still hold.

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fusegrad/core/machine.hpp"
#include "fusegrad/core/reused_vector.hpp"
#include "fusegrad/core/small_vector.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/reduce.hpp"
#include "fusegrad/ir/graph.hpp"
#include "fusegrad/jit/eager_step.hpp"
#include "fusegrad/jit/native_abi.hpp"
#include "fusegrad/jit/op_kernels.hpp"
#include "fusegrad/jit/row_step.hpp"
#include "fusegrad/native/options.hpp"
#include "fusegrad/loops/tile.hpp"
#include "fusegrad/loops/tile_reductions.hpp"

namespace fusegrad::detail::jit {

/// A graph lowered to loops of tile instructions and eager steps; run it on input tensors.
template <Element T>
class program {
 public:
  /// Elements per tile: `tile_elems` (a tile's values stay in L1), except in a run of a loop
  /// that streams at least `many_streams` tensors (reads from memory or stores) and more bytes
  /// than the last-level cache holds (`fg::last_cache_bytes()`, `tile_of`), and has at most one
  /// `costly` op: its tiles grow up to 16384 elements (`tile_for`)
  /// while its tile registers and splats hold at most `tile_bytes` (half of a 512 KiB L2).
  /// There the memory system, not L1, sets the pace, and it keeps up only when each tensor is
  /// read in long runs (a captured 20-layer chain's backward streams 62 tensors, and runs
  /// markedly faster in long tiles). In cache, L2 or L3, long tiles are slower: there L1 sets
  /// the pace again. Measured: docs/jit.md, "Programs".
  static constexpr index_t min_tile = fusegrad::detail::tile_elems, max_tile = 16384;
  static constexpr std::size_t tile_bytes = std::size_t{256} << 10;
  static constexpr int many_streams = 12;
  [[nodiscard]] static constexpr index_t tile_for(int streams, int buffers) noexcept {
    if (streams < many_streams) return min_tile;
    index_t t = max_tile;
    while (t > min_tile &&
           static_cast<std::size_t>(t) * sizeof(T) * static_cast<std::size_t>(std::max(buffers, 1)) > tile_bytes)
      t /= 2;
    return t;
  }

  /// An op as costly as a transcendental (at least 1.5 streamed loads, `cost_of`). A loop of
  /// two or more is bound by its arithmetic, not by memory: it keeps short tiles at any size
  /// (its tile buffers and the values it reads back stay in L1, where long tiles put them in
  /// L2), and the native emitter gives each such op a segment of its own.
  [[nodiscard]] static bool costly(const ir::node<T>& n) {
    return n.kind == ir::node_kind::pointwise && cost_of<T>(n.op) >= 3 * cost_units_per_load / 2;
  }

  /// The lowered form, which the interpreter runs and the native emitter (jit/native_emitter.hpp)
  /// reads: an operand's source, an instruction, a step.
  struct source_ref {
    int node = -1;
    int reg = -1;        ///< in-loop value held in a tile register
    bool splat = false;  ///< one-element value splatted into a tile once per run
    int slot = -1;       ///< its splat slot
  };
  struct instr {
    int node = -1;
    int reg = -1;  ///< tile register (-1: written to the node's tensor)
    source_ref src[2];
    /// The next instruction is this one's sibling (sin and cos of one operand): this one
    /// computes both values (`sibling_of`), the next computes nothing.
    bool with_sibling = false, by_sibling = false;
  };
  struct step {
    bool eager = false;
    int rows = -1;            ///< a row step: its index in rows_
    int space_node = -1;      ///< a node whose shape (or operand's shape, for reductions) is the space
    std::vector<instr> code;  ///< in order; reductions accumulate as the tiles pass
    int registers = 0;
    int splats = 0;
    index_t tile = min_tile;  ///< `tile_for(streams, registers + splats)`: its tiles when it streams from memory
    int streams = 0;          ///< the tensors it reads from memory or stores
  };
  /// Compiles the nodes `outputs` of `g` need.
  program(ir::graph<T> g, std::vector<int> outputs) : g_(std::move(g)), outputs_(std::move(outputs)) {
    lower();
    native_ = std::make_shared<native_code<T>>(steps_.size());
    // An output's value is handed over where no later output is the same node (else copied).
    for (std::size_t i = 0; i < outputs_.size(); ++i)
      move_out_.push_back(std::find(outputs_.begin() + static_cast<std::ptrdiff_t>(i) + 1, outputs_.end(),
                                    outputs_[i]) == outputs_.end());
    borrow_inputs_ = only_loops_read_inputs();
    for (std::size_t k = 0; k < g_.nodes().size(); ++k)
      if (g_.nodes()[k].kind == ir::node_kind::input && need_[k]) input_nodes_.push_back(static_cast<int>(k));
    for (const step& st : steps_)
      reduces_.push_back(std::any_of(st.code.begin(), st.code.end(), [&](const instr& in) {
        const auto kind = g_.nodes()[static_cast<std::size_t>(in.node)].kind;
        return is_reduction(kind) || kind == ir::node_kind::sum_to;
      }));
  }

  /// Whether a run checks each input's shape against the program's: `guarded` where the
  /// caller's guards already imply it (a `trace_once` replay, whose signature holds every
  /// argument's sizes, on the entry traced with them).
  enum class input_check : bool { shapes, guarded };

  /// Runs the program: one tensor per output, in order. `sizes` (optional) gives every
  /// node's shape when the inputs' shapes differ from the lowered ones (see `fits`).
  /// `fns` are the functions of the graph's `call_hook` and `call` nodes, by slot.
  std::vector<tensor<T>> run(const std::vector<tensor<T>>& inputs, const std::vector<shape>* sizes = nullptr,
                             const std::vector<call_fn<T>>* fns = nullptr) const {
    std::vector<tensor<T>> out;
    run_into(inputs, out, sizes, fns);
    return out;
  }
  /// The same, taking the inputs over: each is moved into the program's values rather than
  /// copied (a reference count less to raise and drop per input); `inputs` is left with
  /// moved-from entries.
  std::vector<tensor<T>> run(std::vector<tensor<T>>&& inputs, const std::vector<shape>* sizes = nullptr,
                             const std::vector<call_fn<T>>* fns = nullptr) const;
  /// `run` into `out` (emptied first), so that a caller running the program call after call
  /// reuses one list.
  void run_into(const std::vector<tensor<T>>& inputs, std::vector<tensor<T>>& out,
                const std::vector<shape>* sizes = nullptr, const std::vector<call_fn<T>>* fns = nullptr) const;
  /// `run_into` on the tensors `inputs` points to (alive for the run), their shapes checked or
  /// not (`check`).
  void run_into(std::span<const tensor<T>* const> inputs, std::vector<tensor<T>>& out, const std::vector<shape>* sizes,
                const std::vector<call_fn<T>>* fns, input_check check) const;

  /// A run of a program that is one element-wise loop over its inputs, bound once for one set
  /// of node shapes (`bind_single_loop`): each instruction's pointers as `bind_instructions`
  /// sets them, but for the inputs' and outputs' addresses and the one-element inputs' splats,
  /// which `run_single_loop` patches in per call. A caller that runs the program on the same
  /// shapes call after call (a `trace_once` replay, a compiled autograd hit) skips the value
  /// table and the binding.
  struct single_loop_run {
    /// Where a pointer of an instruction comes from in a run: input `from` (>= 0) or output
    /// `-1 - from`; `field` 0 and 1 are its operands, 2 its destination.
    struct patch {
      std::size_t instr;
      int field;
      int from;
    };
    /// An operand that is one-element input `from` splatted into slot `slot`.
    struct splat_patch {
      std::size_t instr;
      int field;
      int from;
      int slot;
    };
    std::vector<loop_ptrs<T>> bound;  ///< per instruction: registers and stream flags (pointers: null)
    std::vector<patch> patches;
    std::vector<splat_patch> splats;
    std::vector<int> read_inputs;       ///< the inputs the loop streams (each must be contiguous)
    std::vector<shape> output_shapes;   ///< per output
    std::vector<std::size_t> first_of;  ///< per output: the first output that is the same node (itself if none)
    index_t total = 0;                  ///< the loop's elements
    /// Whether an output is the same node as an earlier one (and so the same tensor in a run).
    [[nodiscard]] bool repeats_an_output() const {
      for (std::size_t i = 0; i < first_of.size(); ++i)
        if (first_of[i] != i) return true;
      return false;
    }
  };
  /// The single-loop run of this program on node shapes `sizes` (null: the lowered ones), or
  /// nothing unless the program is one loop, without reductions, whose splats are of inputs
  /// (and none a mean's averaged expand), whose every stored value is an output and whose
  /// every output a stored value.
  [[nodiscard]] std::optional<single_loop_run> bind_single_loop(const std::vector<shape>* sizes) const;
  /// Runs the program as `run_into` with `input_check::guarded` would, on the shapes `r` was
  /// bound for (the caller's guards imply them), with the same bits: false (nothing run) when
  /// an input the loop reads is not contiguous, which the general run copies first.
  bool run_single_loop(const single_loop_run& r, std::span<const tensor<T>* const> inputs,
                       std::vector<tensor<T>>& out) const;

  /// True when the loops hold for the node shapes `sizes` (a loop's nodes still share one
  /// iteration shape, and its operands still have that shape or one element).
  [[nodiscard]] bool fits(const std::vector<shape>& sizes) const;

  /// The steps and their instructions, readable (what `FUSEGRAD_LOGS=output_code` prints).
  [[nodiscard]] std::string to_string() const;
  [[nodiscard]] std::size_t num_loops() const noexcept {
    return static_cast<std::size_t>(
        std::count_if(steps_.begin(), steps_.end(), [](const step& s) { return !s.eager; }));
  }
  [[nodiscard]] std::size_t num_steps() const noexcept { return steps_.size(); }
  [[nodiscard]] const ir::graph<T>& source() const noexcept { return g_; }
  [[nodiscard]] const std::vector<int>& outputs() const noexcept { return outputs_; }
  [[nodiscard]] const std::vector<step>& steps() const noexcept { return steps_; }
  /// The row steps, by `step::rows`.
  [[nodiscard]] const std::vector<row_step<T>>& row_steps() const noexcept { return rows_; }
  /// The program's native code: the loops' generated functions once installed (null: interpreted).
  [[nodiscard]] const std::shared_ptr<native_code<T>>& native() const noexcept { return native_; }

 private:
  /// The tiles a run of loop `st` over `total` elements walks (see `min_tile`).
  [[nodiscard]] static index_t tile_of(const step& st, index_t total) noexcept {
    const auto bytes = static_cast<std::size_t>(total) * sizeof(T) * static_cast<std::size_t>(st.streams);
    return bytes > last_cache_bytes() ? st.tile : min_tile;
  }

  [[nodiscard]] static bool reduces_all(const ir::node<T>& n, const ir::graph<T>& g) {
    if (n.kind == ir::node_kind::sum_to) return numel(n.sizes) == 1;
    if (!is_reduction(n.kind)) return false;
    const std::size_t r = g.at(n.a).sizes.size();
    return r == 0 || n.dims == ir::graph<T>::rank_bits(r);
  }
  /// The node whose shape is the iteration space of node k in a loop.
  [[nodiscard]] int space_node_of(std::size_t k) const {
    const auto& n = g_.nodes()[k];
    return is_reduction(n.kind) || n.kind == ir::node_kind::sum_to ? n.a : static_cast<int>(k);
  }
  /// Node k's shape in a run: `sizes`'s when given (see `fits`), else the lowered one.
  [[nodiscard]] const shape& size_of(const std::vector<shape>* sizes, std::size_t k) const {
    return sizes ? (*sizes)[k] : g_.nodes()[k].sizes;
  }

  /// `run_into`: the inputs taken over (moved from) where `taken` holds them, else only read (null).
  void run_on(std::span<const tensor<T>* const> inputs, std::vector<tensor<T>>* taken, std::vector<tensor<T>>& out,
              const std::vector<shape>* sizes, const std::vector<call_fn<T>>* fns, input_check check) const;
  /// Checks each input the program reads against its shape (unless `guarded`) and puts it in
  /// `vals` (made contiguous where a loop or the row step reads it), moved there from `taken`
  /// when given, else borrowed where `borrow_inputs_` allows, else shared.
  void take_inputs(std::span<const tensor<T>* const> inputs, std::vector<tensor<T>>* taken,
                   const std::vector<shape>* sizes, input_check check, std::vector<tensor<T>>& vals) const;
  /// True when no step but a loop reads an input and no output is one: a loop reads only its
  /// inputs' elements, during the run, so the run may hold them without owning them.
  [[nodiscard]] bool only_loops_read_inputs() const {
    const auto& ns = g_.nodes();
    return std::all_of(steps_.begin(), steps_.end(), [](const step& st) { return !st.eager && st.rows < 0; }) &&
           std::none_of(outputs_.begin(), outputs_.end(),
                        [&](int o) { return ns[static_cast<std::size_t>(o)].kind == ir::node_kind::input; });
  }
  /// A tensor of `x`'s impl that does not own it (the aliasing constructor on an empty owner:
  /// no reference count raised or dropped), valid while `x` lives.
  [[nodiscard]] static tensor<T> borrowed(const tensor<T>& x) noexcept {
    return tensor<T>(std::shared_ptr<tensor_impl<T>>(std::shared_ptr<void>(), x.raw_impl().get()));
  }
  /// Runs eager step `st`: its node's eager kernel, or its `call_hook` or `call` function.
  void run_eager(const step& st, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes,
                 const std::vector<call_fn<T>>* fns) const;
  /// True when loop `st`'s nodes and operands still have its iteration shape (or, for a splat,
  /// one element) under `sizes`.
  [[nodiscard]] bool loop_fits(const step& st, const std::vector<shape>& sizes) const;

  /// The lowering's decisions, each phase's read by the later ones (`lower`).
  struct lowering {
    typename row_step<T>::region_t region;  ///< the row step's nodes and its row space
    std::vector<bool> tiled, reduction;     ///< run by tiles; of those, the full reductions
    std::vector<int> stage;                 ///< per node outside the row step: its stage
    int rows_stage = 0;                     ///< the row step's stage
    std::vector<int> step_of;               ///< per node: its step (-1: an input or not needed)
    /// Per step: its stage and space node (-1 - k: eager node k; `rows_key`: the row step).
    std::vector<std::pair<int, int>> keys;
    std::vector<int> order;   ///< the steps in the order they run
    std::vector<bool> store;  ///< values written to their tensors (the rest stay in tile registers)
  };
  static constexpr int rows_key = std::numeric_limits<int>::min();

  /// Lowers the graph: the phases below, in order.
  void lower();
  /// Marks the nodes the outputs read, directly or not: only those are lowered.
  void mark_needed();
  /// Decides which nodes the row step runs and which tiles run (the rest are eager steps).
  void classify_nodes(lowering& lw) const;
  /// Gives each node a stage: a value is readable in its own stage when tiles compute it, in
  /// the next when it is a reduction's, an eager step's or the row step's.
  void assign_stages(lowering& lw) const;
  /// The nodes outside the row step that read it, directly or not: staged after it.
  [[nodiscard]] std::vector<bool> reads_row_step(const lowering& lw) const;
  /// Stages the needed nodes outside the row step that read it (`after_rows`) or do not: each
  /// at the stage its operands are readable in (`operands_ready`), and records in `avail` the
  /// stage its own value is readable in.
  void stage_nodes(lowering& lw, const std::vector<bool>& after_rows, bool reading_rows, std::vector<int>& avail) const;
  /// The stage in which node k's operands are all readable.
  [[nodiscard]] int operands_ready(const lowering& lw, const std::vector<int>& avail, std::size_t k) const;
  /// The row step's stage: the latest in which a value it reads from outside is readable.
  [[nodiscard]] int row_step_stage(const lowering& lw, const std::vector<int>& avail) const;
  /// Groups the nodes into steps: tiled nodes by stage and iteration shape (one loop each),
  /// the row step's nodes into one, every eager node alone.
  void group_into_steps(lowering& lw) const;
  /// The row step's step, added for the first of its nodes.
  [[nodiscard]] int row_step_of(lowering& lw) const;
  /// The loop of tiled node k's stage and iteration shape (-1: none yet).
  [[nodiscard]] int loop_of(const lowering& lw, std::size_t k) const;
  /// Adds a step with key (`stage`, `space`) and returns it.
  static int add_step(lowering& lw, int stage, int space);
  /// Orders the steps so that each runs after the steps it reads, earliest stage first.
  void order_steps(lowering& lw) const;
  /// Decides which values are stored: outputs, reductions, eager results and values another
  /// step reads; a loop keeps the rest in tile registers.
  void choose_stored(lowering& lw) const;
  /// Marks the values made contiguous: outputs and what a loop or the row step reads.
  void mark_dense(const lowering& lw);
  /// Finds the step after which each value is read no more, to drop it there (outputs: never).
  void plan_drops(const lowering& lw);
  /// Builds the steps in run order: the row step, eager steps and loops.
  void emit_steps(const lowering& lw);
  /// Builds loop `q`'s instructions from its `members`: operand sources (register, stream or
  /// splat) and tile registers, each reused after its last reader.
  void emit_loop(const lowering& lw, int q, std::vector<int>& members, step& st) const;
  /// Per value, while a loop's instructions are built (`emit_loop`): the tile register and
  /// splat slot it holds, and the member that reads it last; and the registers free again.
  struct loop_registers {
    std::vector<int> last_use, reg, slot;  ///< -1: none
    std::vector<int> free;                 ///< registers whose values are read no more
  };
  /// The position of each value's last reader among loop `members` (-1: none reads it).
  [[nodiscard]] std::vector<int> last_uses(const std::vector<int>& members) const;
  /// Where instruction `in` of loop `q` (over `space` elements) reads each operand: the
  /// operand's register if this loop computes it, a splat if it has one element, else a stream.
  void choose_sources(const lowering& lw, int q, index_t space, const loop_registers& lr, instr& in) const;
  /// Gives each splat of `in` its slot: splats of one value share one, except an averaging
  /// expand's (its own value).
  void give_splat_slots(loop_registers& lr, instr& in, step& st) const;
  /// Gives `in`'s value a tile register (a free one if any) when nothing stores it.
  static void take_register(const lowering& lw, loop_registers& lr, instr& in, step& st);
  /// Frees the registers of the operands member `p` (`in`) of loop `q` reads last.
  void free_operand_registers(const lowering& lw, int q, int p, const instr& in, loop_registers& lr) const;
  /// Counts the tensors loop `st` streams (reads from memory or stores), which sets its tiles.
  void count_streams(const lowering& lw, step& st) const;
  /// Moves each element-wise member of a loop whose sibling (sin and cos of one operand) is a
  /// later member right before that one (its operand is earlier still), and says which members
  /// are now followed by their sibling.
  std::vector<bool> pair_siblings(std::vector<int>& members) const;

  using ptrs = loop_ptrs<T>;
  using reduction_state = jit::reduction_state<T>;

  /// An instruction resolved for a run of tiles (`run_tiles`): where each operand is (a tile
  /// register, this thread's; or a pointer that moves with the tile, or stays: a splat, null
  /// for no operand), with a mask of all ones where it moves; the kernel (null: not
  /// element-wise) and its constant.
  struct resolved {
    const T* a;
    const T* b;
    T* d;
    index_t am, bm, dm;
    kernel_fn<T> fn;
    T scalar;
    ir::node_kind kind;
    sibling_kernel_fn<T> both;  ///< with its sibling: the kernel of both, into `d` and `d2`
    T* d2;
    index_t dm2;
    bool skip;  ///< the sibling's value: the instruction before computed it
  };
  /// The loop's tiles [lo, hi) with tile registers `regs` and reductions into `red`.
  void run_tiles(const step& st, index_t tile, const ptrs* pv, index_t lo, index_t hi, T* regs,
                 reduction_state* red) const;

  /// Runs loop `st` over `space`: the phases below, in order.
  void run_loop(std::size_t l, std::vector<tensor<T>>& vals, const shape& space, const std::vector<shape>* sizes) const;
  /// Where node `k`'s value is in a single-loop run: input `index` (>= 0), output `-1 - i` (its
  /// first position among the outputs), or nowhere (a temporary).
  [[nodiscard]] std::optional<int> single_loop_place(int k) const;
  /// Instruction `p` of the single loop into `r`: its registers and stream flags, and a patch
  /// per address; false when it stores a value that is not an output.
  bool bind_single_instr(std::size_t p, single_loop_run& r) const;
  /// This thread's tile registers and splats: at least `n` elements, reused run after run.
  static T* loop_buffer(std::size_t n);
  /// Splat slot `slot` of a loop's splat area `splats` filled with `v` for a run of `total`
  /// elements in tiles of `tile`; the operand pointer that reads it.
  static T* fill_splat(T* splats, int slot, index_t tile, index_t total, T v) noexcept {
    T* const at = splats + static_cast<index_t>(slot) * tile;
    std::fill(at, at + std::min(tile, total), v);
    return at;
  }
  /// This thread's per-instruction pointers and reduction states for a loop of `n`
  /// instructions, reused run after run.
  struct loop_tables {
    ptrs* pv;
    reduction_state* red;
  };
  static loop_tables loop_tables_for(std::size_t n);
  /// Runs row step `l`: its generated code once installed, else the interpreter.
  void run_row_step(std::size_t l, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes) const {
    const native_rows_fn<T> fn = native_->rows_at(l);  // (installed after its constants were set)
    rows_[static_cast<std::size_t>(steps_[l].rows)].run(g_, vals, sizes, fn, fn ? native_->scalars[l].data() : nullptr);
  }
  /// Counts a run the interpreter takes while this program's native code is still compiling.
  void note_if_awaiting_native() const {
    if (native_->requested.load(std::memory_order_relaxed) && !native_->ready()) fusegrad::native::note_fallback();
  }
  /// Runs the tiles of loop `l` over `total` elements bound in `pv` (tile registers `regs`):
  /// in this thread, or in blocks on all threads; the number of blocks.
  index_t run_bound_loop(std::size_t l, index_t tile, index_t total, const ptrs* pv, T* regs,
                         reduction_state* red) const;
  /// The tiles [lo, hi) of loop `l`: by its generated function once one is installed
  /// (`native_`), else by the interpreter (`run_tiles`); the same effects and bits.
  void run_tiles_of(std::size_t l, index_t tile, const ptrs* pv, index_t lo, index_t hi, T* regs,
                    reduction_state* red) const;
  /// Each instruction's pointers for this run (`pv`): its output made (or its tile register),
  /// its operands found (a register, a stream, or a splat filled here), its reduction reset.
  void bind_instructions(const step& st, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes, index_t tile,
                         index_t total, T* splats, ptrs* pv, reduction_state* red) const;
  /// The loop's tiles in `split`'s blocks on all threads, each block with its own tile
  /// registers and reductions, merged into `red` (`merge_blocks`).
  void run_blocks(std::size_t l, index_t tile, fusegrad::detail::block_split split, index_t total, const ptrs* pv,
                  reduction_state* red) const;
  /// The blocks' reductions (`part`, block by block) combined as one thread's would be
  /// (`max_of_blocks`, `sum_of_block_sums`): each reduction's value in `merged`.
  void merge_blocks(const step& st, index_t blocks, const reduction_state* part, reduction_state* red) const;
  /// Each reduction's value (over `total` elements, run in `blocks` blocks) as its tensor.
  void store_reductions(const step& st, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes, index_t total,
                        index_t blocks, const reduction_state* red) const;

  ir::graph<T> g_;
  std::vector<int> outputs_;
  std::vector<char> move_out_;  ///< per output: no later output is the same node (its value is moved out)
  std::vector<bool> need_;
  std::vector<bool> dense_;  ///< read by a loop or the row step, or an output: made contiguous
  std::vector<step> steps_;
  std::vector<row_step<T>> rows_;
  /// Per step: the values no later step reads and no output is, dropped once it has run (a
  /// long graph keeps only what is still to be read, as the eager engine frees a gradient
  /// once used: a freed buffer goes back to the buffer cache, warm, for the next step).
  std::vector<std::vector<int>> last_read_;
  std::shared_ptr<native_code<T>> native_;
  bool borrow_inputs_ = false;    ///< `only_loops_read_inputs`: a run borrows its inputs rather than sharing them
  std::vector<int> input_nodes_;  ///< the input nodes the outputs need, in order
  std::vector<char> reduces_;     ///< per step: a loop with reductions (their values stored once it ran)
};

// ---- out of the class: the precompiled runtime instantiates these once (runtime.hpp) ----

template <Element T>
void program<T>::run_into(const std::vector<tensor<T>>& inputs, std::vector<tensor<T>>& out,
                          const std::vector<shape>* sizes, const std::vector<call_fn<T>>* fns) const {
  small_vector<const tensor<T>*, 8> in;
  for (const tensor<T>& t : inputs) in.push_back(&t);
  run_on(in, nullptr, out, sizes, fns, input_check::shapes);
}

template <Element T>
void program<T>::run_into(std::span<const tensor<T>* const> inputs, std::vector<tensor<T>>& out,
                          const std::vector<shape>* sizes, const std::vector<call_fn<T>>* fns,
                          input_check check) const {
  run_on(inputs, nullptr, out, sizes, fns, check);
}

template <Element T>
std::vector<tensor<T>> program<T>::run(std::vector<tensor<T>>&& inputs, const std::vector<shape>* sizes,
                                       const std::vector<call_fn<T>>* fns) const {
  small_vector<const tensor<T>*, 8> in;
  for (const tensor<T>& t : inputs) in.push_back(&t);
  std::vector<tensor<T>> out;
  run_on(in, &inputs, out, sizes, fns, input_check::shapes);
  return out;
}

template <Element T>
void program<T>::run_on(std::span<const tensor<T>* const> inputs, std::vector<tensor<T>>* taken,
                        std::vector<tensor<T>>& out, const std::vector<shape>* sizes,
                        const std::vector<call_fn<T>>* fns, input_check check) const {
  if (static_cast<int>(inputs.size()) != g_.num_inputs())
    fusegrad::detail::fail("jit program", "expected ", g_.num_inputs(), " inputs, got ", inputs.size());
  // Every node's value, in a per-thread buffer reused by the next run (a run inside a run,
  // which eager steps never start, gets its own).
  struct program_values;
  fusegrad::detail::reused_vector<tensor<T>, program_values> buffer;
  std::vector<tensor<T>>& vals = *buffer;
  vals.resize(g_.nodes().size());
  take_inputs(inputs, taken, sizes, check, vals);
  note_if_awaiting_native();
  for (std::size_t l = 0; l < steps_.size(); ++l) {
    const step& st = steps_[l];
    if (st.rows >= 0) run_row_step(l, vals, sizes);
    else if (st.eager) run_eager(st, vals, sizes, fns);
    else run_loop(l, vals, size_of(sizes, static_cast<std::size_t>(st.space_node)), sizes);
    for (const int k : last_read_[l]) vals[static_cast<std::size_t>(k)] = tensor<T>{};
  }
  out.clear();
  out.reserve(outputs_.size());
  for (std::size_t i = 0; i < outputs_.size(); ++i) {  // (moved: `vals` drops them at the end anyway)
    tensor<T>& v = vals[static_cast<std::size_t>(outputs_[i])];
    out.push_back(move_out_[i] ? std::move(v) : v);
  }
}

template <Element T>
void program<T>::take_inputs(std::span<const tensor<T>* const> inputs, std::vector<tensor<T>>* taken,
                             const std::vector<shape>* sizes, input_check check, std::vector<tensor<T>>& vals) const {
  const auto& ns = g_.nodes();
  for (const int node : input_nodes_) {
    const auto k = static_cast<std::size_t>(node);
    const auto& n = ns[k];
    const auto i = static_cast<std::size_t>(n.index);  // (each input node has its own)
    const tensor<T>& x = *inputs[i];
    if (check == input_check::shapes && x.shape() != size_of(sizes, k))
      fusegrad::detail::fail("jit program", "input ", n.index, " has shape ", fusegrad::to_string(x.shape()),
                             "; the program was compiled for ", fusegrad::to_string(size_of(sizes, k)));
    if (!x.is_contiguous() && dense_[k]) vals[k] = fusegrad::detail::contiguous_copy(x);
    else if (taken) vals[k] = std::move((*taken)[i]);
    else if (borrow_inputs_) vals[k] = borrowed(x);
    else vals[k] = x;
  }
}

template <Element T>
void program<T>::run_eager(const step& st, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes,
                           const std::vector<call_fn<T>>* fns) const {
  const auto k = static_cast<std::size_t>(st.code[0].node);
  const auto& n = g_.nodes()[k];
  fusegrad::no_grad ng;
  const tensor<T> none;
  // An expand's or sum_to's target is its own shape.
  const tensor<T>& a = vals[static_cast<std::size_t>(n.a)];
  const tensor<T>& b = n.b >= 0 ? vals[static_cast<std::size_t>(n.b)] : none;
  tensor<T> r = n.kind == ir::node_kind::call_hook || n.kind == ir::node_kind::call
                    ? run_call(n, a, b, fns, size_of(sizes, k))
                    : eval_eager(n, a, b, size_of(sizes, k));
  vals[k] = r.is_contiguous() || !dense_[k] ? r : fusegrad::detail::contiguous_copy(r);
}

template <Element T>
bool program<T>::fits(const std::vector<shape>& sizes) const {
  for (const auto& st : steps_) {
    if (st.rows >= 0 && !rows_[static_cast<std::size_t>(st.rows)].fits(g_, sizes)) return false;
    if (!st.eager && st.rows < 0 && !loop_fits(st, sizes)) return false;
  }
  return true;
}

template <Element T>
bool program<T>::loop_fits(const step& st, const std::vector<shape>& sizes) const {
  const auto& ns = g_.nodes();
  const shape& space = sizes[static_cast<std::size_t>(st.space_node)];
  for (const auto& in : st.code) {
    const auto k = static_cast<std::size_t>(in.node);
    if (sizes[static_cast<std::size_t>(space_node_of(k))] != space) return false;
    for (const source_ref& sr : in.src) {
      if ((sr.node) < 0) continue;  // parenthesised: clang reads `sr.node <` as fusegrad::node<
      const shape& cs = sizes[static_cast<std::size_t>(sr.node)];
      if (sr.splat ? numel(cs) != 1 : cs != space) return false;
    }
    if (ns[k].kind == ir::node_kind::pointwise && sizes[k] != space) return false;
  }
  return true;
}

template <Element T>
std::string program<T>::to_string() const {
  std::string s;
  const auto& ns = g_.nodes();
  for (std::size_t l = 0; l < steps_.size(); ++l) {
    const auto& st = steps_[l];
    if (st.rows >= 0) {
      s += "step " + std::to_string(l) + ": " + rows_[static_cast<std::size_t>(st.rows)].to_string(g_);
      continue;
    }
    if (st.eager) {
      s += "step " + std::to_string(l) + ": eager %" + std::to_string(st.code[0].node) + "\n";
      continue;
    }
    s += "loop " + std::to_string(l) + " over " +
         fusegrad::to_string(ns[static_cast<std::size_t>(st.space_node)].sizes) + " in tiles of " +
         std::to_string(min_tile) +
         (st.tile != min_tile ? " (of " + std::to_string(st.tile) + " where it streams from memory)" : std::string()) +
         " (" + std::to_string(st.registers) + " registers):";
    for (const auto& in : st.code) {
      s += (in.by_sibling ? "+%" : " %") + std::to_string(in.node);  // %3+%4: computed together
      if (in.reg >= 0) s += "->r" + std::to_string(in.reg);
    }
    s += "\n";
  }
  return s;
}

template <Element T>
void program<T>::lower() {
  lowering lw;
  mark_needed();
  classify_nodes(lw);
  assign_stages(lw);
  group_into_steps(lw);
  order_steps(lw);
  choose_stored(lw);
  mark_dense(lw);
  plan_drops(lw);
  emit_steps(lw);
}

template <Element T>
void program<T>::mark_needed() {
  const auto& ns = g_.nodes();
  const std::size_t N = ns.size();
  need_.assign(N, false);
  for (int o : outputs_) need_.at(static_cast<std::size_t>(o)) = true;
  for (std::size_t k = N; k-- > 0;)
    if (need_[k]) {
      for (int c : {ns[k].a, ns[k].b})
        if (c >= 0) need_[static_cast<std::size_t>(c)] = true;
    }
}

template <Element T>
void program<T>::classify_nodes(lowering& lw) const {
  const auto& ns = g_.nodes();
  const std::size_t N = ns.size();
  // The row step's nodes (row_step.hpp), then which nodes tiles can run: element-wise on
  // equal shapes or one-element operands, one-element expands, full reductions. The rest
  // are eager steps.
  lw.region = row_step<T>::region(g_, need_);
  const std::vector<bool>& in_rows = lw.region.in;
  lw.tiled.assign(N, false);
  lw.reduction.assign(N, false);
  for (std::size_t k = 0; k < N; ++k) {
    const auto& n = ns[k];
    if (!need_[k] || n.kind == ir::node_kind::input || in_rows[k]) continue;
    auto ok = [&](int c) {
      return c < 0 || ns[static_cast<std::size_t>(c)].sizes == n.sizes ||
             numel(ns[static_cast<std::size_t>(c)].sizes) == 1;
    };
    switch (n.kind) {
      case ir::node_kind::pointwise: lw.tiled[k] = ok(n.a) && ok(n.b); break;
      case ir::node_kind::expand: lw.tiled[k] = numel(ns[static_cast<std::size_t>(n.a)].sizes) == 1; break;
      default: lw.tiled[k] = lw.reduction[k] = reduces_all(n, g_); break;
    }
  }
}

template <Element T>
void program<T>::assign_stages(lowering& lw) const {
  const std::size_t N = g_.nodes().size();
  // Stages: tiled element-wise nodes join their latest operand; reductions and eager steps
  // are readable one stage later. The row step is one unit: its stage follows every value
  // it reads from outside (staged first: they do not read it), and its values are readable
  // one stage later.
  lw.stage.assign(N, 0);
  std::vector<int> avail(N, 0);
  const std::vector<bool> after_rows = reads_row_step(lw);
  lw.rows_stage = 0;
  stage_nodes(lw, after_rows, false, avail);
  lw.rows_stage = row_step_stage(lw, avail);
  stage_nodes(lw, after_rows, true, avail);
}

template <Element T>
std::vector<bool> program<T>::reads_row_step(const lowering& lw) const {
  const auto& ns = g_.nodes();
  const std::vector<bool>& in_rows = lw.region.in;
  std::vector<bool> after_rows(ns.size(), false);
  for (std::size_t k = 0; k < ns.size(); ++k)
    for (int c : {ns[k].a, ns[k].b})
      if (c >= 0 && (in_rows[static_cast<std::size_t>(c)] || after_rows[static_cast<std::size_t>(c)]) && !in_rows[k])
        after_rows[k] = true;
  return after_rows;
}

template <Element T>
void program<T>::stage_nodes(lowering& lw, const std::vector<bool>& after_rows, bool reading_rows,
                             std::vector<int>& avail) const {
  const auto& ns = g_.nodes();
  for (std::size_t k = 0; k < ns.size(); ++k) {
    if (!need_[k] || ns[k].kind == ir::node_kind::input || lw.region.in[k] || after_rows[k] != reading_rows) continue;
    const int in = operands_ready(lw, avail, k);
    lw.stage[k] = in;
    avail[k] = (lw.reduction[k] || !lw.tiled[k]) ? in + 1 : in;
  }
}

template <Element T>
int program<T>::operands_ready(const lowering& lw, const std::vector<int>& avail, std::size_t k) const {
  const auto& n = g_.nodes()[k];
  int in = 0;
  for (int c : {n.a, n.b})
    if (c >= 0)
      in = std::max(in,
                    lw.region.in[static_cast<std::size_t>(c)] ? lw.rows_stage + 1 : avail[static_cast<std::size_t>(c)]);
  return in;
}

template <Element T>
int program<T>::row_step_stage(const lowering& lw, const std::vector<int>& avail) const {
  const auto& ns = g_.nodes();
  const std::vector<bool>& in_rows = lw.region.in;
  int stage = 0;
  for (std::size_t k = 0; k < ns.size(); ++k)
    if (in_rows[k])
      for (int c : {ns[k].a, ns[k].b})
        if (c >= 0 && !in_rows[static_cast<std::size_t>(c)])
          stage = std::max(stage, avail[static_cast<std::size_t>(c)]);
  return stage;
}

template <Element T>
void program<T>::group_into_steps(lowering& lw) const {
  const auto& ns = g_.nodes();
  const std::size_t N = ns.size();
  // Steps: (stage, iteration shape) for tiled nodes; one step per eager node; one row step.
  lw.step_of.assign(N, -1);
  for (std::size_t k = 0; k < N; ++k) {
    if (!need_[k] || ns[k].kind == ir::node_kind::input) continue;
    int found = lw.region.in[k] ? row_step_of(lw) : lw.tiled[k] ? loop_of(lw, k) : -1;
    if (found < 0) found = add_step(lw, lw.stage[k], lw.tiled[k] ? space_node_of(k) : -1 - static_cast<int>(k));
    lw.step_of[k] = found;
  }
}

template <Element T>
int program<T>::row_step_of(lowering& lw) const {
  int found = -1;
  for (std::size_t q = 0; q < lw.keys.size(); ++q)
    if (lw.keys[q].second == rows_key) found = static_cast<int>(q);
  return found >= 0 ? found : add_step(lw, lw.rows_stage, rows_key);
}

template <Element T>
int program<T>::loop_of(const lowering& lw, std::size_t k) const {
  const auto& ns = g_.nodes();
  const shape& sp = ns[static_cast<std::size_t>(space_node_of(k))].sizes;
  int found = -1;
  for (std::size_t q = 0; q < lw.keys.size(); ++q)
    if (lw.keys[q].first == lw.stage[k] && lw.keys[q].second >= 0 &&
        ns[static_cast<std::size_t>(lw.keys[q].second)].sizes == sp)
      found = static_cast<int>(q);
  return found;
}

template <Element T>
int program<T>::add_step(lowering& lw, int stage, int space) {
  lw.keys.emplace_back(stage, space);
  return static_cast<int>(lw.keys.size()) - 1;
}

template <Element T>
void program<T>::order_steps(lowering& lw) const {
  const auto& ns = g_.nodes();
  const std::size_t N = ns.size();
  const auto& step_of = lw.step_of;
  // Every step runs after the steps it reads; among the ready ones, the earliest stage first.
  const std::size_t L = lw.keys.size();
  std::vector<std::vector<bool>> dep(L, std::vector<bool>(L, false));
  for (std::size_t k = 0; k < N; ++k)
    if (step_of[k] >= 0)
      for (int c : {ns[k].a, ns[k].b})
        if (c >= 0 && step_of[static_cast<std::size_t>(c)] >= 0 && step_of[static_cast<std::size_t>(c)] != step_of[k])
          dep[static_cast<std::size_t>(step_of[k])][static_cast<std::size_t>(step_of[static_cast<std::size_t>(c)])] =
              true;
  std::vector<bool> placed(L, false);
  while (lw.order.size() < L) {
    int pick = -1;
    for (std::size_t q = 0; q < L; ++q) {
      if (placed[q]) continue;
      bool ready = true;
      for (std::size_t r = 0; r < L; ++r) ready = ready && (!dep[q][r] || placed[r]);
      if (ready && (pick < 0 || lw.keys[q].first < lw.keys[static_cast<std::size_t>(pick)].first))
        pick = static_cast<int>(q);
    }
    placed[static_cast<std::size_t>(pick)] = true;
    lw.order.push_back(pick);
  }
}

template <Element T>
void program<T>::choose_stored(lowering& lw) const {
  const auto& ns = g_.nodes();
  const std::size_t N = ns.size();
  // Stored values: outputs, reductions, eager results, and values read by another step.
  lw.store.assign(N, false);
  for (int o : outputs_) lw.store[static_cast<std::size_t>(o)] = true;
  for (std::size_t k = 0; k < N; ++k) {
    if (!need_[k] || ns[k].kind == ir::node_kind::input) continue;
    if (lw.reduction[k] || (!lw.tiled[k] && !lw.region.in[k])) lw.store[k] = true;
    for (int c : {ns[k].a, ns[k].b})
      if (c >= 0 && ns[static_cast<std::size_t>(c)].kind != ir::node_kind::input &&
          lw.step_of[static_cast<std::size_t>(c)] != lw.step_of[k])
        lw.store[static_cast<std::size_t>(c)] = true;
  }
}

template <Element T>
void program<T>::mark_dense(const lowering& lw) {
  const auto& ns = g_.nodes();
  const std::size_t N = ns.size();
  // A value only eager steps read stays as its step returned it (e.g. a transposed view a
  // call's function returns for the next one to transpose back: no copies).
  dense_.assign(N, false);
  for (int o : outputs_) dense_[static_cast<std::size_t>(o)] = true;
  for (std::size_t k = 0; k < N; ++k)
    if (need_[k] && (lw.tiled[k] || lw.region.in[k]))
      for (int c : {ns[k].a, ns[k].b})
        if (c >= 0) dense_[static_cast<std::size_t>(c)] = true;
}

template <Element T>
void program<T>::plan_drops(const lowering& lw) {
  const auto& ns = g_.nodes();
  const std::size_t N = ns.size();
  const std::size_t L = lw.keys.size();
  std::vector<int> position(L, 0);
  for (std::size_t i = 0; i < lw.order.size(); ++i)
    position[static_cast<std::size_t>(lw.order[i])] = static_cast<int>(i);
  std::vector<int> last(N, -1);  // the position of the last step that reads each value
  for (std::size_t k = 0; k < N; ++k)
    if (lw.step_of[k] >= 0)
      for (int c : {ns[k].a, ns[k].b})
        if (c >= 0)
          last[static_cast<std::size_t>(c)] =
              std::max(last[static_cast<std::size_t>(c)], position[static_cast<std::size_t>(lw.step_of[k])]);
  for (int o : outputs_) last[static_cast<std::size_t>(o)] = -1;
  last_read_.assign(L, {});
  for (std::size_t k = 0; k < N; ++k)
    if (last[k] >= 0) last_read_[static_cast<std::size_t>(last[k])].push_back(static_cast<int>(k));
}

template <Element T>
void program<T>::emit_steps(const lowering& lw) {
  const std::size_t N = g_.nodes().size();
  for (int q : lw.order) {
    step st;
    const auto& key = lw.keys[static_cast<std::size_t>(q)];
    std::vector<int> members;
    for (std::size_t k = 0; k < N; ++k)
      if (lw.step_of[k] == q) members.push_back(static_cast<int>(k));
    if (key.second == rows_key) {
      st.rows = static_cast<int>(rows_.size());
      rows_.emplace_back(g_, lw.region.space, members, lw.store);
    } else if (key.second < 0) {
      st.eager = true;
      instr in;
      in.node = members.at(0);
      st.code.push_back(in);
    } else {
      st.space_node = key.second;
      emit_loop(lw, q, members, st);
      count_streams(lw, st);
    }
    steps_.push_back(std::move(st));
  }
}

template <Element T>
void program<T>::emit_loop(const lowering& lw, int q, std::vector<int>& members, step& st) const {
  const auto& ns = g_.nodes();
  const std::size_t N = ns.size();
  const std::vector<bool> paired = pair_siblings(members);
  const index_t space = numel(ns[static_cast<std::size_t>(st.space_node)].sizes);
  loop_registers lr;
  lr.last_use = last_uses(members);
  lr.reg.assign(N, -1);
  lr.slot.assign(N, -1);
  for (std::size_t p = 0; p < members.size(); ++p) {
    instr in;
    in.node = members[p];
    choose_sources(lw, q, space, lr, in);
    give_splat_slots(lr, in, st);
    take_register(lw, lr, in, st);
    free_operand_registers(lw, q, static_cast<int>(p), in, lr);
    in.with_sibling = paired[p];
    in.by_sibling = p > 0 && paired[p - 1];
    st.code.push_back(in);
  }
}

template <Element T>
std::vector<int> program<T>::last_uses(const std::vector<int>& members) const {
  const auto& ns = g_.nodes();
  std::vector<int> last_use(ns.size(), -1);
  for (std::size_t p = 0; p < members.size(); ++p)
    for (int c : {ns[static_cast<std::size_t>(members[p])].a, ns[static_cast<std::size_t>(members[p])].b})
      if (c >= 0) last_use[static_cast<std::size_t>(c)] = static_cast<int>(p);
  return last_use;
}

template <Element T>
void program<T>::choose_sources(const lowering& lw, int q, index_t space, const loop_registers& lr, instr& in) const {
  const auto& ns = g_.nodes();
  const auto& n = ns[static_cast<std::size_t>(in.node)];
  const int ops[2] = {n.a, n.b};
  for (int s = 0; s < 2; ++s) {
    const int c = ops[s];
    if (c < 0) continue;
    const auto u = static_cast<std::size_t>(c);
    in.src[s].node = c;
    // A value of this loop is read from its register or its tensor as the tiles pass: a
    // splat is filled before the loop runs, so only values of earlier steps are splatted.
    // (An expand whose one-element operand is in this loop has a one-element space, hence
    // nothing reduced to average over.)
    if (lw.step_of[u] == q) in.src[s].reg = lr.reg[u];
    else if (n.kind == ir::node_kind::expand || (numel(ns[u].sizes) == 1 && space != 1)) in.src[s].splat = true;
  }
}

template <Element T>
void program<T>::give_splat_slots(loop_registers& lr, instr& in, step& st) const {
  const auto& n = g_.nodes()[static_cast<std::size_t>(in.node)];
  const bool own = n.kind == ir::node_kind::expand && n.average;
  for (auto& sr : in.src) {
    if (!sr.splat) continue;
    const auto u = static_cast<std::size_t>(sr.node);
    if (own) {
      sr.slot = st.splats++;
      continue;
    }
    if (lr.slot[u] < 0) lr.slot[u] = st.splats++;
    sr.slot = lr.slot[u];
  }
}

template <Element T>
void program<T>::take_register(const lowering& lw, loop_registers& lr, instr& in, step& st) {
  const auto k = static_cast<std::size_t>(in.node);
  if (lw.reduction[k] || lw.store[k]) return;
  if (lr.free.empty()) lr.free.push_back(st.registers++);
  in.reg = lr.free.back();
  lr.free.pop_back();
  lr.reg[k] = in.reg;
}

template <Element T>
void program<T>::free_operand_registers(const lowering& lw, int q, int p, const instr& in, loop_registers& lr) const {
  const auto& n = g_.nodes()[static_cast<std::size_t>(in.node)];
  const int ops[2] = {n.a, n.b};
  for (int j = 0; j < 2; ++j) {
    const int c = ops[j];
    if (j == 1 && c == ops[0]) break;  // x * x frees x's register once
    if (c < 0) continue;
    const auto u = static_cast<std::size_t>(c);
    if (lr.reg[u] >= 0 && lw.step_of[u] == q && lr.last_use[u] == p) lr.free.push_back(lr.reg[u]);
  }
}

template <Element T>
void program<T>::count_streams(const lowering& lw, step& st) const {
  // Streams: the tensors the loop reads as the tiles pass (each once) and those it stores.
  std::vector<int> streamed;
  for (const instr& in : st.code) {
    for (const source_ref& sr : in.src)
      if (sr.node >= 0 && sr.reg < 0 && !sr.splat) streamed.push_back(sr.node);
    const auto k = static_cast<std::size_t>(in.node);
    if (in.reg < 0 && !lw.reduction[k]) streamed.push_back(in.node);
  }
  std::sort(streamed.begin(), streamed.end());
  const auto streams = std::unique(streamed.begin(), streamed.end()) - streamed.begin();
  st.streams = static_cast<int>(streams);
  const auto costly_ops =
      std::count_if(st.code.begin(), st.code.end(), [&](const instr& in) { return costly(g_.at(in.node)); });
  st.tile = costly_ops > 1 ? min_tile : tile_for(st.streams, st.registers + st.splats);
}

template <Element T>
std::vector<bool> program<T>::pair_siblings(std::vector<int>& members) const {
  const auto& ns = g_.nodes();
  std::vector<bool> paired(members.size(), false);
  for (std::size_t p = 0; p + 1 < members.size(); ++p) {
    const auto& n = ns[static_cast<std::size_t>(members[p])];
    if (n.kind != ir::node_kind::pointwise || n.b >= 0 || (p > 0 && paired[p - 1])) continue;
    const int sib = sibling_of<T>(n.op).op;
    if (sib < 0) continue;
    for (std::size_t q = p + 1; q < members.size(); ++q) {
      const auto& m = ns[static_cast<std::size_t>(members[q])];
      if (m.kind != ir::node_kind::pointwise || m.op != sib || m.a != n.a || m.b >= 0) continue;
      // (members between p and q read neither: q's only operand is before p)
      std::rotate(members.begin() + static_cast<std::ptrdiff_t>(p) + 1,
                  members.begin() + static_cast<std::ptrdiff_t>(q),
                  members.begin() + static_cast<std::ptrdiff_t>(q) + 1);
      paired[p] = true;
      break;
    }
  }
  return paired;
}

template <Element T>
// Above the complexity bound: the interpreter's inner loop: one case per instruction kind, one body so
// that it stays inlined.
// NOLINTNEXTLINE(readability-function-cognitive-complexity)
void program<T>::run_tiles(const step& st, const index_t tile, const ptrs* pv, index_t lo, index_t hi, T* regs,
                           reduction_state* red) const {
  const auto& ns = g_.nodes();
  const std::size_t np = st.code.size();
  auto resolve = [&](std::size_t p) {
    const auto& nd = ns[static_cast<std::size_t>(st.code[p].node)];
    const ptrs& P = pv[p];
    auto at = [&](int reg, const T* ptr, bool adv, index_t& mask) -> const T* {
      mask = reg < 0 && adv ? ~index_t{0} : index_t{0};
      return reg >= 0 ? regs + reg * tile : ptr;
    };
    resolved r;
    r.a = at(P.src_reg[0], P.src[0], P.adv[0], r.am);
    r.b = at(P.src_reg[1], P.src[1], P.adv[1], r.bm);
    r.d = const_cast<T*>(at(P.dst_reg, P.dst, P.dst_adv, r.dm));
    r.fn = nd.kind == ir::node_kind::pointwise ? kernel_of<T>(nd.op) : nullptr;
    r.scalar = nd.scalar;
    r.kind = nd.kind;
    r.both = nullptr, r.d2 = nullptr, r.dm2 = 0;
    r.skip = st.code[p].by_sibling;
    if (st.code[p].with_sibling) {
      r.both = sibling_of<T>(nd.op).kernel;
      const ptrs& Q = pv[p + 1];
      r.d2 = const_cast<T*>(at(Q.dst_reg, Q.dst, Q.dst_adv, r.dm2));
    }
    return r;
  };
  // Instruction `p` (resolved as `r`) on the `n` elements of the tile at `t0`.
  auto run = [&](std::size_t p, const resolved& r, index_t t0, index_t n) {
    const T* a = r.a + (t0 & r.am);
    if (r.skip) return;
    if (r.both) return r.both(a, r.d + (t0 & r.dm), r.d2 + (t0 & r.dm2), n);
    if (r.fn) [[likely]]
      return r.fn(r.scalar, a, r.b + (t0 & r.bm), r.d + (t0 & r.dm), n);
    switch (r.kind) {
      case ir::node_kind::expand: std::copy(a, a + n, r.d + (t0 & r.dm)); break;
      case ir::node_kind::max: red[p].max.add(a, n); break;
      default: red[p].sum.add(a, n); break;  // sum, mean, sum_to
    }
  };
  if (hi - lo <= tile) {  // one tile (or none): each instruction resolved as it runs
    if (hi <= lo) return;
    for (std::size_t p = 0; p < np; ++p) run(p, resolve(p), lo, hi - lo);
    return;
  }
  // Several tiles: each instruction resolved once; the loop over the tiles only adds offsets.
  thread_local std::vector<resolved> rv;  // grows only; a block of a parallel loop: its thread's
  if (rv.size() < np) rv.resize(np);
  resolved* const R = rv.data();
  for (std::size_t p = 0; p < np; ++p) R[p] = resolve(p);
  for (index_t t0 = lo; t0 < hi; t0 += tile) {
    const index_t n = std::min(tile, hi - t0);
    for (std::size_t p = 0; p < np; ++p) run(p, R[p], t0, n);
  }
}

template <Element T>
void program<T>::run_tiles_of(std::size_t l, index_t tile, const ptrs* pv, index_t lo, index_t hi, T* regs,
                              reduction_state* red) const {
  if (const native_loop_fn<T> fn = native_->at(l)) {
    thread_local std::vector<T> buf;  // grows only; a block of a parallel loop: its thread's
    const auto need = static_cast<std::size_t>(native_->buffers[l] * tile);
    if (buf.size() < need) buf.resize(need);
    fn(pv, native_->scalars[l].data(), tile, lo, hi, buf.data(), red);
  } else {
    run_tiles(steps_[l], tile, pv, lo, hi, regs, red);
  }
}

template <Element T>
T* program<T>::loop_buffer(std::size_t n) {
  thread_local std::vector<T> buf;  // grows only: no allocation per run
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

template <Element T>
typename program<T>::loop_tables program<T>::loop_tables_for(std::size_t n) {
  // Grow only: a run binds every instruction's pointers and resets the states of those that
  // reduce (`bind_instructions`, `bind_single_loop`), so nothing a longer loop left is read.
  thread_local std::vector<ptrs> pv;
  thread_local std::vector<reduction_state> red;
  if (pv.size() < n) {
    pv.resize(n);
    red.resize(n);
  }
  return {pv.data(), red.data()};
}

template <Element T>
index_t program<T>::run_bound_loop(std::size_t l, index_t tile, index_t total, const ptrs* pv, T* regs,
                                   reduction_state* red) const {
  // Blocks of 2^j sum chunks on all threads (a block's reductions are combined as one
  // thread's would be: core/accumulate.hpp's `sum_of_blocks`); a small loop runs here.
  const auto split =
      fusegrad::detail::split_pow2(total, fusegrad::detail::sum_chunk<T>, fusegrad::detail::parallel_grain());
  if (split.count <= 1) run_tiles_of(l, tile, pv, 0, total, regs, red);
  else run_blocks(l, tile, split, total, pv, red);
  return split.count;
}

template <Element T>
void program<T>::run_loop(std::size_t l, std::vector<tensor<T>>& vals, const shape& space,
                          const std::vector<shape>* sizes) const {
  const step& st = steps_[l];
  const index_t total = numel(space);
  const index_t tile = tile_of(st, total);
  T* const regs = loop_buffer(static_cast<std::size_t>((st.registers + st.splats) * tile));
  T* const splats = regs + st.registers * tile;
  const loop_tables t = loop_tables_for(st.code.size());
  bind_instructions(st, vals, sizes, tile, total, splats, t.pv, t.red);
  const index_t blocks = run_bound_loop(l, tile, total, t.pv, regs, t.red);
  if (reduces_[l]) store_reductions(st, vals, sizes, total, blocks, t.red);
}

template <Element T>
std::optional<typename program<T>::single_loop_run> program<T>::bind_single_loop(
    const std::vector<shape>* sizes) const {
  if (steps_.size() != 1 || steps_[0].eager || steps_[0].rows >= 0 || reduces_[0]) return {};
  const step& st = steps_[0];
  single_loop_run r;
  r.total = numel(size_of(sizes, static_cast<std::size_t>(st.space_node)));
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    const auto o = static_cast<std::size_t>(outputs_[i]);
    r.output_shapes.push_back(size_of(sizes, o));
    r.first_of.push_back(
        static_cast<std::size_t>(std::find(outputs_.begin(), outputs_.end(), outputs_[i]) - outputs_.begin()));
  }
  for (std::size_t p = 0; p < st.code.size(); ++p)
    if (!bind_single_instr(p, r)) return {};
  // Every output is a value the loop stores (not an input handed through).
  for (const int o : outputs_)
    if (std::none_of(st.code.begin(), st.code.end(), [&](const instr& in) { return in.node == o && in.reg < 0; }))
      return {};
  return r;
}

template <Element T>
std::optional<int> program<T>::single_loop_place(int k) const {
  const auto& n = g_.nodes()[static_cast<std::size_t>(k)];
  if (n.kind == ir::node_kind::input) return n.index;
  const auto o = std::find(outputs_.begin(), outputs_.end(), k);
  if (o == outputs_.end()) return {};
  return -1 - static_cast<int>(o - outputs_.begin());
}

template <Element T>
bool program<T>::bind_single_instr(std::size_t p, single_loop_run& r) const {
  // As `bind_instructions` binds an element-wise instruction, the addresses left to patch.
  const instr& in = steps_[0].code[p];
  loop_ptrs<T> P;
  if (in.reg >= 0) {
    P.dst_reg = in.reg;
  } else {
    const auto at = single_loop_place(in.node);
    if (!at || *at >= 0) return false;  // a stored temporary (or a loop writing an input)
    P.dst_adv = true;
    r.patches.push_back({p, 2, *at});
  }
  for (int s = 0; s < 2; ++s) {
    const source_ref& sr = in.src[s];
    if ((sr.node) < 0) continue;  // parenthesised: clang reads `sr.node <` as fusegrad::node<
    if (sr.reg >= 0) {
      P.src_reg[s] = sr.reg;
      continue;
    }
    if (sr.splat) {  // (a one-element value: in a program of one loop, an input)
      const auto& n = g_.nodes()[static_cast<std::size_t>(in.node)];
      const auto& u = g_.nodes()[static_cast<std::size_t>(sr.node)];
      if (u.kind != ir::node_kind::input || (n.kind == ir::node_kind::expand && n.average)) return false;
      r.splats.push_back({p, s, u.index, sr.slot});
      continue;
    }
    const auto at = single_loop_place(sr.node);
    if (!at) return false;
    P.adv[s] = true;
    r.patches.push_back({p, s, *at});
    if (*at >= 0 && std::find(r.read_inputs.begin(), r.read_inputs.end(), *at) == r.read_inputs.end())
      r.read_inputs.push_back(*at);
  }
  r.bound.push_back(P);
  return true;
}

template <Element T>
bool program<T>::run_single_loop(const single_loop_run& r, std::span<const tensor<T>* const> inputs,
                                 std::vector<tensor<T>>& out) const {
  for (const int i : r.read_inputs)
    if (!inputs[static_cast<std::size_t>(i)]->is_contiguous()) return false;
  note_if_awaiting_native();
  const std::size_t n_out = r.output_shapes.size();
  out.clear();  // (a caller's reused list keeps its buffer)
  for (std::size_t i = 0; i < n_out; ++i) {
    if (r.first_of[i] == i) out.push_back(fusegrad::detail::empty<T>(r.output_shapes[i]));
    else out.push_back(out[r.first_of[i]]);
  }
  const step& st = steps_[0];
  ptrs* const pv = loop_tables_for(r.bound.size()).pv;  // (the loop reduces nothing: no state to pass)
  std::copy(r.bound.begin(), r.bound.end(), pv);
  // (the impls' own addresses: the inputs are defined and computed, as their signature says,
  // and the outputs were made above)
  for (const auto& [p, field, from] : r.patches) {
    T* const at = from >= 0 ? inputs[static_cast<std::size_t>(from)]->raw_impl()->first()
                            : out[static_cast<std::size_t>(-1 - from)].raw_impl()->first();
    if (field == 2) pv[p].dst = at;
    else pv[p].src[field] = at;
  }
  const index_t tile = tile_of(st, r.total);
  T* const regs = loop_buffer(static_cast<std::size_t>((st.registers + st.splats) * tile));
  for (const auto& sp : r.splats)
    pv[sp.instr].src[sp.field] = fill_splat(regs + st.registers * tile, sp.slot, tile, r.total,
                                            inputs[static_cast<std::size_t>(sp.from)]->raw_impl()->first()[0]);
  run_bound_loop(0, tile, r.total, pv, regs, nullptr);
  return true;
}

template <Element T>
void program<T>::bind_instructions(const step& st, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes,
                                   index_t tile, index_t total, T* splats, ptrs* pv, reduction_state* red) const {
  const auto& ns = g_.nodes();
  for (std::size_t p = 0; p < st.code.size(); ++p) {
    const instr& in = st.code[p];
    const auto k = static_cast<std::size_t>(in.node);
    const auto& n = ns[k];
    ptrs& P = pv[p];
    P = ptrs{};
    const bool reduces = is_reduction(n.kind) || n.kind == ir::node_kind::sum_to;
    if (!reduces && in.reg < 0) {
      vals[k] = fusegrad::detail::empty<T>(size_of(sizes, k));
      P.dst = vals[k].data_ptr();
      P.dst_adv = true;
    } else if (!reduces) {
      P.dst_reg = in.reg;
    }
    for (int s = 0; s < 2; ++s) {
      const source_ref& sr = in.src[s];
      if ((sr.node) < 0) continue;  // parenthesised: clang reads `sr.node <` as fusegrad::node<
      const auto u = static_cast<std::size_t>(sr.node);
      if (sr.reg >= 0) P.src_reg[s] = sr.reg;
      else if (sr.splat) {
        T v = vals[u].data_ptr()[0];
        if (n.kind == ir::node_kind::expand && n.average)
          v /= static_cast<T>(
              fusegrad::detail::reduced_count(size_of(sizes, k), ir::dims_mask(n.dims, size_of(sizes, k).size())));
        P.src[s] = fill_splat(splats, sr.slot, tile, total, v);
      } else {
        P.src[s] = vals[u].data_ptr();
        P.adv[s] = true;
      }
    }
    if (reduces) red[p].reset();  // an element-wise instruction has none
  }
}

template <Element T>
void program<T>::run_blocks(std::size_t l, index_t tile, fusegrad::detail::block_split split, index_t total,
                            const ptrs* pv, reduction_state* red) const {
  const step& st = steps_[l];
  const std::size_t NP = st.code.size();
  std::vector<reduction_state> part(static_cast<std::size_t>(split.count) * NP);  // each starts afresh
  fusegrad::detail::parallel_blocks(split.count, [&](index_t b) {
    thread_local std::vector<T> block_regs;  // this thread's tile registers
    const auto nr = static_cast<std::size_t>(st.registers * tile);
    if (block_regs.size() < nr) block_regs.resize(nr);
    run_tiles_of(l, tile, pv, b * split.size, std::min(total, (b + 1) * split.size), block_regs.data(),
                 part.data() + static_cast<std::size_t>(b) * NP);
  });
  merge_blocks(st, split.count, part.data(), red);
}

template <Element T>
void program<T>::merge_blocks(const step& st, index_t blocks, const reduction_state* part, reduction_state* red) const {
  const auto& ns = g_.nodes();
  const std::size_t NP = st.code.size();
  std::vector<T> totals(static_cast<std::size_t>(blocks));
  for (std::size_t p = 0; p < NP; ++p) {
    const auto kind = ns[static_cast<std::size_t>(st.code[p].node)].kind;
    auto block = [&](index_t b) -> const reduction_state& { return part[static_cast<std::size_t>(b) * NP + p]; };
    if (kind == ir::node_kind::max)
      red[p].merged = fusegrad::detail::max_of_blocks<T>(
          blocks, [&](index_t b) -> auto& { return block(b).max; });
    else if (is_reduction(kind) || kind == ir::node_kind::sum_to)
      red[p].merged = fusegrad::detail::sum_of_block_sums<T>(
          blocks, [&](index_t b) -> auto& { return block(b).sum; }, totals.data());
  }
}

template <Element T>
void program<T>::store_reductions(const step& st, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes,
                                  index_t total, index_t blocks, const reduction_state* red) const {
  const auto& ns = g_.nodes();
  for (std::size_t p = 0; p < st.code.size(); ++p) {
    const auto k = static_cast<std::size_t>(st.code[p].node);
    const auto kind = ns[k].kind;
    if (!is_reduction(kind) && kind != ir::node_kind::sum_to) continue;
    if (kind == ir::node_kind::max && total == 0) fusegrad::detail::fail("max", "max of an empty tensor has no value");
    T r = blocks > 1 ? red[p].merged : kind == ir::node_kind::max ? red[p].max.total() : red[p].sum.total();
    if (kind == ir::node_kind::mean) r = total == 0 ? std::numeric_limits<T>::quiet_NaN() : r / static_cast<T>(total);
    vals[k] = fusegrad::full<T>(size_of(sizes, k), r);
  }
}

}  // namespace fusegrad::detail::jit
