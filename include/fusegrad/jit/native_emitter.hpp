#pragma once
/// \file fusegrad/jit/native_emitter.hpp
/// Native code for a program's loops (the counterpart of Inductor's C++ code generation).
///
/// Each loop of a program (jit/program.hpp) becomes one C++ function: it walks its tiles as the
/// interpreter does, but runs all of a tile's element-wise instructions batch by batch in SIMD
/// registers — an instruction's value goes to memory only where a later step, an output or a
/// reduction reads it — where the interpreter runs each instruction over the whole tile in
/// turn. The values are the op structs' own `value` on `fg::simd<T>`, the last partial batch
/// read and written with the same masked loads and stores, and reductions are fed the same
/// tiles in the same order, so every bit is the interpreter's (a lane's value never depends on
/// the lanes beside it). A row step (jit/row_step.hpp) becomes one function over a range of
/// rows: per row and pass, its row scalars with the interpreter's one-element kernels, its
/// splats, then each pass lowered to a loop's instructions and run over the row's tiles the
/// same way. Eager steps and steps holding a user's op stay with the interpreter.
///
/// The code cache (native/code_cache.hpp, asked by jit/native_request.hpp) compiles a program's functions into one
/// shared object, with the flags this library was built with, and the program swaps them in loop by loop once loaded
/// (`native_code`).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusegrad/core/hash.hpp"
#include "fusegrad/jit/native_abi.hpp"
#include "fusegrad/jit/op_kernels.hpp"
#include "fusegrad/jit/program.hpp"
#include "fusegrad/ops/list.hpp"
#include "fusegrad/ops/table.hpp"

namespace fusegrad::detail::jit {

/// The C++ name of op number `op` of the table for element type `T` (empty: a user's op).
template <Element T>
std::string native_op_name(int op) {
#define FUSEGRAD_NATIVE_OP_ENTRY(arity, form, name) {#name, FUSEGRAD_NATIVE_OP_HAS_STATE_##form},
#define FUSEGRAD_NATIVE_OP_HAS_STATE_plain false
#define FUSEGRAD_NATIVE_OP_HAS_STATE_scalar true
  struct entry {
    std::string_view name;
    bool templated;
  };
  static constexpr entry names[] = {FUSEGRAD_OP_LIST(FUSEGRAD_NATIVE_OP_ENTRY)};
#undef FUSEGRAD_NATIVE_OP_ENTRY
#undef FUSEGRAD_NATIVE_OP_HAS_STATE_plain
#undef FUSEGRAD_NATIVE_OP_HAS_STATE_scalar
  static_assert(std::size(names) == static_cast<std::size_t>(ops::table_size<T>),
                "fusegrad: the native emitter names every op of the op table");
  if (op < 0 || op >= ops::table_size<T>) return {};
  const entry& e = names[static_cast<std::size_t>(op)];
  std::string s = "fusegrad::ops::" + std::string(e.name);
  if (e.templated) s += std::is_same_v<T, float> ? "<float>" : "<double>";
  return s;
}

/// Writes a program's loops as C++ (see this header's comment).
template <Element T>
class native_emitter {
 public:
  explicit native_emitter(const program<T>& p) : prog_(p), ns_(p.source().nodes()) {}

  /// The translation unit (after the prelude's `#include`): one function per loop it can
  /// generate and the entry point `fusegrad_program`; nothing when no loop is generated.
  [[nodiscard]] std::optional<std::string> source();
  /// Per step: its instructions' constants (`native_code::scalars`).
  [[nodiscard]] std::vector<std::vector<T>> scalars() const;
  /// Per step: the tile buffers its function takes (`native_code::buffers`; after `source`).
  [[nodiscard]] std::vector<int> buffers() const;

 private:
  using step = typename program<T>::step;
  using instr = typename program<T>::instr;

  using rows_t = row_step<T>;
  using row_member = typename rows_t::member;
  using row_operand = typename rows_t::operand;

  /// True when every instruction of loop `st` has a generated form (a user's op has none).
  [[nodiscard]] bool can_generate(const step& st) const;
  /// True when every op of row step `rs` has a generated form.
  [[nodiscard]] bool can_generate(const rows_t& rs) const;
  /// Loop `l`'s function.
  void emit_loop(std::size_t l, const step& st);
  /// The loop over the tiles [lo, hi) (`lo`, `hi`: expressions), each through segments
  /// `segment_<name>_<k>` for k < `segs` and then the reductions of `st` (`pv`, `sc`, `tile`,
  /// `buf` and `red` in scope).
  [[nodiscard]] std::string tile_loop(const step& st, const std::string& name, std::size_t segs, const std::string& lo,
                                      const std::string& hi) const;

  /// A pass of a row step in a loop's form: its tile members (reductions computed once, an
  /// expand read as its operand's splat too) as instructions, and each one's member.
  struct row_pass {
    step st;
    std::vector<int> member;
  };
  /// Pass `p` of row step `rs` as a loop (`row_pass`). A value of the pass in a tile register
  /// keeps a register; one of an earlier pass, or from outside, is a stream; a broadcast operand
  /// is a splat.
  [[nodiscard]] row_pass lower_pass(const rows_t& rs, int p) const;
  /// Row step `l`'s function (`native_rows_fn`): per row, its passes as the interpreter's
  /// `run_row` runs them.
  void emit_rows(std::size_t l, const rows_t& rs);
  /// Pass `p`'s work for one row: its splats, its instructions' pointers, its tiles, its
  /// reductions finished (`rp`: the pass lowered, its segments `segment_<name>_<k>`).
  [[nodiscard]] std::string row_pass_body(const rows_t& rs, int p, const row_pass& rp, const std::string& name,
                                          std::size_t segs) const;
  /// The pointers of the pass's instructions for one row (`pv_<p>`).
  [[nodiscard]] std::string row_bindings(const rows_t& rs, int p, const row_pass& rp) const;
  /// The pass's reductions finished, as the interpreter's `finish_reductions`.
  [[nodiscard]] std::string row_reductions(const rows_t& rs, int p, const row_pass& rp) const;
  /// The row scalars ready at pass `p`'s start, each its op's value on a splat batch, lane 0
  /// (the interpreter's one-element tile kernel's bits).
  [[nodiscard]] std::string row_scalars(const rows_t& rs, int p) const;
  /// A row scalar operand's value for row `r`.
  [[nodiscard]] static std::string row_scalar_of(const rows_t& rs, const row_operand& o);
  /// Where full member `c` starts for row `r`: its row buffer or its tensor's row.
  [[nodiscard]] static std::string row_base(const row_member& c);
  /// Instructions [begin, end) of a loop, run together batch by batch over a tile (their
  /// element-wise ones; reductions run after the tile's segments).
  struct segment {
    std::size_t begin, end;
  };
  /// At most this many tensors read or written by one segment: a batch touching many more
  /// streams at once outruns the hardware's prefetchers (the interpreter streams one
  /// instruction's at a time), but each cut costs too: the segment after it walks the tile
  /// again, its streams restart, and the values crossing it go through a tile buffer. 16 keeps
  /// a 10-layer chain's backward (15 streams, as many as the one-pass hand loop reads) in one
  /// segment, where 8 cut it in two; a 20-layer chain's backward (25 streams) ran slower in one
  /// segment than in two (measured: docs/performance.md).
  static constexpr std::size_t max_streams = 16;
  /// An op as costly as a transcendental (`program::costly`): a segment holds at most one,
  /// whose constants then stay in registers (two such ops in one batch body spill them, which
  /// separate loops over a tile in L1 do not).
  [[nodiscard]] bool expensive(const instr& in) const { return program<T>::costly(node_of(in)); }
  /// Cuts loop `st` into segments, in order: at most `max_streams` streams and one `expensive`
  /// op each.
  [[nodiscard]] std::vector<segment> plan_segments(const step& st);
  /// The streams instruction `p` (and its sibling) adds to segment `seg`, which has `have`.
  [[nodiscard]] std::vector<int> streams_of(const step& st, std::size_t p, int seg, const std::vector<int>& have) const;
  /// The tile buffers: values reductions read from registers, and registers a later segment
  /// reads; returns how many.
  int give_buffers(const step& st);
  /// Segment `name`'s function: over a tile's batches, each element-wise instruction's value,
  /// kept in a register, stored where read.
  void emit_segment(const step& st, const segment& sg, const std::string& name);
  /// True when the loop's instruction computing `node` writes it to its tensor.
  [[nodiscard]] bool stored(const step& st, int node) const;
  /// Instruction `p`'s value (`v<node>`), from its operands' (`operand`).
  void emit_value(const step& st, std::size_t p);
  /// Where instruction `p`'s value goes besides its register: its tensor, or its tile register
  /// when a reduction of the loop reads it from there.
  void emit_stores(const step& st, std::size_t p);
  /// Operand `s` of instruction `p`: a register of this batch, a splat, or a stream.
  [[nodiscard]] std::string operand(const step& st, std::size_t p, int s);
  /// A stream of the segment: a local pointer to its tile's first element (`what`), declared
  /// at the segment's top (`streams_`), which the batch reads (`written` false) or writes at `+ i`.
  std::string stream(const std::string& name, const std::string& what, bool written);
  /// The segment's local copy of splat operand `pv[p].src[s][0]`.
  std::string splat(std::size_t p, int s);
  /// The loop over a tile's batches, with one call of the batch body (`[[gnu::flatten]]`
  /// inlines each call: two would compile the body twice), run in two passes: the whole
  /// batches, then the last, partial one, whose streams' first lanes are read into whole
  /// batches on the stack (masked, as the interpreter reads them), run through the same body
  /// and written back. The streams' pointers change only between the passes, so that within
  /// a pass they stay in place and a batch addresses each by its index alone.
  void emit_batch_loop();
  /// The tile's reductions, fed the tile as the interpreter feeds them.
  [[nodiscard]] std::string reductions(const step& st) const;
  [[nodiscard]] bool element_wise(ir::node_kind k) const {
    return k == ir::node_kind::pointwise || k == ir::node_kind::expand;
  }
  [[nodiscard]] const ir::node<T>& node_of(const instr& in) const { return ns_[static_cast<std::size_t>(in.node)]; }

  const program<T>& prog_;
  const std::vector<ir::node<T>>& ns_;
  std::string out_;
  std::vector<bool> defined_;  ///< per node: a register of the batch being written holds it
  std::string pointers_;       ///< the declarations of the segment's splats, then its streams
  /// A stream of the segment being written: its local pointer, and what the batch does with it.
  struct stream_use {
    std::string name, start;  ///< the pointer, and where the tile starts
    bool read, written;
  };
  std::vector<stream_use> streams_;
  std::vector<int> buffer_of_;  ///< per node: the tile buffer a reduction reads it from (-1: none)
  std::vector<int> buffers_;    ///< per step: its tile buffers
  std::vector<int> seg_of_;     ///< per node: the segment of the loop computing it (-1: none)
  std::vector<int> def_of_;     ///< per node: the loop instruction computing it (-1: none)
};

template <Element T>
std::optional<std::string> native_emitter<T>::source() {
  const auto& steps = prog_.steps();
  std::vector<std::size_t> loops;
  out_ = "using T = " + std::string(std::is_same_v<T, float> ? "float" : "double") +
         ";\nusing V = fusegrad::simd<T>;\nusing fusegrad::index_t;\n"
         "using namespace fusegrad::detail::jit;\nusing namespace fusegrad::detail::jit::native_kernel;\n"
         "static_assert(V::size == " +
         std::to_string(simd<T>::size) +
         ", \"fusegrad: generated code must be built for the instruction set of the library that runs it\");\n"
         "namespace {\n";
  for (std::size_t l = 0; l < steps.size(); ++l) {
    const step& st = steps[l];
    const bool rows = st.rows >= 0 && can_generate(prog_.row_steps()[static_cast<std::size_t>(st.rows)]);
    if (rows) emit_rows(l, prog_.row_steps()[static_cast<std::size_t>(st.rows)]);
    else if (!st.eager && st.rows < 0 && can_generate(st)) emit_loop(l, st);
    else {
      buffers_.push_back(0);
      continue;
    }
    loops.push_back(l);
  }
  if (loops.empty()) return std::nullopt;
  out_ +=
      "}  // namespace\n\nextern \"C\" __attribute__((visibility(\"default\"))) void "
      "fusegrad_program(native_loop_fn<T>* fns, native_rows_fn<T>* rows) {\n  (void)fns; (void)rows;\n";
  for (const std::size_t l : loops) {
    const std::string L = std::to_string(l);
    out_ += steps[l].rows >= 0 ? "  rows[" + L + "] = &rows_" + L + ";\n" : "  fns[" + L + "] = &loop_" + L + ";\n";
  }
  out_ += "}\n";
  return std::move(out_);
}

template <Element T>
std::vector<std::vector<T>> native_emitter<T>::scalars() const {
  std::vector<std::vector<T>> s;
  for (const step& st : prog_.steps()) {
    std::vector<T> v;
    for (const instr& in : st.code) v.push_back(node_of(in).scalar);
    if (st.rows >= 0)  // a row step's: by member
      for (const row_member& e : prog_.row_steps()[static_cast<std::size_t>(st.rows)].mem_)
        v.push_back(ns_[static_cast<std::size_t>(e.node)].scalar);
    s.push_back(std::move(v));
  }
  return s;
}

template <Element T>
std::vector<int> native_emitter<T>::buffers() const {
  return buffers_;
}

template <Element T>
bool native_emitter<T>::can_generate(const step& st) const {
  for (const instr& in : st.code) {
    const auto& n = node_of(in);
    if (n.kind == ir::node_kind::pointwise && native_op_name<T>(n.op).empty()) return false;
    if (!element_wise(n.kind) && !is_reduction(n.kind) && n.kind != ir::node_kind::sum_to) return false;
  }
  return true;
}

template <Element T>
bool native_emitter<T>::can_generate(const rows_t& rs) const {
  for (const row_member& e : rs.mem_) {
    const auto& n = ns_[static_cast<std::size_t>(e.node)];
    if (n.kind == ir::node_kind::pointwise && native_op_name<T>(n.op).empty()) return false;
  }
  return true;
}

template <Element T>
void native_emitter<T>::emit_loop(std::size_t l, const step& st) {
  const std::string L = std::to_string(l);
  const std::vector<segment> segs = plan_segments(st);
  buffers_.push_back(give_buffers(st));
  out_ += "\n// loop " + L + ":";
  for (const instr& in : st.code) out_ += (in.by_sibling ? "+%" : " %") + std::to_string(in.node);
  out_ += "\n";
  for (std::size_t k = 0; k < segs.size(); ++k) emit_segment(st, segs[k], L + "_" + std::to_string(k));
  out_ += "void loop_" + L +
          "(const loop_ptrs<T>* pv, const T* sc, index_t tile, index_t lo, index_t hi, T* buf, "
          "reduction_state<T>* red) {\n"
          "  (void)red;\n";
  out_ += tile_loop(st, L, segs.size(), "lo", "hi");
  out_ += "}\n";
}

template <Element T>
std::string native_emitter<T>::tile_loop(const step& st, const std::string& name, std::size_t segs,
                                         const std::string& lo, const std::string& hi) const {
  std::string s = "  for (index_t t0 = " + lo + "; t0 < " + hi + "; t0 += tile) {\n" +
                  "    const index_t n = std::min(tile, " + hi + " - t0);\n";
  for (std::size_t k = 0; k < segs; ++k)
    s += "    segment_" + name + "_" + std::to_string(k) + "(pv, sc, tile, t0, n, buf);\n";
  return s + reductions(st) + "  }\n";
}

template <Element T>
std::vector<typename native_emitter<T>::segment> native_emitter<T>::plan_segments(const step& st) {
  seg_of_.assign(ns_.size(), -1);
  def_of_.assign(ns_.size(), -1);
  for (std::size_t p = 0; p < st.code.size(); ++p)
    def_of_[static_cast<std::size_t>(st.code[p].node)] = static_cast<int>(p);
  std::vector<segment> segs;
  std::vector<int> streams;  // the tensors the open segment reads or writes
  std::size_t begin = 0;
  bool open = false, costly_in_segment = false;
  for (std::size_t p = 0; p < st.code.size(); ++p) {
    if (!element_wise(node_of(st.code[p]).kind) || st.code[p].by_sibling) continue;
    std::vector<int> more = streams_of(st, p, static_cast<int>(segs.size()), streams);
    const bool costly = expensive(st.code[p]);
    if (open && (streams.size() + more.size() > max_streams || (costly && costly_in_segment))) {
      segs.push_back({begin, p});
      begin = p;
      streams.clear();
      costly_in_segment = false;
      more = streams_of(st, p, static_cast<int>(segs.size()), streams);
    }
    streams.insert(streams.end(), more.begin(), more.end());
    costly_in_segment = costly_in_segment || costly;
    open = true;
    const std::size_t width = st.code[p].with_sibling ? 2 : 1;
    for (std::size_t q = p; q < p + width; ++q)
      seg_of_[static_cast<std::size_t>(st.code[q].node)] = static_cast<int>(segs.size());
  }
  segs.push_back({begin, st.code.size()});
  return segs;
}

template <Element T>
std::vector<int> native_emitter<T>::streams_of(const step& st, std::size_t p, int seg,
                                               const std::vector<int>& have) const {
  std::vector<int> more;
  auto touch = [&](int node) {
    if (std::find(have.begin(), have.end(), node) == have.end() &&
        std::find(more.begin(), more.end(), node) == more.end())
      more.push_back(node);
  };
  const std::size_t width = st.code[p].with_sibling ? 2 : 1;
  for (std::size_t q = p; q < p + width; ++q) {
    const instr& in = st.code[q];
    for (const auto& src : in.src) {
      if ((src.node) < 0 || src.splat) continue;  // parenthesised: `src.node <` reads as fusegrad::node<
      const int from = seg_of_[static_cast<std::size_t>(src.node)];
      if (from == seg) continue;  // a register of this segment
      // a value of an earlier segment is read back from its tensor, or from a tile buffer (in cache)
      if (from < 0 || stored(st, src.node)) touch(src.node);
    }
    if (in.reg < 0) touch(in.node);
  }
  return more;
}

template <Element T>
int native_emitter<T>::give_buffers(const step& st) {
  // A value a reduction reads from a tile register, or a later segment reads, gets a tile
  // buffer of its own: the reductions run after the tile's segments, and a segment after the
  // one that computed the value, when the interpreter's register may hold a later value.
  buffer_of_.assign(ns_.size(), -1);
  int buffers = 0;
  for (const instr& in : st.code) {
    const bool reduces = !element_wise(node_of(in).kind);
    for (const auto& src : in.src) {
      if ((src.node) < 0 || src.splat) continue;  // parenthesised: `src.node <` reads as fusegrad::node<
      const auto u = static_cast<std::size_t>(src.node);
      if (def_of_[u] < 0 || stored(st, src.node) || buffer_of_[u] >= 0) continue;
      if (reduces || seg_of_[u] != seg_of_[static_cast<std::size_t>(in.node)]) buffer_of_[u] = buffers++;
    }
  }
  return buffers;
}

template <Element T>
void native_emitter<T>::emit_segment(const step& st, const segment& sg, const std::string& name) {
  // One function per segment, flattened: the op structs' values and xsimd's functions inlined
  // into its loop over the tile's batches, whatever the optimisation level decides elsewhere.
  out_ += "[[gnu::flatten]] void segment_" + name +
          "(const loop_ptrs<T>* pv, const T* sc, index_t tile, index_t t0, index_t n, T* buf) {\n"
          "  (void)pv; (void)sc; (void)tile; (void)buf;\n";
  for (std::size_t p = sg.begin; p < sg.end; ++p) {
    const auto& nd = node_of(st.code[p]);
    if (nd.kind != ir::node_kind::pointwise || st.code[p].by_sibling) continue;
    out_ += "  const auto op" + std::to_string(p) + " = make_op<" + native_op_name<T>(nd.op) + ">(sc[" +
            std::to_string(p) + "]);\n";
  }
  // The batch reads its streams' pointers from locals: read from `pv` in the batch, each would
  // be read again after every store (a vector store may alias anything), in every batch.
  const std::size_t head = out_.size();
  pointers_.clear();
  streams_.clear();
  out_ += "  auto batch = [&](index_t i) {\n";
  defined_.assign(ns_.size(), false);
  for (std::size_t p = sg.begin; p < sg.end; ++p) {
    if (!element_wise(node_of(st.code[p]).kind) || st.code[p].by_sibling) continue;
    emit_value(st, p);
    emit_stores(st, p);
  }
  for (const stream_use& u : streams_)
    pointers_ += std::string(u.written ? "  T* " : "  const T* ") + u.name + " = " + u.start + ";\n";
  out_.insert(head, pointers_);
  out_ += "  };\n";
  emit_batch_loop();
  out_ += "}\n";
}

template <Element T>
void native_emitter<T>::emit_batch_loop() {
  const std::string k = std::to_string(std::max<std::size_t>(streams_.size(), 1));  // no array of size 0
  out_ += "  alignas(64) T tail[" + k + "][V::size];\n  T* tail_out[" + k + "] = {};\n";
  out_ += "  const index_t full = n - n % index_t(V::size), m = n - full;\n";
  out_ += "  for (int pass = 0; pass < 2; ++pass) {\n";
  out_ += "    if (pass == 1) {  // the last batch, partial\n      if (m == 0) break;\n";
  for (std::size_t j = 0; j < streams_.size(); ++j) {
    const stream_use& u = streams_[j];
    const std::string J = std::to_string(j);
    if (u.read) out_ += "      load<true>(" + u.name + " + full, m).store_aligned(tail[" + J + "]);\n";
    if (u.written) out_ += "      tail_out[" + J + "] = " + u.name + " + full;\n";
    out_ += "      " + u.name + " = tail[" + J + "];\n";
  }
  out_ += "    }\n    const index_t end = pass == 0 ? full : index_t(V::size);\n";
  out_ += "    for (index_t i = 0; i < end; i += index_t(V::size)) batch(i);\n";
  out_ += "  }\n";
  bool any_written = false;
  for (const stream_use& u : streams_) any_written = any_written || u.written;
  if (!any_written) return;
  out_ += "  if (m > 0) {\n";
  for (std::size_t j = 0; j < streams_.size(); ++j)
    if (streams_[j].written)
      out_ += "    store<true>(tail_out[" + std::to_string(j) + "], V::load_aligned(tail[" + std::to_string(j) +
              "]), m);\n";
  out_ += "  }\n";
}

template <Element T>
bool native_emitter<T>::stored(const step& st, int node) const {
  const int p = def_of_[static_cast<std::size_t>(node)];
  return p >= 0 && st.code[static_cast<std::size_t>(p)].reg < 0;
}

template <Element T>
void native_emitter<T>::emit_value(const step& st, std::size_t p) {
  const instr& in = st.code[p];
  const auto& n = node_of(in);
  const std::string v = "v" + std::to_string(in.node);
  // Each op's value ends at an `op_boundary`: no multiply of one op is contracted with an add of
  // the next, so each op rounds as the interpreter's one-op loops round it.
  if (in.with_sibling) {
    const std::string w = "v" + std::to_string(st.code[p + 1].node), a = operand(st, p, 0);
    out_ += "    auto [" + v + ", " + w + "] = op" + std::to_string(p) + ".with_sibling(" + a + ");\n    op_boundary(" +
            v + ");\n    op_boundary(" + w + ");\n";
    defined_[static_cast<std::size_t>(in.node)] = true;
    defined_[static_cast<std::size_t>(st.code[p + 1].node)] = true;
    return;
  }
  // The operands first: a stream's first read in the batch appends its load to `out_`.
  const std::string a = operand(st, p, 0);
  if (n.kind == ir::node_kind::expand) out_ += "    const V " + v + " = " + a + ";\n";
  else if (n.b >= 0) {
    const std::string b = operand(st, p, 1);
    out_ += "    V " + v + " = op" + std::to_string(p) + ".value(" + a + ", " + b + ");\n    op_boundary(" + v + ");\n";
  } else out_ += "    V " + v + " = op" + std::to_string(p) + ".value(" + a + ");\n    op_boundary(" + v + ");\n";
  defined_[static_cast<std::size_t>(in.node)] = true;
}

template <Element T>
void native_emitter<T>::emit_stores(const step& st, std::size_t p) {
  for (std::size_t q = p; q < p + (st.code[p].with_sibling ? 2 : 1); ++q) {
    const instr& in = st.code[q];
    const std::string v = "v" + std::to_string(in.node);
    const std::string Q = std::to_string(q);
    if (in.reg < 0)
      out_ += "    " + v + ".store_unaligned(" + stream("d" + Q, "pv[" + Q + "].dst + t0", true) + " + i);\n";
    else if (const int b = buffer_of_[static_cast<std::size_t>(in.node)]; b >= 0)
      out_ += "    " + v + ".store_unaligned(" +
              stream("b" + std::to_string(b), "buf + " + std::to_string(b) + " * tile", true) + " + i);\n";
  }
}

template <Element T>
std::string native_emitter<T>::operand(const step& st, std::size_t p, int s) {
  const auto& src = st.code[p].src[s];
  const auto u = static_cast<std::size_t>(src.node);
  if (defined_[u]) return "v" + std::to_string(src.node);
  if (src.splat) return "V(" + splat(p, s) + ")";
  std::string at;
  if (def_of_[u] >= 0 && stored(st, src.node)) {  // an earlier segment stored it
    const std::string D = std::to_string(def_of_[u]);
    at = stream("d" + D, "pv[" + D + "].dst + t0", false);
  } else if (def_of_[u] >= 0) {
    const std::string B = std::to_string(buffer_of_[u]);
    at = stream("b" + B, "buf + " + B + " * tile", false);
  } else {  // a tensor from outside the loop: one stream per node, whichever operand reads it first
    const std::string P = std::to_string(p), S = std::to_string(s);
    at = stream("s" + std::to_string(src.node), "pv[" + P + "].src[" + S + "] + t0", false);
  }
  // Loaded once per batch, whatever reads it: the same bits, one load and one pointer instead
  // of one per reading operand (a weight read by every layer of a chain).
  const std::string v = "v" + std::to_string(src.node);
  out_ += "    const V " + v + " = V::load_unaligned(" + at + " + i);\n";
  defined_[u] = true;
  return v;
}

template <Element T>
std::string native_emitter<T>::stream(const std::string& name, const std::string& what, bool written) {
  for (stream_use& u : streams_)
    if (u.name == name) {
      u.read = u.read || !written;
      u.written = u.written || written;
      return name;
    }
  streams_.push_back({name, what, !written, written});
  return name;
}

template <Element T>
std::string native_emitter<T>::splat(std::size_t p, int s) {
  const std::string name = "k" + std::to_string(p) + "_" + std::to_string(s);
  if (pointers_.find(" " + name + " =") == std::string::npos)
    pointers_ += "  const T " + name + " = pv[" + std::to_string(p) + "].src[" + std::to_string(s) + "][0];\n";
  return name;
}

template <Element T>
std::string native_emitter<T>::reductions(const step& st) const {
  std::string out;
  for (std::size_t p = 0; p < st.code.size(); ++p) {
    const instr& in = st.code[p];
    const auto kind = node_of(in).kind;
    if (element_wise(kind)) continue;
    const auto& src = in.src[0];
    const std::string P = std::to_string(p);
    // the operand's values over the tile, where the interpreter reads them
    const std::string from = src.reg >= 0
                                 ? "buf + " + std::to_string(buffer_of_[static_cast<std::size_t>(src.node)]) + " * tile"
                             : src.splat ? "pv[" + P + "].src[0]"
                                         : "pv[" + P + "].src[0] + t0";
    out += "    red[" + P + "]." + (kind == ir::node_kind::max ? "max" : "sum") + ".add(" + from + ", n);\n";
  }
  return out;
}

template <Element T>
typename native_emitter<T>::row_pass native_emitter<T>::lower_pass(const rows_t& rs, int p) const {
  row_pass rp;
  for (const int m : rs.tile_members(p)) {
    const row_member& e = rs.mem_[static_cast<std::size_t>(m)];
    if (e.reduces && e.same >= 0) continue;  // an earlier reduction's value, taken when the pass ends
    instr in;
    in.node = e.node;
    // An alias expand is an instruction here (its operand's splat in a register), so that a
    // reader in another segment, or a reduction, gets it from a tile buffer.
    in.reg = e.reg >= 0 || e.alias ? 0 : -1;
    for (int s = 0; s < 2; ++s) {
      const row_operand& o = e.src[s];
      if ((o.node) < 0) continue;  // parenthesised: `o.node <` reads as a template
      auto& src = in.src[s];
      src.node = o.node;
      if (o.splat >= 0) {
        src.splat = true;
        src.slot = o.splat;
      } else if (o.member >= 0) {
        const row_member& c = rs.mem_[static_cast<std::size_t>(o.member)];
        if (c.pass == p && (c.reg >= 0 || c.alias)) src.reg = 0;  // else a stream: stored, or an earlier pass's
      }
    }
    rp.st.code.push_back(in);
    rp.member.push_back(m);
  }
  return rp;
}

template <Element T>
void native_emitter<T>::emit_rows(std::size_t l, const rows_t& rs) {
  const std::string L = std::to_string(l);
  auto at_least_1 = [](auto n) { return std::to_string(std::max<std::size_t>(static_cast<std::size_t>(n), 1)); };
  out_ += "\n// rows " + L + "\n";
  std::string locals, body;
  int bufs = 0;
  std::size_t widest = 1;
  for (int p = 0; p < rs.passes_; ++p) {
    const row_pass rp = lower_pass(rs, p);
    std::vector<segment> segs = plan_segments(rp.st);
    bufs = std::max(bufs, give_buffers(rp.st));
    const std::string P = std::to_string(p), name = L + "r" + P, N = at_least_1(rp.st.code.size());
    if (std::none_of(rp.st.code.begin(), rp.st.code.end(),
                     [&](const instr& in) { return element_wise(node_of(in).kind); }))
      segs.clear();  // reductions only: no batch to run
    for (std::size_t k = 0; k < segs.size(); ++k) emit_segment(rp.st, segs[k], name + "_" + std::to_string(k));
    widest = std::max(widest, rp.st.code.size());
    locals += "  loop_ptrs<T> pv_" + P + "[" + N + "];\n  const T sc_" + P + "[" + N + "] = {";
    for (const int m : rp.member) locals += "scalars[" + std::to_string(m) + "], ";
    locals += "};\n";
    body += row_scalars(rs, p) + row_pass_body(rs, p, rp, name, segs.size());
  }
  body += row_scalars(rs, rs.passes_);
  buffers_.push_back(0);  // the function's tile buffers are its own
  out_ += "void rows_" + L +
          "(T* const* dp, const T* dv, const T* scalars, index_t C, index_t r0, index_t r1, T* rowbuf) {\n"
          "  (void)dp; (void)dv; (void)scalars; (void)rowbuf;\n"
          "  const index_t tile = " +
          std::to_string(rows_t::tile_elems) + ";\n  alignas(64) T buf[" + at_least_1(bufs) + " * " +
          std::to_string(rows_t::tile_elems) + "];\n  T scal[" + at_least_1(rs.scalars_) + "];\n  T spl[" +
          at_least_1(rs.splats_) + "];\n  (void)tile; (void)buf; (void)scal; (void)spl;\n" +
          // one table of reduction states for all passes (a pass resets its own): the stack holds
          // the widest pass's, not every pass's
          "  reduction_state<T> red[" + std::to_string(widest) + "];\n" + locals +
          "  for (index_t r = r0; r < r1; ++r) {\n    const index_t off = r * C;\n    (void)off;\n" + body + "  }\n}\n";
}

template <Element T>
std::string native_emitter<T>::row_pass_body(const rows_t& rs, int p, const row_pass& rp, const std::string& name,
                                             std::size_t segs) const {
  const std::string P = std::to_string(p);
  std::string s = "    {  // pass " + P + "\n";
  for (const auto& [m, k] : rs.at_[static_cast<std::size_t>(p)].splats) {
    const row_member& e = rs.mem_[static_cast<std::size_t>(m)];
    const auto& n = ns_[static_cast<std::size_t>(e.node)];
    const row_operand& o = e.src[k];
    const std::string slot = "spl[" + std::to_string(o.splat) + "]";
    if (n.kind == ir::node_kind::expand && n.average)  // divided as the interpreter's `fill_splats` divides
      s += "      { T v = " + row_scalar_of(rs, o) + "; v /= dv[" + std::to_string(m) + "]; " + slot + " = v; }\n";
    else s += "      " + slot + " = " + row_scalar_of(rs, o) + ";\n";
  }
  s += row_bindings(rs, p, rp);
  for (std::size_t q = 0; q < rp.member.size(); ++q) {
    const row_member& e = rs.mem_[static_cast<std::size_t>(rp.member[q])];
    if (!e.reduces) continue;
    const bool max = ns_[static_cast<std::size_t>(e.node)].kind == ir::node_kind::max;
    s += "      red[" + std::to_string(q) + "]." + (max ? "max" : "sum") + ".reset();\n";
  }
  s += "      loop_ptrs<T>* const pv = pv_" + P + ";\n      const T* const sc = sc_" + P + ";\n      (void)sc;\n";
  s += tile_loop(rp.st, name, segs, "0", "C");
  return s + row_reductions(rs, p, rp) + "    }\n";
}

template <Element T>
std::string native_emitter<T>::row_bindings(const rows_t& rs, int p, const row_pass& rp) const {
  std::string s;
  for (std::size_t q = 0; q < rp.member.size(); ++q) {
    const row_member& e = rs.mem_[static_cast<std::size_t>(rp.member[q])];
    const instr& in = rp.st.code[q];
    const std::string at = "      pv_" + std::to_string(p) + "[" + std::to_string(q) + "].";
    for (int k = 0; k < 2; ++k) {
      const row_operand& o = e.src[k];
      const auto& src = in.src[k];
      if ((src.node) < 0 || src.reg >= 0) continue;  // none, or a register of the pass
      const std::string K = std::to_string(k);
      if (src.splat) s += at + "src[" + K + "] = &spl[" + std::to_string(src.slot) + "];\n";
      else if (o.member >= 0)
        s += at + "src[" + K + "] = " + row_base(rs.mem_[static_cast<std::size_t>(o.member)]) + ";\n";
      else s += at + "src[" + K + "] = dp[" + std::to_string(o.node) + "] + off;\n";
    }
    if (!e.reduces && in.reg < 0) s += at + "dst = " + row_base(e) + ";\n";
  }
  return s;
}

template <Element T>
std::string native_emitter<T>::row_reductions(const rows_t& rs, int p, const row_pass& rp) const {
  std::string s;
  for (const int m : rs.at_[static_cast<std::size_t>(p)].reductions) {
    const row_member& e = rs.mem_[static_cast<std::size_t>(m)];
    const auto& n = ns_[static_cast<std::size_t>(e.node)];
    const std::string k = "scal[" + std::to_string(e.scalar) + "]";
    if (e.same >= 0) {
      s += "      " + k + " = scal[" + std::to_string(rs.mem_[static_cast<std::size_t>(e.same)].scalar) + "];\n";
    } else {
      const auto q = std::find(rp.member.begin(), rp.member.end(), m) - rp.member.begin();
      const std::string red = "red[" + std::to_string(q) + "].";
      if (n.kind == ir::node_kind::max) s += "      " + k + " = " + red + "max.total();\n";
      else if (n.kind == ir::node_kind::mean)  // the total divided by C, as the interpreter divides it
        s += "      { T v = " + red + "sum.total(); v = v / static_cast<T>(C); " + k + " = v; }\n";
      else s += "      " + k + " = " + red + "sum.total();\n";
    }
    if (e.store) s += "      dp[" + std::to_string(e.node) + "][r] = " + k + ";\n";
  }
  return s;
}

template <Element T>
std::string native_emitter<T>::row_scalars(const rows_t& rs, int p) const {
  // Each op's value on a splat of its operands, lane 0: the interpreter's one-element tile
  // kernel computes lane 0 of a batch too (the others zeros), and a lane's value never depends
  // on the lanes beside it; ended at an `op_boundary` as in a batch.
  std::string s;
  for (const int m : rs.at_[static_cast<std::size_t>(p)].scalars) {
    const row_member& e = rs.mem_[static_cast<std::size_t>(m)];
    const auto& n = ns_[static_cast<std::size_t>(e.node)];
    const bool binary = e.src[1].node >= 0;
    const std::string k = "scal[" + std::to_string(e.scalar) + "]";
    s += "    {\n      const auto op = make_op<" + native_op_name<T>(n.op) + ">(scalars[" + std::to_string(m) +
         "]);\n      V d = op.value(V(" + row_scalar_of(rs, e.src[0]) + ")" +
         (binary ? ", V(" + row_scalar_of(rs, e.src[1]) + ")" : std::string()) + ");\n      op_boundary(d);\n      " +
         k + " = d.get(0);\n";
    if (e.store) s += "      dp[" + std::to_string(e.node) + "][r] = " + k + ";\n";
    s += "    }\n";
  }
  return s;
}

template <Element T>
std::string native_emitter<T>::row_scalar_of(const rows_t& rs, const row_operand& o) {
  if (o.member >= 0) return "scal[" + std::to_string(rs.mem_[static_cast<std::size_t>(o.member)].scalar) + "]";
  return "dp[" + std::to_string(o.node) + (o.f == rows_t::form::one ? "][0]" : "][r]");
}

template <Element T>
std::string native_emitter<T>::row_base(const row_member& c) {
  if (c.rowbuf >= 0) return "rowbuf + " + std::to_string(c.rowbuf) + " * C";
  return "dp[" + std::to_string(c.node) + "] + off";
}

}  // namespace fusegrad::detail::jit
