#pragma once
/// \file fusegrad/jit/row_step.hpp
/// A program's *row step*: the nodes around reductions over the last dim (softmax,
/// log_softmax, logsumexp, a normalisation, and their backwards) run row by row, so that a row
/// stays in L1 across the passes its reductions need, instead of each stage walking the whole
/// tensor (or running as an eager step, which is what a tile loop leaves them).
///
/// Relative to one shape S = [..., C] (R rows of C values), a value of the step is
///   - *full*: shape S, walked in tiles along the row;
///   - a *row scalar*: one value per row, shape [..., 1] (keep form) or [...] (drop form);
///   - *one*: a single element (an operand of an earlier step, splatted).
/// The step's nodes are element-wise ops on full values (row scalars and ones broadcast along
/// the row), element-wise ops on row scalars (one scalar op per row), reductions over the last
/// dim and `sum_to` down to the keep form (full -> row scalar), and expands of a row scalar or a
/// one along the row. A reduction's value is ready one *pass* later: a row runs pass 0 over its
/// tiles, finishes pass 0's reductions, computes the row scalars that were waiting for them,
/// runs pass 1, and so on. A full value read in a later pass of the same row is kept in a
/// row buffer (C values, per thread) unless it is written to its tensor anyway.
///
/// Bits: sums go through `running_sum` fed the row (eager mode's row-form sum of the same
/// values), a max through the same lanes the tile loops use (exact; ±0 and NaN payloads may
/// differ from eager's sequential max), element-wise ops through their one tile kernel. Rows are
/// cut among threads, never a row: results do not depend on the thread count. A step's native
/// code (jit/native_emitter.hpp) runs the same plan with the same bits: `run` takes it when given.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/parallel.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/ir/graph.hpp"
#include "fusegrad/jit/eager_step.hpp"
#include "fusegrad/jit/native_abi.hpp"
#include "fusegrad/jit/op_kernels.hpp"
#include "fusegrad/loops/tile.hpp"
#include "fusegrad/loops/tile_reductions.hpp"

namespace fusegrad::detail::jit {

template <Element T>
class native_emitter;

template <Element T>
class row_step {
 public:
  static constexpr index_t tile_elems = fusegrad::detail::tile_elems;
  /// A value's shape relative to the step's rows.
  enum class form : std::uint8_t { none, full, keep, drop, one };

  /// The nodes a row step runs (`in`, a mask) and a node whose shape is its rows' (`space`).
  struct region_t {
    std::vector<bool> in;
    int space = -1;
  };
  /// The nodes of `g` (those `need` marks) that one row step should run (none when there is no
  /// reduction over the last dim, nor a row scalar broadcast along it). The set is convex: no
  /// node outside it both reads from it and feeds it.
  [[nodiscard]] static region_t region(const ir::graph<T>& g, const std::vector<bool>& need);

  /// The step of `members` (in graph order; `region`'s), writing the nodes `store` marks.
  row_step(const ir::graph<T>& g, int space, const std::vector<int>& members, const std::vector<bool>& store);

  /// True when the step still holds for the node shapes `sizes`.
  [[nodiscard]] bool fits(const ir::graph<T>& g, const std::vector<shape>& sizes) const;

  /// Runs the step: `vals` holds every node's value (members' are written here). `fn`: the
  /// step's generated code (jit/native_emitter.hpp) and its members' constants `sc`, run in
  /// place of the interpreter with the same bits (null: interpreted).
  void run(const ir::graph<T>& g, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes,
           native_rows_fn<T> fn = nullptr, const T* sc = nullptr) const;

  [[nodiscard]] std::string to_string(const ir::graph<T>& g) const;

 private:
  // The emitter writes a step's rows as C++ from its plan (members, passes, places).
  friend class native_emitter<T>;
  struct operand {
    int node = -1;
    int member = -1;  ///< index in mem_ when a member
    form f = form::none;
    int splat = -1;  ///< splat slot (a full member's broadcast operand)
  };
  struct member {
    int node = -1;
    form f = form::none;
    bool store = false;
    bool reduces = false;  ///< reduction or sum_to: full -> row scalar
    int pass = 0, ready = 0;
    int reg = -1, rowbuf = -1, scalar = -1;
    int same = -1;       ///< a reduction: an earlier member reducing the same values the same way
    bool alias = false;  ///< an expand read as its operand's splat (no instruction)
    operand src[2];
  };
  /// A pass's work, by member index.
  struct pass_work {
    std::vector<int> scalars, tiles, reductions;
    std::vector<std::pair<int, int>> splats;  ///< member, operand
  };
  /// An instruction's pointers for one row and pass: fixed, or moving with the tile.
  struct iptr {
    const T* a;
    const T* b;
    T* d;
    bool adv_a, adv_b, adv_d;
  };

  /// Whether `s` is a row scalar's shape for rows of shape `S`: [..., 1] (keep) or [...] (drop).
  static bool is_keep(const shape& s, const shape& S) {
    return s.size() == S.size() && std::equal(s.begin(), s.end() - 1, S.begin()) && s.back() == 1;
  }
  static bool is_drop(const shape& s, const shape& S) {
    return s.size() + 1 == S.size() && std::equal(s.begin(), s.end(), S.begin());
  }
  /// The form of `s` relative to rows of shape `S`.
  static form form_of(const shape& s, const shape& S) {
    return s == S ? form::full : is_keep(s, S) ? form::keep : is_drop(s, S) ? form::drop : form::none;
  }
  /// The form of an operand that is not a member (a single element is splatted).
  static form outside_form(const shape& s, const shape& S) {
    const form f = form_of(s, S);
    return f != form::none ? f : numel(s) == 1 ? form::one : form::none;
  }
  /// Whether `s` still has form `f` (on other sizes, where forms may coincide: C = 1, R = 1).
  static bool has_form(const shape& s, const shape& S, form f) {
    if (f == form::one) return numel(s) == 1;
    return f == form::full ? s == S : f == form::keep ? is_keep(s, S) : is_drop(s, S);
  }
  static std::uint64_t last_bit(const shape& S) { return std::uint64_t{1} << (S.size() - 1); }

  /// Can node k join a step over rows of shape S (`in`: the members so far; null: every
  /// node-operand is taken as an outside value)?
  static bool eligible(const ir::graph<T>& g, std::size_t k, const shape& S, const std::vector<bool>* in);
  /// True for a node a tile loop cannot run: a reduction over the last dim, a row scalar
  /// broadcast along the row.
  static bool row_only(const ir::graph<T>& g, std::size_t k, const shape& S);

  // `region`'s phases, in order.
  /// The rows: the shape of the first needed node a tile loop cannot run but a row step can
  /// (`space`: the node of that shape; none: no rows).
  static shape choose_rows(const ir::graph<T>& g, const std::vector<bool>& need, int& space);
  /// Marks in `in`, in graph order, each needed node that can join a step over rows `S` without
  /// breaking convexity (an operand that reads a member from outside keeps it out); true when a
  /// member is one a tile loop cannot run (else the step is not worth it).
  static bool grow_region(const ir::graph<T>& g, const std::vector<bool>& need, const shape& S, std::vector<bool>& in);

  /// Node k's shape: from `sizes` when given, else the graph's.
  static const shape& size_of(const ir::graph<T>& g, const std::vector<shape>* sizes, std::size_t k) {
    return sizes ? (*sizes)[k] : g.nodes()[k].sizes;
  }

  /// `run` where there is nothing to walk (no rows, or rows of no values): the eager ops, and
  /// their errors (the max of nothing).
  void run_eagerly(const ir::graph<T>& g, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes) const;

  // `run`'s phases, in order, when there are rows to walk.
  /// The stored members' tensors, allocated at their sizes.
  void allocate_stored(const ir::graph<T>& g, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes) const;
  /// Pointers to every operand tensor and stored member tensor, by node (the thread's buffer).
  T* const* bind_data(const ir::graph<T>& g, std::vector<tensor<T>>& vals) const;
  /// By member: what an averaging expand divides by, the count its reduction reduced (else 1; the
  /// thread's buffer).
  const T* averaging_divisors(const ir::graph<T>& g, const std::vector<shape>* sizes) const;
  /// The R rows of C values, cut among threads, each thread with its own buffers.
  void run_rows(const std::vector<ir::node<T>>& ns, T* const* dp, const T* dv, index_t R, index_t C) const;
  /// The same rows, cut the same way, through the step's generated code `fn`.
  void run_rows_native(native_rows_fn<T> fn, const T* sc, T* const* dp, const T* dv, index_t R, index_t C) const;

  // The constructor's phases, in order.
  /// Adds a member per node of `members` (their forms, which are stored); returns each
  /// node's index in `mem_` (-1: not a member).
  std::vector<int> add_members(const std::vector<ir::node<T>>& ns, const shape& S, const std::vector<int>& members,
                               const std::vector<bool>& store);
  /// Links each member's operands: members by index (`slot`), other nodes by their form.
  void link_operands(const ir::graph<T>& g, const shape& S, const std::vector<int>& slot);
  /// Gives each member its pass and the pass its value is ready in; finds the reductions
  /// another member already computes (`same`).
  void assign_passes(const std::vector<ir::node<T>>& ns);
  /// The first pass member `e` can run in: a full operand's own pass, another operand's ready pass.
  [[nodiscard]] int first_pass(const member& e) const;
  /// An earlier member (than `i`, a reduction) that reduces the same values the same way, or -1.
  [[nodiscard]] int same_reduction(const std::vector<ir::node<T>>& ns, std::size_t i) const;
  /// Decides where each value lives: a row buffer (a full value read in a later pass), its
  /// operand's splat (an expand), a row scalar's slot.
  void place_values(const std::vector<ir::node<T>>& ns);
  /// Gives the other full values of each pass tile registers, each reused after its last
  /// reader in the pass.
  void allocate_registers();
  /// The members of pass `p` that run as tile instructions (full values and reductions), in order.
  [[nodiscard]] std::vector<int> tile_members(int p) const;
  /// By member: the position in `order` of its last reader there (-1: none).
  [[nodiscard]] std::vector<int> last_readers(const std::vector<int>& order) const;
  /// Returns to `free_regs` the registers of member `e`'s operands in pass `p` whose last reader
  /// it is (`q`: its position in the pass).
  void release_registers(const member& e, int p, int q, const std::vector<int>& last_use,
                         std::vector<int>& free_regs) const;
  /// Gives each broadcast operand of a full member a splat slot.
  void assign_splats();
  /// Lists what each pass runs (`at_`).
  void plan_passes();

  /// One row: its passes, each with the row scalars waiting for it first.
  void run_row(const std::vector<ir::node<T>>& ns, T* const* dp, const T* dv, index_t r, index_t C, index_t width,
               T* rowbuf, T* regs, T* splat, T* scal, fusegrad::detail::running_sum<T>* sums,
               fusegrad::detail::running_max<T>* maxes, iptr* ip) const;
  /// One row's place and this thread's buffers for it (`run_row`'s phases read it).
  struct row_ctx {
    const std::vector<ir::node<T>>& ns;
    T* const* dp;  ///< by node: an operand's data, a stored member's
    const T* dv;   ///< by member: what an averaging expand divides by
    index_t r, C, width, off;
    T* rowbuf;
    T* regs;
    T* splat;
    T* scal;
    fusegrad::detail::running_sum<T>* sums;
    fusegrad::detail::running_max<T>* maxes;
    iptr* ip;
  };
  // `run_row`'s phases, per pass and in order (one body once inlined: a row runs them all).
  /// A row scalar operand's value for this row.
  [[gnu::always_inline]] inline T scalar_of(const operand& o, const row_ctx& x) const;
  /// Where an operand is for this row: a fixed pointer or one moving with the tile (`adv`).
  [[gnu::always_inline]] inline const T* base(const operand& o, bool& adv, const row_ctx& x) const;
  /// The row scalars ready at the pass's start, one scalar op each.
  [[gnu::always_inline]] inline void run_scalars(const pass_work& P, const row_ctx& x) const;
  /// The pass's splats: a row scalar or a one, along a tile (an averaging expand's divided).
  [[gnu::always_inline]] inline void fill_splats(const pass_work& P, const row_ctx& x) const;
  /// The pass's tile instructions resolved for this row (`ip`), its reductions started.
  [[gnu::always_inline]] inline void start_tiles(const pass_work& P, const row_ctx& x) const;
  /// The row's tiles, each through the pass's instructions.
  [[gnu::always_inline]] inline void walk_tiles(const pass_work& P, const row_ctx& x) const;
  /// The pass's reductions finished: each a row scalar, stored where it is an output.
  [[gnu::always_inline]] inline void finish_reductions(const pass_work& P, const row_ctx& x) const;

  int space_ = -1;
  std::vector<member> mem_;
  std::vector<pass_work> at_;
  std::size_t widest_ = 0;
  std::vector<std::pair<int, form>> outside_;
  int passes_ = 0, registers_ = 0, rowbufs_ = 0, splats_ = 0, scalars_ = 0;
};

// ---- out of the class: the precompiled runtime instantiates these once (runtime.hpp) ----

template <Element T>
typename row_step<T>::region_t row_step<T>::region(const ir::graph<T>& g, const std::vector<bool>& need) {
  region_t out;
  out.in.assign(g.nodes().size(), false);
  const shape S = choose_rows(g, need, out.space);
  if (S.empty()) return out;
  if (!grow_region(g, need, S, out.in)) {
    std::fill(out.in.begin(), out.in.end(), false);
    out.space = -1;
  }
  return out;
}

template <Element T>
shape row_step<T>::choose_rows(const ir::graph<T>& g, const std::vector<bool>& need, int& space) {
  const auto& ns = g.nodes();
  for (std::size_t k = 0; k < ns.size(); ++k) {
    if (!need[k]) continue;
    const auto& n = ns[k];
    int cand = -1;
    if ((is_reduction(n.kind) || n.kind == ir::node_kind::sum_to) && n.a >= 0) cand = n.a;
    else if (n.kind == ir::node_kind::expand || n.kind == ir::node_kind::pointwise) cand = static_cast<int>(k);
    if (cand < 0) continue;
    const shape& cs = g.at(cand).sizes;
    if (cs.size() < 2 || cs.back() < 2 || numel(cs) == cs.back())
      continue;  // rows of one value, or one row: tile loops
    if (eligible(g, k, cs, nullptr) && row_only(g, k, cs)) {
      space = cand;
      return cs;
    }
  }
  return {};
}

template <Element T>
bool row_step<T>::grow_region(const ir::graph<T>& g, const std::vector<bool>& need, const shape& S,
                              std::vector<bool>& in) {
  const auto& ns = g.nodes();
  std::vector<bool> dep(ns.size(), false);  // reads a member, directly or not
  bool seeded = false;
  for (std::size_t k = 0; k < ns.size(); ++k) {
    if (!need[k] || ns[k].kind == ir::node_kind::input) continue;
    const auto& n = ns[k];
    bool convex = true, reads = false;
    for (int c : {n.a, n.b})
      if (c >= 0) {
        convex = convex && (in[static_cast<std::size_t>(c)] || !dep[static_cast<std::size_t>(c)]);
        reads = reads || in[static_cast<std::size_t>(c)] || dep[static_cast<std::size_t>(c)];
      }
    if (convex && eligible(g, k, S, &in)) {
      in[k] = true;
      seeded = seeded || row_only(g, k, S);
    } else {
      dep[k] = reads;
    }
  }
  return seeded;
}

template <Element T>
row_step<T>::row_step(const ir::graph<T>& g, int space, const std::vector<int>& members, const std::vector<bool>& store)
    : space_(space) {
  const auto& ns = g.nodes();
  const shape& S = g.at(space_).sizes;
  const std::vector<int> slot = add_members(ns, S, members, store);
  link_operands(g, S, slot);
  assign_passes(ns);
  place_values(ns);
  allocate_registers();
  assign_splats();
  plan_passes();
}

template <Element T>
std::vector<int> row_step<T>::add_members(const std::vector<ir::node<T>>& ns, const shape& S,
                                          const std::vector<int>& members, const std::vector<bool>& store) {
  std::vector<int> slot(ns.size(), -1);  // member -> index in mem_
  for (int m : members) {
    slot[static_cast<std::size_t>(m)] = static_cast<int>(mem_.size());
    member e;
    e.node = m;
    e.f = form_of(ns[static_cast<std::size_t>(m)].sizes, S);
    e.store = store[static_cast<std::size_t>(m)];
    mem_.push_back(e);
  }
  return slot;
}

template <Element T>
void row_step<T>::link_operands(const ir::graph<T>& g, const shape& S, const std::vector<int>& slot) {
  const auto& ns = g.nodes();
  // Operands: members by index, other nodes by their form.
  for (auto& e : mem_) {
    const auto& n = ns[static_cast<std::size_t>(e.node)];
    const int ops[2] = {n.a, n.b};
    for (int s = 0; s < 2; ++s) {
      if (ops[s] < 0) continue;
      operand& o = e.src[s];
      o.node = ops[s];
      o.member = slot[static_cast<std::size_t>(ops[s])];
      o.f = o.member >= 0 ? mem_[static_cast<std::size_t>(o.member)].f : outside_form(g.at(ops[s]).sizes, S);
      if (o.member < 0) outside_.push_back({o.node, o.f});
    }
  }
}

template <Element T>
void row_step<T>::assign_passes(const std::vector<ir::node<T>>& ns) {
  // Passes: a full value runs in the pass after its operands' reductions; a reduction in its
  // operand's pass, ready one pass later; a row-scalar op as soon as its operands are ready.
  for (std::size_t i = 0; i < mem_.size(); ++i) {
    member& e = mem_[i];
    const int p = first_pass(e);
    e.pass = p;
    const auto k = ns[static_cast<std::size_t>(e.node)].kind;
    e.reduces = is_reduction(k) || k == ir::node_kind::sum_to;
    e.ready = e.reduces ? p + 1 : p;
    if (e.reduces) e.same = same_reduction(ns, i);
    if (e.f == form::full || e.reduces) passes_ = std::max(passes_, p + 1);
  }
}

template <Element T>
int row_step<T>::first_pass(const member& e) const {
  int p = 0;
  for (const operand& o : e.src)
    if (o.member >= 0) {
      const member& c = mem_[static_cast<std::size_t>(o.member)];
      p = std::max(p, c.f == form::full ? c.pass : c.ready);
    }
  return p;
}

template <Element T>
int row_step<T>::same_reduction(const std::vector<ir::node<T>>& ns, std::size_t i) const {
  // The same reduction of the same values (logsumexp takes the max with and without keepdim):
  // computed once.
  const auto& n = ns[static_cast<std::size_t>(mem_[i].node)];
  for (std::size_t j = 0; j < i; ++j) {
    const auto& o = ns[static_cast<std::size_t>(mem_[j].node)];
    if (mem_[j].reduces && mem_[j].same < 0 && o.kind == n.kind && o.a == n.a && o.dims == n.dims)
      return static_cast<int>(j);
  }
  return -1;
}

template <Element T>
void row_step<T>::place_values(const std::vector<ir::node<T>>& ns) {
  // Where full values live: their tensor (stored), a row buffer (read in a later pass), or a
  // tile register (freed after its last reader in its pass: `allocate_registers`).
  std::vector<int> last_pass(mem_.size(), -1);
  for (auto& e : mem_)
    for (const operand& o : e.src)
      if (o.member >= 0)
        last_pass[static_cast<std::size_t>(o.member)] = std::max(last_pass[static_cast<std::size_t>(o.member)], e.pass);
  for (std::size_t i = 0; i < mem_.size(); ++i) {
    member& e = mem_[i];
    if (e.f == form::full) {
      if (!e.store && last_pass[i] > e.pass) e.rowbuf = rowbufs_++;
      // An expand read only in its own pass is its operand's splat: no copy.
      e.alias = ns[static_cast<std::size_t>(e.node)].kind == ir::node_kind::expand && !e.store && e.rowbuf < 0;
    } else {
      e.scalar = scalars_++;  // a row scalar: one value per row
    }
  }
}

template <Element T>
void row_step<T>::allocate_registers() {
  for (int p = 0; p < passes_; ++p) {
    const std::vector<int> order = tile_members(p);
    const std::vector<int> last_use = last_readers(order);
    std::vector<int> free_regs;
    for (std::size_t q = 0; q < order.size(); ++q) {
      member& e = mem_[static_cast<std::size_t>(order[q])];
      if (e.f == form::full && !e.store && e.rowbuf < 0 && !e.alias) {
        if (free_regs.empty()) free_regs.push_back(registers_++);
        e.reg = free_regs.back();
        free_regs.pop_back();
      }
      release_registers(e, p, static_cast<int>(q), last_use, free_regs);
    }
  }
}

template <Element T>
std::vector<int> row_step<T>::tile_members(int p) const {
  std::vector<int> order;
  for (std::size_t i = 0; i < mem_.size(); ++i)
    if (mem_[i].pass == p && (mem_[i].f == form::full || mem_[i].reduces)) order.push_back(static_cast<int>(i));
  return order;
}

template <Element T>
std::vector<int> row_step<T>::last_readers(const std::vector<int>& order) const {
  std::vector<int> last_use(mem_.size(), -1);
  for (std::size_t q = 0; q < order.size(); ++q)
    for (const operand& o : mem_[static_cast<std::size_t>(order[q])].src)
      if (o.member >= 0) last_use[static_cast<std::size_t>(o.member)] = static_cast<int>(q);
  return last_use;
}

template <Element T>
void row_step<T>::release_registers(const member& e, int p, int q, const std::vector<int>& last_use,
                                    std::vector<int>& free_regs) const {
  for (int s = 0; s < 2; ++s) {
    const operand& o = e.src[s];
    if (s == 1 && o.node == e.src[0].node) break;  // the same operand twice: released once
    if (o.member < 0) continue;
    const member& c = mem_[static_cast<std::size_t>(o.member)];
    if (c.reg >= 0 && c.pass == p && last_use[static_cast<std::size_t>(o.member)] == q) free_regs.push_back(c.reg);
  }
}

template <Element T>
void row_step<T>::assign_splats() {
  // Splat slots: one per broadcast operand of a full member (filled in the member's pass).
  for (auto& e : mem_) {
    if (e.f != form::full) continue;
    for (operand& o : e.src)
      if (o.node >= 0 && o.f != form::full) o.splat = splats_++;
  }
}

template <Element T>
void row_step<T>::plan_passes() {
  // What each pass runs, in graph order: the row scalars ready at its start, the splats it
  // fills, its tile instructions, its reductions (a row's last "pass" has row scalars only).
  at_.resize(static_cast<std::size_t>(passes_) + 1);
  for (std::size_t i = 0; i < mem_.size(); ++i) {
    const member& e = mem_[i];
    const int m = static_cast<int>(i);
    if (e.f != form::full && !e.reduces) {
      at_[static_cast<std::size_t>(e.ready)].scalars.push_back(m);
      continue;
    }
    auto& P = at_[static_cast<std::size_t>(e.pass)];
    if (e.reduces) {
      P.reductions.push_back(m);
      if (e.same < 0) P.tiles.push_back(m);
      continue;
    }
    for (int s = 0; s < 2; ++s)
      if (e.src[s].splat >= 0) P.splats.push_back({m, s});
    if (!e.alias) P.tiles.push_back(m);
  }
  for (const auto& P : at_) widest_ = std::max(widest_, P.tiles.size());
}

template <Element T>
bool row_step<T>::fits(const ir::graph<T>& g, const std::vector<shape>& sizes) const {
  const shape& S = sizes[static_cast<std::size_t>(space_)];
  if (S.size() != g.at(space_).sizes.size() || S.empty()) return false;
  for (const auto& e : mem_)
    if (!has_form(sizes[static_cast<std::size_t>(e.node)], S, e.f)) return false;
  for (const auto& o : outside_)
    if (!has_form(sizes[static_cast<std::size_t>(o.first)], S, o.second)) return false;
  return true;
}

template <Element T>
void row_step<T>::run(const ir::graph<T>& g, std::vector<tensor<T>>& vals, const std::vector<shape>* sizes,
                      native_rows_fn<T> fn, const T* sc) const {
  const shape& S = size_of(g, sizes, static_cast<std::size_t>(space_));
  const index_t C = S.back(), R = C == 0 ? 0 : numel(S) / C;
  if (R == 0 || C == 0) return run_eagerly(g, vals, sizes);
  allocate_stored(g, vals, sizes);
  T* const* const dp = bind_data(g, vals);
  const T* const dv = averaging_divisors(g, sizes);
  if (fn) run_rows_native(fn, sc, dp, dv, R, C);
  else run_rows(g.nodes(), dp, dv, R, C);
}

template <Element T>
void row_step<T>::allocate_stored(const ir::graph<T>& g, std::vector<tensor<T>>& vals,
                                  const std::vector<shape>* sizes) const {
  for (const auto& e : mem_)
    if (e.store)
      vals[static_cast<std::size_t>(e.node)] =
          fusegrad::detail::empty<T>(size_of(g, sizes, static_cast<std::size_t>(e.node)));
}

template <Element T>
T* const* row_step<T>::bind_data(const ir::graph<T>& g, std::vector<tensor<T>>& vals) const {
  thread_local std::vector<T*> data;
  data.assign(g.nodes().size(), nullptr);
  for (const auto& e : mem_) {
    if (e.store) data[static_cast<std::size_t>(e.node)] = vals[static_cast<std::size_t>(e.node)].data_ptr();
    for (const operand& o : e.src)
      if (o.node >= 0 && o.member < 0)
        data[static_cast<std::size_t>(o.node)] = vals[static_cast<std::size_t>(o.node)].data_ptr();
  }
  return data.data();
}

template <Element T>
const T* row_step<T>::averaging_divisors(const ir::graph<T>& g, const std::vector<shape>* sizes) const {
  const auto& ns = g.nodes();
  thread_local std::vector<T> divisor;
  divisor.assign(mem_.size(), T(1));
  for (std::size_t i = 0; i < mem_.size(); ++i) {
    const auto& n = ns[static_cast<std::size_t>(mem_[i].node)];
    if (n.kind != ir::node_kind::expand || !n.average) continue;
    const shape& to = size_of(g, sizes, static_cast<std::size_t>(mem_[i].node));
    divisor[i] = static_cast<T>(fusegrad::detail::reduced_count(to, ir::dims_mask(n.dims, to.size())));
  }
  return divisor.data();
}

template <Element T>
void row_step<T>::run_rows(const std::vector<ir::node<T>>& ns, T* const* dp, const T* dv, index_t R, index_t C) const {
  const index_t width = std::min(C, tile_elems);
  auto rows = [&](index_t r0, index_t r1) {
    thread_local std::vector<T> buf;
    thread_local std::vector<fusegrad::detail::running_sum<T>> sums;
    thread_local std::vector<fusegrad::detail::running_max<T>> maxes;
    thread_local std::vector<iptr> ip;
    if (ip.size() < widest_) ip.resize(widest_);
    const std::size_t regs_at = static_cast<std::size_t>(rowbufs_) * static_cast<std::size_t>(C);
    const std::size_t splat_at = regs_at + static_cast<std::size_t>(registers_ * tile_elems);
    const std::size_t scal_at = splat_at + static_cast<std::size_t>(splats_ * tile_elems);
    const std::size_t need = scal_at + static_cast<std::size_t>(scalars_);
    if (buf.size() < need) buf.resize(need);
    if (sums.size() < mem_.size()) sums.resize(mem_.size());
    if (maxes.size() < mem_.size()) maxes.resize(mem_.size());
    T* const rowbuf = buf.data();
    T* const regs = rowbuf + regs_at;
    T* const splat = regs + (splat_at - regs_at);
    T* const scal = regs + (scal_at - regs_at);
    for (index_t r = r0; r < r1; ++r)
      run_row(ns, dp, dv, r, C, width, rowbuf, regs, splat, scal, sums.data(), maxes.data(), ip.data());
  };
  fusegrad::detail::parallel_for(R, std::max<index_t>(1, fusegrad::detail::parallel_grain() / C), rows);
}

template <Element T>
void row_step<T>::run_rows_native(native_rows_fn<T> fn, const T* sc, T* const* dp, const T* dv, index_t R,
                                  index_t C) const {
  auto rows = [&](index_t r0, index_t r1) {
    thread_local std::vector<T> rowbuf;  // grows only: the row buffers, as `run_rows`'s
    const std::size_t need = static_cast<std::size_t>(rowbufs_) * static_cast<std::size_t>(C);
    if (rowbuf.size() < need) rowbuf.resize(need);
    fn(dp, dv, sc, C, r0, r1, rowbuf.data());
  };
  fusegrad::detail::parallel_for(R, std::max<index_t>(1, fusegrad::detail::parallel_grain() / C), rows);
}

template <Element T>
void row_step<T>::run_eagerly(const ir::graph<T>& g, std::vector<tensor<T>>& vals,
                              const std::vector<shape>* sizes) const {
  const auto& ns = g.nodes();
  fusegrad::no_grad ng;
  const tensor<T> none;
  for (const auto& e : mem_) {
    const auto& n = ns[static_cast<std::size_t>(e.node)];
    const tensor<T>& b = n.b >= 0 ? vals[static_cast<std::size_t>(n.b)] : none;
    tensor<T> r =
        eval_eager(n, vals[static_cast<std::size_t>(n.a)], b, size_of(g, sizes, static_cast<std::size_t>(e.node)));
    vals[static_cast<std::size_t>(e.node)] = r.is_contiguous() ? r : fusegrad::detail::contiguous_copy(r);
  }
}

template <Element T>
std::string row_step<T>::to_string(const ir::graph<T>& g) const {
  std::string s = "rows of " + fusegrad::to_string(g.at(space_).sizes) + " in " + std::to_string(passes_) +
                  " passes (" + std::to_string(registers_) + " registers, " + std::to_string(rowbufs_) +
                  " row buffers):";
  for (int p = 0; p <= passes_; ++p) {
    std::string line;
    for (const auto& e : mem_) {
      const bool full = e.f == form::full || e.reduces;
      if (full ? e.pass != p : e.ready != p) continue;
      line += " %" + std::to_string(e.node);
      if (!full) line += "(row)";
      else if (e.alias) line += "(splat)";
      else if (e.reg >= 0) line += "->r" + std::to_string(e.reg);
      else if (e.rowbuf >= 0) line += "->b" + std::to_string(e.rowbuf);
    }
    if (!line.empty()) s += " [" + std::to_string(p) + "]" + line;
  }
  return s + "\n";
}

template <Element T>
// Above the complexity bound: one eligibility condition per node kind.
// NOLINTNEXTLINE(readability-function-cognitive-complexity)
bool row_step<T>::eligible(const ir::graph<T>& g, std::size_t k, const shape& S, const std::vector<bool>* in) {
  const auto& n = g.nodes()[k];
  const form f = form_of(n.sizes, S);
  auto fo = [&](int c) -> form {
    if (c < 0) return form::none;
    const shape& cs = g.at(c).sizes;
    if (in && (*in)[static_cast<std::size_t>(c)]) return form_of(cs, S);
    return outside_form(cs, S);
  };
  switch (n.kind) {
    case ir::node_kind::pointwise: {
      if (f == form::none || f == form::one) return false;
      for (int c : {n.a, n.b}) {
        if (c < 0) continue;
        const form cf = fo(c);
        const bool ok =
            f == form::full ? (cf == form::full || cf == form::keep || cf == form::one) : (cf == f || cf == form::one);
        if (!ok) return false;
      }
      return true;
    }
    case ir::node_kind::sum:
    case ir::node_kind::mean:
    case ir::node_kind::max:
      return n.dims == last_bit(S) && fo(n.a) == form::full && (n.keepdim ? f == form::keep : f == form::drop);
    case ir::node_kind::sum_to: return f == form::keep && fo(n.a) == form::full;
    case ir::node_kind::expand: {
      if (f != form::full) return false;
      const form af = fo(n.a);
      return af == form::one || ((af == form::keep || af == form::drop) && n.dims == last_bit(S));
    }
    default: return false;
  }
}

template <Element T>
bool row_step<T>::row_only(const ir::graph<T>& g, std::size_t k, const shape& S) {
  const auto& n = g.nodes()[k];
  if (is_reduction(n.kind) || n.kind == ir::node_kind::sum_to) return numel(n.sizes) != 1;  // (not a full reduction)
  if (n.kind == ir::node_kind::expand) return numel(g.at(n.a).sizes) != 1;
  if (n.kind == ir::node_kind::pointwise && n.sizes == S)
    for (int c : {n.a, n.b})
      if (c >= 0 && g.at(c).sizes != S && numel(g.at(c).sizes) != 1) return true;
  return false;
}

template <Element T>
void row_step<T>::run_row(const std::vector<ir::node<T>>& ns, T* const* dp, const T* dv, index_t r, index_t C,
                          index_t width, T* rowbuf, T* regs, T* splat, T* scal, fusegrad::detail::running_sum<T>* sums,
                          fusegrad::detail::running_max<T>* maxes, iptr* ip) const {
  const row_ctx x{ns, dp, dv, r, C, width, r * C, rowbuf, regs, splat, scal, sums, maxes, ip};
  for (int p = 0; p <= passes_; ++p) {
    const pass_work& P = at_[static_cast<std::size_t>(p)];
    run_scalars(P, x);
    if (p == passes_) break;
    fill_splats(P, x);
    start_tiles(P, x);
    walk_tiles(P, x);
    finish_reductions(P, x);
  }
}

template <Element T>
inline T row_step<T>::scalar_of(const operand& o, const row_ctx& x) const {
  if (o.member >= 0) return x.scal[mem_[static_cast<std::size_t>(o.member)].scalar];
  return o.f == form::one ? x.dp[o.node][0] : x.dp[o.node][x.r];
}

template <Element T>
inline const T* row_step<T>::base(const operand& o, bool& adv, const row_ctx& x) const {
  adv = false;
  if ((o.node) < 0) return nullptr;  // parenthesised: clang reads `o.node <` as a template
  if (o.splat >= 0) return x.splat + o.splat * tile_elems;
  adv = true;
  if (o.member < 0) return x.dp[o.node] + x.off;
  const member& c = mem_[static_cast<std::size_t>(o.member)];
  if (c.rowbuf >= 0) return x.rowbuf + c.rowbuf * x.C;
  if (c.store) return x.dp[c.node] + x.off;
  adv = false;
  return c.alias ? x.splat + c.src[0].splat * tile_elems : x.regs + c.reg * tile_elems;
}

template <Element T>
inline void row_step<T>::run_scalars(const pass_work& P, const row_ctx& x) const {
  for (int m : P.scalars) {
    const member& e = mem_[static_cast<std::size_t>(m)];
    const auto& n = x.ns[static_cast<std::size_t>(e.node)];
    T a = scalar_of(e.src[0], x), b = e.src[1].node >= 0 ? scalar_of(e.src[1], x) : T(0), d;
    kernel_of<T>(n.op)(n.scalar, &a, e.src[1].node >= 0 ? &b : nullptr, &d, 1);
    x.scal[e.scalar] = d;
    if (e.store) x.dp[e.node][x.r] = d;
  }
}

template <Element T>
inline void row_step<T>::fill_splats(const pass_work& P, const row_ctx& x) const {
  for (const auto& [m, s] : P.splats) {
    const member& e = mem_[static_cast<std::size_t>(m)];
    const auto& n = x.ns[static_cast<std::size_t>(e.node)];
    const operand& o = e.src[s];
    T v = scalar_of(o, x);
    if (n.kind == ir::node_kind::expand && n.average) v /= x.dv[m];
    std::fill_n(x.splat + o.splat * tile_elems, x.width, v);
  }
}

template <Element T>
inline void row_step<T>::start_tiles(const pass_work& P, const row_ctx& x) const {
  for (std::size_t q = 0; q < P.tiles.size(); ++q) {
    const auto m = static_cast<std::size_t>(P.tiles[q]);
    const member& e = mem_[m];
    iptr& y = x.ip[q];
    y.a = base(e.src[0], y.adv_a, x);
    y.b = base(e.src[1], y.adv_b, x);
    y.d = nullptr;
    y.adv_d = false;
    if (e.reduces) {
      if (x.ns[static_cast<std::size_t>(e.node)].kind == ir::node_kind::max) x.maxes[m].reset();
      else x.sums[m].reset();
    } else {
      y.adv_d = e.reg < 0;
      y.d = e.reg >= 0 ? x.regs + e.reg * tile_elems : e.rowbuf >= 0 ? x.rowbuf + e.rowbuf * x.C : x.dp[e.node] + x.off;
    }
  }
}

template <Element T>
// Above the complexity bound: the row's tile loop with its partial tile, one body so that it stays
// inlined.
// NOLINTNEXTLINE(readability-function-cognitive-complexity)
inline void row_step<T>::walk_tiles(const pass_work& P, const row_ctx& x) const {
  const index_t C = x.C;
  for (index_t t0 = 0; t0 < C; t0 += tile_elems) {
    const index_t n = std::min(tile_elems, C - t0);
    for (std::size_t q = 0; q < P.tiles.size(); ++q) {
      const auto m = static_cast<std::size_t>(P.tiles[q]);
      const member& e = mem_[m];
      const auto& nd = x.ns[static_cast<std::size_t>(e.node)];
      const iptr& y = x.ip[q];
      const T* a = y.a + (y.adv_a ? t0 : 0);
      if (e.reduces) {
        if (nd.kind == ir::node_kind::max) x.maxes[m].add(a, n);
        else x.sums[m].add(a, n);
        continue;
      }
      T* d = y.d + (y.adv_d ? t0 : 0);
      if (nd.kind == ir::node_kind::expand) std::copy(a, a + n, d);
      else kernel_of<T>(nd.op)(nd.scalar, a, y.b ? y.b + (y.adv_b ? t0 : 0) : nullptr, d, n);
    }
  }
}

template <Element T>
inline void row_step<T>::finish_reductions(const pass_work& P, const row_ctx& x) const {
  for (int mi : P.reductions) {
    const auto m = static_cast<std::size_t>(mi);
    const member& e = mem_[m];
    const auto& nd = x.ns[static_cast<std::size_t>(e.node)];
    T v;
    if (e.same >= 0) v = x.scal[mem_[static_cast<std::size_t>(e.same)].scalar];
    else if (nd.kind == ir::node_kind::max) v = x.maxes[m].total();
    else {
      v = x.sums[m].total();
      if (nd.kind == ir::node_kind::mean) v = v / static_cast<T>(x.C);
    }
    x.scal[e.scalar] = v;
    if (e.store) x.dp[e.node][x.r] = v;
  }
}

}  // namespace fusegrad::detail::jit
