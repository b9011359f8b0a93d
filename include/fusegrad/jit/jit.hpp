#pragma once
/// \file fusegrad/jit/jit.hpp
/// `fg::jit`: the run-time tracer and the guarded kernel cache (the counterparts of Dynamo,
/// its guards and its automatic dynamic shapes), for code whose graph the C++ compiler
/// cannot see: branches on tensor values, loops whose trip count is data, graphs assembled
/// at run time.
///
/// **Tracing.** While a jitted callable runs, the eager ops of this thread (`apply_op`, `sum`,
/// `mean`, `max`) do not compute: they append nodes to a pending IR graph and return *lazy*
/// tensors. A *sync point* — `item()`, `data()`, `to_vector()`, printing, any op the tracer
/// does not capture (matmul, views, custom ops), `backward()` — flushes the pending graph:
/// it is compiled (or fetched from the cache) and run, the lazy tensors still alive receive
/// their values, and tracing resumes in a new graph (a *graph break*). The end of the call
/// flushes too. With `fullgraph = true` a sync point throws instead, naming the op.
/// Tensor hooks (and `retain_grad`) on lazy tensors are no sync point: they become `call_hook`
/// nodes of the graph's backward, on the hooked node's whole gradient (docs/jit.md).
///
/// **Cache.** Each flushed graph is looked up among the function's entries, most recently
/// used first. An entry is its guards — the graph's structure (ops, edges, constants,
/// outputs), each input's rank and sizes (static values, or dynamic dims accepting any size
/// of at least 2), requires_grad, grad mode, aliasing between inputs, and the element type
/// (one cache per type) — and its compiled programs: a forward tile program that also
/// returns what the backward needs, and a backward tile program derived with each op's own
/// derivative rule, the save/recompute split chosen by the compile-time partitioner's
/// min-cut (the same `constexpr` code, run at run time).
///
/// **Automatic dynamic shapes.** The first compile specialises on sizes. When a size guard
/// fails, the dims that changed are marked dynamic and one shape-generic entry is compiled,
/// which later sizes hit. Sizes 0 and 1 stay specialised. After `recompile_limit` compiles
/// (default 8) a function's misses run eagerly, and one log line says why.
///
/// Thread safety: a jitted function may be called from many threads at once; each thread
/// traces on its own and the cache is shared under a mutex (programs are immutable).
///
/// Limits: input tensors must not be modified in place between an op that reads them and the
/// next sync point; dims are at most 64.

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fusegrad/ir/program.hpp"
#include "fusegrad/jit/log.hpp"
#include "fusegrad/partition/plan.hpp"

namespace fusegrad {

/// Options of `fg::jit` (like `torch.compile`'s `fullgraph` and Dynamo's cache size limit).
/// How captured graphs run: tile programs, or node by node through the eager ops.
enum class jit_backend { fused, eager };

struct jit_options {
  bool fullgraph = false;   ///< a graph break throws `fusegrad::error` instead of splitting
  int recompile_limit = 8;  ///< compiles per function before misses run eagerly
  std::string name = "function";  ///< used in log lines
  jit_backend backend = jit_backend::fused;
  logs::channel graph_log = logs::graph;  ///< where a newly compiled graph is printed
};

/// One cache entry, readable.
struct jit_entry_info {
  std::string dtype;   ///< "float32" or "float64"
  std::string guards;  ///< one guard per line
  std::string graph;   ///< the captured graph as code
  std::string code;    ///< the compiled forward (and backward) program
  bool dynamic = false;
};

namespace detail::jit {

/// What an entry assumes about one input.
struct input_guard {
  shape sizes;
  std::uint64_t dynamic = 0;  ///< bit d: dim d accepts any size >= 2
  bool requires_grad = false;
};

/// A backward program of an entry, for one set of outputs that received gradients. An output
/// whose gradient is absent (nothing the loss depends on used it) is left out of the
/// derivation, so nothing multiplies a zero by its local derivative, which may be inf or NaN
/// (eager mode never visits such a node either).
template <Element T>
struct backward_code {
  std::vector<char> given;             ///< per grad output (`entry::grad_outputs`): its gradient is an input
  std::vector<int> hooks;              ///< per `call_hook` slot: the forward node whose gradient it hooks
  ir::graph<T> joint;                  ///< forward + backward of the given outputs (shapes of dynamic entries)
  std::optional<ir::program<T>> prog;  ///< inputs: the entry's saved values, then the given gradients
  std::vector<int> origin;             ///< backward node -> joint node
  std::vector<int> grad_of;            ///< per wrt input: its output in `prog` (-1: zero gradient)
};

template <Element T>
struct entry {
  // Key and guards.
  std::uint64_t hash = 0;
  ir::graph<T> fwd_graph;
  std::vector<int> outputs;
  std::vector<int> hooks;  ///< per tensor hook of the call (its slot): the node it hooks
  std::vector<input_guard> inputs;
  std::vector<int> alias_of;
  bool grad_mode = true;
  bool dynamic = false;
  std::vector<std::string> names;
  // Code.
  bool eager = false;  ///< run node by node on the eager tape (graph too large to partition)
  std::optional<ir::program<T>> fwd;  ///< outputs: the graph's outputs, then the saved values
  // Backward.
  std::vector<int> grad_outputs;  ///< positions in `outputs` that take gradients
  std::vector<int> wrt;           ///< input indices that receive gradients
  std::vector<int> wrt_nodes;     ///< their input nodes
  std::vector<int> saved;         ///< forward nodes the forward saves (chosen for all grad outputs)
  std::shared_ptr<const backward_code<T>> bwd;  ///< the backward when every grad output has a gradient
  /// Backwards for calls where some grad outputs received none, derived on first use (keyed
  /// on which did, and for dynamic entries on the shapes fitting their loops).
  mutable std::mutex variants_mu;
  mutable std::vector<std::shared_ptr<const backward_code<T>>> variants;

  [[nodiscard]] bool accepts(const std::vector<tensor<T>>& ins, bool gm, const std::vector<int>& alias) const {
    if (gm != grad_mode || ins.size() != inputs.size() || alias != alias_of) return false;
    for (std::size_t i = 0; i < ins.size(); ++i) {
      const input_guard& g = inputs[i];
      const shape& s = ins[i].shape();
      if (s.size() != g.sizes.size()) return false;
      for (std::size_t d = 0; d < s.size(); ++d)
        if ((g.dynamic >> d) & 1U ? s[d] < 2 : s[d] != g.sizes[d]) return false;
      if (g.requires_grad != (gm && ins[i].requires_grad())) return false;
    }
    return true;
  }

  [[nodiscard]] std::string guards_text() const {
    std::string s = "dtype == " + std::string(dtype_name<T>()) + "\ngrad_mode == " + (grad_mode ? "true" : "false") + "\n";
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto& g = inputs[i];
      s += "input '" + names[i] + "': rank == " + std::to_string(g.sizes.size());
      for (std::size_t d = 0; d < g.sizes.size(); ++d)
        s += ", size(" + std::to_string(d) + ")" + ((g.dynamic >> d) & 1U ? " >= 2 (dynamic)" : " == " + std::to_string(g.sizes[d]));
      s += std::string(", requires_grad == ") + (g.requires_grad ? "true" : "false");
      if (alias_of[i] >= 0) s += ", aliases input '" + names[static_cast<std::size_t>(alias_of[i])] + "'";
      s += "\n";
    }
    s += "graph structure hash == " + std::to_string(hash) + "\n";
    return s;
  }
  [[nodiscard]] std::string code_text() const {
    if (eager) return "(runs eagerly, node by node)\n";
    std::string s = "forward:\n" + fwd->to_string();
    if (bwd) s += "backward (saves " + std::to_string(saved.size()) + "):\n" + bwd->prog->to_string();
    return s;
  }
};

/// Dims marked dynamic for one graph structure (per input).
struct site_marks {
  std::uint64_t hash = 0;
  std::vector<std::uint64_t> dims;
};

template <Element T>
struct cache {
  std::vector<std::shared_ptr<const entry<T>>> entries;  ///< most recently used first
  std::vector<site_marks> marks;
};

/// Everything a jitted function shares between calls and threads.
struct function_state {
  explicit function_state(jit_options o) : opts(std::move(o)) {}
  jit_options opts;
  std::mutex mu;
  std::tuple<cache<float>, cache<double>> caches;
  int compiles = 0;
  bool limit_logged = false;
  std::set<std::string> breaks_logged;
  template <Element T>
  cache<T>& cache_of() {
    return std::get<cache<T>>(caches);
  }
};

// --- partition at run time ------------------------------------------------------------------

/// The save/recompute split of a joint graph, from the compile-time partitioner's `make_plan`.
struct split {
  std::vector<int> saved;
  std::vector<bool> keep;  ///< node the backward computes (recomputed or backward region)
};

template <std::size_t N, Element T>
split plan_split(const ir::graph<T>& J, int n_inputs, const std::vector<int>& fwd_roots, const std::vector<int>& bwd_roots) {
  auto jg = std::make_unique<partition::joint_graph<N>>();
  for (std::size_t k = 0; k < N; ++k) {
    auto& pn = jg->nodes[k];
    if (k >= J.size()) {
      pn.kind = partition::node_kind::constant;
      continue;
    }
    const auto& n = J.nodes()[k];
    switch (n.kind) {
      case ir::node_kind::input:
        pn.kind = n.index < n_inputs ? partition::node_kind::input : partition::node_kind::grad_input;
        break;
      case ir::node_kind::pointwise:
      case ir::node_kind::expand: pn.kind = partition::node_kind::pointwise; break;
      default: pn.kind = partition::node_kind::reduction; break;
    }
    pn.children[0] = n.a;
    pn.children[1] = n.b;
  }
  for (int r : fwd_roots) jg->nodes[static_cast<std::size_t>(r)].forward_root = true;
  for (int r : bwd_roots)
    if (r >= 0) jg->nodes[static_cast<std::size_t>(r)].backward_root = true;
  const auto p = std::make_unique<partition::plan<N>>(partition::make_plan(*jg, partition::policy{}));
  split s;
  for (int i = 0; i < p->saved_count; ++i) s.saved.push_back(p->saved_nodes[i]);
  s.keep.assign(J.size(), false);
  for (std::size_t k = 0; k < J.size(); ++k) s.keep[k] = p->recompute[k] || p->backward[k];
  return s;
}

/// Largest joint graph partitioned (the partitioner works on fixed-size tables).
inline constexpr std::size_t max_joint_nodes = 1024;

template <Element T>
split plan_any(const ir::graph<T>& J, int n_inputs, const std::vector<int>& fr, const std::vector<int>& br) {
  if (J.size() <= 64) return plan_split<64>(J, n_inputs, fr, br);
  if (J.size() <= 256) return plan_split<256>(J, n_inputs, fr, br);
  return plan_split<max_joint_nodes>(J, n_inputs, fr, br);
}

/// The backward of entry `e`'s grad outputs whose flag in `given` is set, derived on forward
/// graph `g` (the entry's, or the same with other sizes) with `call_hook` slot `s` on node
/// `hooks[s]`, and lowered to a program whose inputs are the saved values `saved`, then the
/// given gradients. `choose_saved`: `saved` is
/// chosen here by the partitioner (the entry's first backward, all gradients given; null
/// when the joint graph is too large to partition); otherwise it is the entry's set, which
/// suffices for any subset of the gradients (their backward reads a subset of what the
/// whole backward reads).
template <Element T>
std::shared_ptr<backward_code<T>> derive_backward(const entry<T>& e, const ir::graph<T>& g, std::vector<char> given,
                                                  const std::vector<int>& hooks, std::vector<int>& saved, bool choose_saved) {
  auto b = std::make_shared<backward_code<T>>();
  b->given = std::move(given);
  b->hooks = hooks;
  b->joint = g;
  std::vector<int> gouts;
  for (std::size_t j = 0; j < e.grad_outputs.size(); ++j)
    if (b->given[j]) gouts.push_back(e.outputs[static_cast<std::size_t>(e.grad_outputs[j])]);
  const std::vector<int> grads = ir::backward(b->joint, gouts, e.wrt_nodes, hooks);
  const ir::graph<T>& J = b->joint;
  if (choose_saved) {
    if (J.size() > max_joint_nodes) return nullptr;
    saved = plan_any(J, g.num_inputs(), e.outputs, grads).saved;
  }
  // The backward graph: saved values and the given gradients become its inputs; it holds
  // the nodes the input gradients need from them.
  ir::graph<T> B;
  std::vector<int> map(J.size(), -1);
  for (int s : saved) {
    map[static_cast<std::size_t>(s)] = B.add_input(J.at(s).sizes);
    b->origin.push_back(s);
  }
  for (std::size_t k = g.size(); k < J.size(); ++k) {
    const auto& n = J.nodes()[k];
    if (n.kind == ir::node_kind::input) {  // a given gradient (always an input, even if unused)
      map[k] = B.add_input(n.sizes);
      b->origin.push_back(static_cast<int>(k));
    }
  }
  std::vector<char> need(J.size(), 0);
  for (int gnode : grads)
    if (gnode >= 0) need[static_cast<std::size_t>(gnode)] = 1;
  for (std::size_t k = J.size(); k-- > 0;) {
    if (!need[k] || map[k] >= 0) continue;
    const auto& n = J.nodes()[k];
    if (n.kind == ir::node_kind::input)
      fusegrad::detail::fail("jit", "internal error: the partition left input ", n.index, " unsaved");
    for (int c : {n.a, n.b})  // (a shape reference `ref` is kept only when present anyway)
      if (c >= 0) need[static_cast<std::size_t>(c)] = 1;
  }
  for (std::size_t k = 0; k < J.size(); ++k) {
    if (map[k] >= 0 || !need[k]) continue;
    ir::node<T> n = J.nodes()[k];
    for (int* c : {&n.a, &n.b, &n.ref})
      if (*c >= 0) *c = map[static_cast<std::size_t>(*c)];
    map[k] = B.add_copy(std::move(n));
    b->origin.push_back(static_cast<int>(k));
  }
  std::vector<int> bouts;
  for (int gnode : grads) {
    if (gnode < 0) {
      b->grad_of.push_back(-1);
      continue;
    }
    b->grad_of.push_back(static_cast<int>(bouts.size()));
    bouts.push_back(map[static_cast<std::size_t>(gnode)]);
  }
  b->prog.emplace(std::move(B), std::move(bouts));
  return b;
}

/// Compiles an entry for graph `g` (outputs `outs`, `rg`: node needs grad) and these inputs.
template <Element T>
std::shared_ptr<entry<T>> compile(const ir::graph<T>& g, const std::vector<int>& outs, const std::vector<char>& rg,
                                  const std::vector<tensor<T>>& ins, bool gm, const std::vector<int>& alias,
                                  const std::vector<std::uint64_t>& marks, std::vector<std::string> names, std::uint64_t hash,
                                  const std::vector<int>& hooks) {
  auto e = std::make_shared<entry<T>>();
  e->hash = hash;
  e->hooks = hooks;
  e->fwd_graph = g;
  e->outputs = outs;
  e->grad_mode = gm;
  e->alias_of = alias;
  e->names = std::move(names);
  const bool fixed = g.has_fixed_shapes();  // shapes written into nodes: stay specialised
  for (std::size_t i = 0; i < ins.size(); ++i) {
    input_guard ig{ins[i].shape(), 0, gm && ins[i].requires_grad()};
    for (std::size_t d = 0; d < ig.sizes.size(); ++d)
      if (!fixed && i < marks.size() && ((marks[i] >> d) & 1U) && ig.sizes[d] >= 2) ig.dynamic |= std::uint64_t{1} << d;
    e->dynamic = e->dynamic || ig.dynamic != 0;
    e->inputs.push_back(std::move(ig));
  }
  std::vector<int> input_node(ins.size(), -1);
  for (std::size_t k = 0; k < g.size(); ++k)
    if (g.nodes()[k].kind == ir::node_kind::input) input_node[static_cast<std::size_t>(g.nodes()[k].index)] = static_cast<int>(k);
  for (std::size_t p = 0; p < outs.size(); ++p)
    if (rg[static_cast<std::size_t>(outs[p])]) e->grad_outputs.push_back(static_cast<int>(p));
  for (std::size_t i = 0; i < ins.size(); ++i)
    if (e->inputs[i].requires_grad) e->wrt.push_back(static_cast<int>(i));
  std::vector<int> fwd_outs = outs;
  if (gm && !e->wrt.empty() && !e->grad_outputs.empty()) {
    for (int i : e->wrt) e->wrt_nodes.push_back(input_node[static_cast<std::size_t>(i)]);
    auto b = derive_backward(*e, g, std::vector<char>(e->grad_outputs.size(), 1), e->hooks, e->saved, /*choose_saved=*/true);
    if (!b) {
      e->eager = true;
      return e;
    }
    e->bwd = std::move(b);
    fwd_outs.insert(fwd_outs.end(), e->saved.begin(), e->saved.end());
  }
  e->fwd.emplace(g, std::move(fwd_outs));
  return e;
}

/// Node shapes of backward `b`'s joint graph, from the shapes `fwd` of the forward's nodes
/// (its gradient inputs have the shapes of their outputs).
template <Element T>
std::vector<shape> joint_shapes(const entry<T>& e, const backward_code<T>& b, const std::vector<shape>& fwd) {
  std::vector<shape> in(e.inputs.size());
  for (std::size_t k = 0; k < e.fwd_graph.size(); ++k)
    if (const auto& n = e.fwd_graph.nodes()[k]; n.kind == ir::node_kind::input) in[static_cast<std::size_t>(n.index)] = fwd[k];
  for (std::size_t j = 0; j < e.grad_outputs.size(); ++j)
    if (b.given[j]) in.push_back(fwd[static_cast<std::size_t>(e.outputs[static_cast<std::size_t>(e.grad_outputs[j])])]);
  return b.joint.infer_shapes(in);
}

/// Node shapes of an entry for these inputs (joint graph when it has a backward).
template <Element T>
std::vector<shape> entry_shapes(const entry<T>& e, const std::vector<tensor<T>>& ins) {
  std::vector<shape> in_shapes;
  for (const auto& t : ins) in_shapes.push_back(t.shape());
  std::vector<shape> s = e.fwd_graph.infer_shapes(in_shapes);
  return e.bwd ? joint_shapes(e, *e.bwd, s) : s;
}

/// Node shapes of backward `b`'s program, from its joint graph's.
template <Element T>
std::vector<shape> backward_shapes(const backward_code<T>& b, const std::vector<shape>& joint_shapes) {
  std::vector<shape> s;
  s.reserve(b.origin.size());
  for (int o : b.origin) s.push_back(joint_shapes[static_cast<std::size_t>(o)]);
  return s;
}

/// The backward of entry `e` when only the grad outputs flagged in `given` received
/// gradients, with `call_hook` slot `s` on node `hooks[s]` (the entry's hooks, then hooks
/// registered on its outputs after it ran): derived on first use and kept with the entry. `fwd`: the forward's node shapes
/// of a call of a dynamic entry (null: the entry's own sizes); `bs` receives the program's
/// node shapes for it.
template <Element T>
std::shared_ptr<const backward_code<T>> backward_for(const entry<T>& e, const std::vector<char>& given,
                                                     const std::vector<int>& hooks, const std::vector<shape>* fwd,
                                                     std::vector<shape>& bs) {
  std::lock_guard lock(e.variants_mu);
  for (const auto& v : e.variants) {
    if (v->given != given || v->hooks != hooks) continue;
    if (!fwd) return v;
    std::vector<shape> s = backward_shapes(*v, joint_shapes(e, *v, *fwd));
    if (!v->prog->fits(s)) continue;
    bs = std::move(s);
    return v;
  }
  ir::graph<T> g;  // the forward graph, with this call's sizes
  if (fwd) {
    for (std::size_t k = 0; k < e.fwd_graph.size(); ++k) {
      ir::node<T> n = e.fwd_graph.nodes()[k];
      n.sizes = (*fwd)[k];
      g.add_copy(std::move(n));
    }
  }
  std::vector<int> saved = e.saved;
  std::shared_ptr<const backward_code<T>> v = derive_backward(e, fwd ? g : e.fwd_graph, given, hooks, saved, /*choose_saved=*/false);
  if (fwd) bs = backward_shapes(*v, joint_shapes(e, *v, *fwd));
  e.variants.push_back(v);
  return v;
}

/// Why the most recent entry of a graph rejects these inputs (for the recompiles log), and
/// which dims changed size (to be marked dynamic).
template <Element T>
std::string first_failure(const entry<T>& e, const std::vector<tensor<T>>& ins, bool gm, const std::vector<int>& alias,
                          std::vector<std::uint64_t>& changed) {
  std::string why;
  changed.assign(ins.size(), 0);
  auto note = [&](std::string s) {
    if (why.empty()) why = std::move(s);
  };
  if (gm != e.grad_mode) note(std::string("grad mode changed from ") + (e.grad_mode ? "enabled" : "disabled") + " to " + (gm ? "enabled" : "disabled"));
  if (ins.size() != e.inputs.size()) note("number of inputs changed from " + std::to_string(e.inputs.size()) + " to " + std::to_string(ins.size()));
  for (std::size_t i = 0; i < std::min(ins.size(), e.inputs.size()); ++i) {
    const auto& g = e.inputs[i];
    const shape& s = ins[i].shape();
    const std::string nm = "input '" + e.names[i] + "'";
    if (s.size() != g.sizes.size()) {
      note("rank of " + nm + " changed from " + std::to_string(g.sizes.size()) + " to " + std::to_string(s.size()));
      continue;
    }
    for (std::size_t d = 0; d < s.size(); ++d) {
      const bool dyn = (g.dynamic >> d) & 1U;
      if (dyn ? s[d] >= 2 : s[d] == g.sizes[d]) continue;
      if (s[d] >= 2) {
        changed[i] |= std::uint64_t{1} << d;
        note("size of " + nm + " dim " + std::to_string(d) + " changed from " + std::to_string(g.sizes[d]) + " to " +
             std::to_string(s[d]) + ": marking dim " + std::to_string(d) + " dynamic");
      } else {
        note("size of " + nm + " dim " + std::to_string(d) + " is " + std::to_string(s[d]) +
             " (sizes 0 and 1 are specialised, never dynamic)");
      }
    }
    if (g.requires_grad != (gm && ins[i].requires_grad()))
      note("requires_grad of " + nm + " changed from " + (g.requires_grad ? "true" : "false") + " to " + (g.requires_grad ? "false" : "true"));
  }
  if (alias != e.alias_of) note("aliasing between inputs changed");
  if (why.empty()) why = "shapes no longer fit the program's loops";
  return why;
}

/// The tracer of one element type on one thread, during one call of a jitted function.
template <Element T>
class trace final : public recorder<T>, public lazy_source {
 public:
  trace() = default;
  trace(const trace&) = delete;
  trace& operator=(const trace&) = delete;

  /// Starts tracing a call of the function with state `st` (a trace is reused by the calls
  /// of its thread, keeping its buffers).
  void begin(function_state& st) {
    st_ = &st;
    names_.clear();
  }
  /// Names an argument's tensor: `key` for a map entry, else "arg<arg>" or "arg<arg>[<elem>]".
  void name(const void* impl, int arg, int elem, const std::string* key) { names_.push_back({impl, arg, elem, key}); }

  tensor<T> pointwise(int op, T scalar, const tensor<T>& a, const tensor<T>* b) override {
    split_on_grad_mode();
    const int ia = node_of(a), ib = b ? node_of(*b) : -1;
    const int id = g_.add_pointwise(op, scalar, ia, ib);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  tensor<T> reduce(reduce_op k, const tensor<T>& x, const std::vector<bool>& mask, bool keepdim) override {
    split_on_grad_mode();
    if (mask.size() > ir::max_rank)
      fail("jit", "a traced tensor has ", mask.size(), " dims; expected at most ", ir::max_rank);
    const int ix = node_of(x);
    std::uint64_t dims = 0;
    for (std::size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) dims |= std::uint64_t{1} << d;
    const auto kind = k == reduce_op::sum ? ir::node_kind::sum : k == reduce_op::mean ? ir::node_kind::mean : ir::node_kind::max;
    const int id = g_.add_reduction(kind, ix, mask.empty() ? 0 : dims, keepdim);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  tensor<T> sum_to(const tensor<T>& g, const shape& target) override {
    split_on_grad_mode();
    const int ig = node_of(g);
    const int id = g_.add_sum_to_shape(ig, target);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  tensor<T> expand(const tensor<T>& g, const shape& target, const std::vector<bool>& mask) override {
    split_on_grad_mode();
    if (mask.size() > ir::max_rank) fail("jit", "a traced tensor has ", mask.size(), " dims; expected at most ", ir::max_rank);
    std::uint64_t dims = 0;
    for (std::size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) dims |= std::uint64_t{1} << d;
    const int ig = node_of(g);
    const int id = g_.add_expand_shape(ig, target, dims);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  std::vector<tensor<T>> replay(const ir::graph<T>& b, const std::vector<int>& outputs, const std::vector<tensor<T>>& inputs,
                                const std::vector<shape>* sizes, const std::vector<ir::call_fn<T>>* fns) override {
    split_on_grad_mode();
    const int aot = next_aot_++;  // the inlined nodes print as %aot<id>_<node of b>
    std::vector<int> map(b.size(), -1);
    for (std::size_t k = 0; k < b.size(); ++k) {
      ir::node<T> n = b.nodes()[k];
      if (n.kind == ir::node_kind::input) {
        map[k] = node_of(inputs.at(static_cast<std::size_t>(n.index)));
        continue;
      }
      for (int* c : {&n.a, &n.b})
        if (*c >= 0) *c = map[static_cast<std::size_t>(*c)];
      if (n.ref >= 0) n.ref = map[static_cast<std::size_t>(n.ref)];
      const bool rg = needs_grad(n);
      if (sizes) n.sizes = (*sizes)[k];
      if (n.kind == ir::node_kind::call_hook || n.kind == ir::node_kind::call) {  // its function joins this graph's
        if (!fns || n.index < 0 || static_cast<std::size_t>(n.index) >= fns->size())
          fail("jit", "a replayed call node needs function ", n.index, " but ", fns ? fns->size() : 0,
               " were given; expected one function per call slot");
        calls_.push_back((*fns)[static_cast<std::size_t>(n.index)]);
        call_names_.emplace_back(n.kind == ir::node_kind::call_hook ? "hook" : "call");
        n.index = static_cast<int>(calls_.size()) - 1;
      }
      map[k] = g_.add_copy(std::move(n));
      rg_.push_back(rg);
      aot_.push_back({map[k], aot, static_cast<int>(k)});
    }
    std::vector<tensor<T>> out;
    for (int o : outputs) {
      const int id = map[static_cast<std::size_t>(o)];
      if (g_.at(id).kind == ir::node_kind::input) out.push_back(inputs_[static_cast<std::size_t>(g_.at(id).index)]);
      else out.push_back(make_lazy(id));
    }
    return out;
  }
  tensor<T> call(bool hook, std::string_view name, const shape& out, ir::call_fn<T> fn, const tensor<T>& a,
                 const tensor<T>* b) override {
    split_on_grad_mode();
    const int ia = node_of(a), ib = b ? node_of(*b) : -1;
    const int slot = static_cast<int>(calls_.size());
    const int id = hook ? g_.add_call_hook(ia, slot) : g_.add_call(ia, ib, slot, out);
    calls_.push_back(std::move(fn));
    call_names_.emplace_back(name);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  std::size_t inline_begin() override { return g_.size(); }
  void inline_end(std::size_t from) override {
    if (from > g_.size()) from = 0;  // the graph broke in between: the nodes since
    const int aot = next_aot_++;
    for (std::size_t k = from; k < g_.size(); ++k)
      if (g_.nodes()[k].kind != ir::node_kind::input) aot_.push_back({static_cast<int>(k), aot, static_cast<int>(k - from)});
  }
  void accumulate_grad(const tensor<T>& g) override {
    if (const auto& impl = g.raw_impl(); impl && impl->lazy == this) accumulated_.push_back(impl->lazy_node);
  }
  bool add_hook(const tensor<T>& t, const hook<T>& h) override {
    const auto& impl = t.raw_impl();
    if (!impl || impl->lazy != this) return false;
    hooks_.emplace_back(impl->lazy_node, h);
    return true;
  }
  bool remove_hook(const tensor<T>& t, std::uint64_t id, bool& removed) override {
    const auto& impl = t.raw_impl();
    if (!impl || impl->lazy != this) return false;
    const auto it = std::find_if(hooks_.begin(), hooks_.end(), [&](const auto& h) { return h.first == impl->lazy_node && h.second.id == id; });
    removed = it != hooks_.end();
    if (removed) hooks_.erase(it);
    return true;
  }
  void realize(std::string_view why) override { flush(why, true); }
  void sync(std::string_view why) override { flush(why, true); }

  /// Compiles (or fetches) and runs the pending graph; `is_break`: a sync point asked.
  void flush(std::string_view why, bool is_break);

  /// After an exception: the tensors still lazy can never be computed.
  void abandon() noexcept {
    for (auto& [id, w] : lazies_)
      if (auto p = w.lock()) p->lazy = &dead_source();
    reset();
  }

 private:
  struct dead final : lazy_source {
    void realize(std::string_view) override {
      fail("jit", "this tensor was recorded by a jitted call that threw before computing it; it has no value");
    }
  };
  static dead& dead_source() {
    static dead d;
    return d;
  }

  void split_on_grad_mode() {
    const bool gm = is_grad_enabled();
    if (!g_.empty() && gm != grad_mode_) flush("grad mode changed", false);
    if (g_.empty()) grad_mode_ = gm;
  }
  /// Whether node `n` (its operands already in the graph) requires grad, as the tape decides:
  /// an operand requires grad and the op has a derivative rule.
  bool needs_grad(const ir::node<T>& n) const {
    if (n.kind == ir::node_kind::pointwise && !ir::graph<T>::op_has_derivative(n.op)) return false;
    return (n.a >= 0 && rg_[static_cast<std::size_t>(n.a)]) || (n.b >= 0 && rg_[static_cast<std::size_t>(n.b)]);
  }
  int node_of(const tensor<T>& t) {
    const auto& impl = t.raw_impl();
    if (!impl) fail("jit", "an op got an undefined tensor; expected a defined tensor");
    if (impl->lazy == this) return impl->lazy_node;
    if (impl->lazy) impl->lazy->realize("a lazy tensor of another trace");
    for (std::size_t i = 0; i < inputs_.size(); ++i)
      if (inputs_[i].raw_impl() == impl) return input_nodes_[i];
    const int id = g_.add_input(t.shape());
    inputs_.push_back(t);
    input_nodes_.push_back(id);
    rg_.push_back(grad_mode_ && t.requires_grad());
    return id;
  }
  tensor<T> make_lazy(int id) {
    auto impl = std::make_shared<tensor_impl<T>>();
    impl->sizes = g_.at(id).sizes;
    impl->st = contiguous_strides(impl->sizes);
    impl->requires_grad = rg_[static_cast<std::size_t>(id)];
    impl->lazy = this;
    impl->lazy_node = id;
    lazies_.emplace_back(id, impl);
    return tensor<T>(std::move(impl));
  }
  void reset() {
    targets_.clear();
    calls_.clear();
    call_names_.clear();
    aot_.clear();
    accumulated_.clear();
    hooks_.clear();
    next_aot_ = 0;
    g_.clear();
    inputs_.clear();
    input_nodes_.clear();
    rg_.clear();
    lazies_.clear();
  }
  std::string input_name(const tensor<T>& t, std::size_t i) const {
    for (const auto& n : names_)
      if (n.impl == t.raw_impl().get()) {
        if (n.key) return *n.key;
        std::string r = "arg" + std::to_string(n.arg);
        if (n.elem >= 0) r += "[" + std::to_string(n.elem) + "]";
        return r;
      }
    return "input " + std::to_string(i);
  }

  struct arg_name {
    const void* impl;
    int arg, elem;
    const std::string* key;
  };
  function_state* st_ = nullptr;
  ir::graph<T> g_;
  std::vector<tensor<T>> inputs_;
  std::vector<int> input_nodes_;
  std::vector<char> rg_;  ///< node needs grad
  bool grad_mode_ = true;
  std::vector<std::pair<int, std::weak_ptr<tensor_impl<T>>>> lazies_;
  std::vector<arg_name> names_;
  std::vector<ir::call_fn<T>> calls_;     ///< the functions of the graph's call nodes, by slot
  std::vector<std::string> call_names_;  ///< their names, for the printed graph
  // For the printed graph: inlined backwards (node, aot id, node in its backward graph) and
  // the values AccumulateGrad hands to leaves.
  struct aot_node {
    int node, aot, local;
  };
  std::vector<aot_node> aot_;
  std::vector<int> accumulated_;
  /// Tensor hooks registered on lazy tensors, in order: the node, the hook. Each flush hands
  /// them to the graph's backward as `call_hook` slots; the entry keys on the nodes only,
  /// and every call passes its own hooks (a cached program never runs a stale one).
  std::vector<std::pair<int, hook<T>>> hooks_;
  int next_aot_ = 0;
  /// The graph as code, inlined nodes named `%aot<id>_<k>`, AccumulateGrad's values listed.
  std::string graph_text(const std::vector<std::string>& input_names) const {
    std::vector<std::string> labels;
    if (!aot_.empty()) {
      labels.resize(g_.size());
      for (const auto& a : aot_) labels[static_cast<std::size_t>(a.node)] = "aot" + std::to_string(a.aot) + "_" + std::to_string(a.local);
    }
    std::string s = g_.to_string(input_names, labels, call_names_);
    for (std::size_t h = 0; h < hooks_.size(); ++h) {
      const auto k = static_cast<std::size_t>(hooks_[h].first);
      s += "register_hook(%";
      s += k < labels.size() && !labels[k].empty() ? labels[k] : std::to_string(k);
      s += ", hooks[" + std::to_string(h) + "])\n";
    }
    for (int k : accumulated_) {
      s += "accumulate_grad(%";
      s += static_cast<std::size_t>(k) < labels.size() && !labels[static_cast<std::size_t>(k)].empty() ? labels[static_cast<std::size_t>(k)]
                                                                                                       : std::to_string(k);
      s += ")\n";
    }
    return s;
  }
  // Scratch of flush(), kept between calls.
  std::vector<int> outs_, alias_, hook_nodes_;
  std::vector<std::shared_ptr<tensor_impl<T>>> targets_;
};

/// Turns the recorders of this thread off while a graph is compiled and run.
struct pause_recording {
  recorder<float>* f = std::exchange(active_recorder<float>(), nullptr);
  recorder<double>* d = std::exchange(active_recorder<double>(), nullptr);
  pause_recording() = default;
  pause_recording(const pause_recording&) = delete;
  pause_recording& operator=(const pause_recording&) = delete;
  ~pause_recording() {
    active_recorder<float>() = f;
    active_recorder<double>() = d;
  }
};

/// Gives lazy tensor `dst` the value (and history) of tensor `computed`. A lazy tensor claims contiguous strides from the start, so a value computed as a view
/// (node by node, eagerly) is copied to keep that promise.
template <Element T>
void adopt(tensor_impl<T>& dst, const tensor<T>& computed) {
  const tensor<T> src = fusegrad::contiguous(computed);  // (a clone on the tape when it needs grad)
  const auto& s = *src.impl();
  dst.store = s.store;
  dst.offset = s.offset;
  dst.st = s.st;
  dst.sizes = s.sizes;
  dst.grad_fn = s.grad_fn;
  dst.output_nr = s.output_nr;
  dst.requires_grad = s.requires_grad;
  dst.lazy = nullptr;
  dst.lazy_node = -1;
}

template <Element T>
void trace<T>::flush(std::string_view why, bool is_break) {
  if (g_.empty()) return;
  function_state& st = *st_;
  if (is_break) {
    if (st.opts.fullgraph)
      fail("jit", "fullgraph=true, but ", why, " needs the value of a traced tensor, which would break the graph in '",
           st.opts.name, "'; remove the data-dependent code, or call fg::jit without fullgraph");
    bump(counter_cells().graph_breaks);
    if (logs::enabled(logs::graph_breaks)) {
      std::lock_guard lock(st.mu);
      if (st.breaks_logged.insert(std::string(why)).second)
        logs::emit(logs::graph_breaks, "graph break in '" + st.opts.name + "': " + std::string(why) +
                                           " needs the value of a traced tensor; the graph so far (" + std::to_string(g_.size()) +
                                           " nodes) is compiled and run, and tracing resumes after it");
    }
  }
  pause_recording paused;
  // Outputs: the lazy tensors still alive.
  std::vector<int>& outs = outs_;
  std::vector<std::shared_ptr<tensor_impl<T>>>& targets = targets_;
  outs.clear();
  targets.clear();
  for (auto& [id, w] : lazies_)
    if (auto p = w.lock(); p && p->lazy == this) {
      outs.push_back(id);
      targets.push_back(std::move(p));
    }
  if (outs.empty()) {
    reset();
    return;
  }
  const bool gm = grad_mode_;
  std::vector<int>& alias = alias_;
  alias.assign(inputs_.size(), -1);
  for (std::size_t i = 0; i < inputs_.size(); ++i)
    for (std::size_t j = 0; j < i && alias[i] < 0; ++j)
      if (inputs_[i].raw_impl()->store && inputs_[i].raw_impl()->store == inputs_[j].raw_impl()->store) alias[i] = static_cast<int>(j);
  std::uint64_t h = g_.structure_hash();
  for (int o : outs) h = (h ^ static_cast<std::uint64_t>(o)) * 1099511628211ULL;
  std::vector<int>& hooked = hook_nodes_;  // the node of each hook: part of the key
  hooked.clear();
  order_hooks(hooks_.begin(), hooks_.end(), [](const auto& hk) -> const hook<T>& { return hk.second; });
  for (const auto& hk : hooks_) {
    hooked.push_back(hk.first);
    h = (h ^ (0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(hk.first))) * 1099511628211ULL;
  }

  // Lookup, most recently used first; compile on a miss.
  std::shared_ptr<const entry<T>> e;
  std::vector<shape> shapes;
  bool run_eagerly = false;
  {
    std::lock_guard lock(st.mu);
    auto& c = st.cache_of<T>();
    const entry<T>* same = nullptr;  // most recent entry of this graph
    for (std::size_t q = 0; q < c.entries.size(); ++q) {
      const auto& cand = *c.entries[q];
      if (cand.hash != h || cand.outputs != outs || cand.hooks != hooked || !cand.fwd_graph.same_structure(g_)) continue;
      if (!same) same = &cand;
      if (!cand.accepts(inputs_, gm, alias)) continue;
      if (cand.dynamic) {
        std::vector<shape> s;
        try {
          s = entry_shapes(cand, inputs_);
        } catch (const error&) {
          continue;
        }
        if (!cand.fwd->fits(s) || (cand.bwd && !cand.bwd->prog->fits(backward_shapes(*cand.bwd, s)))) continue;
        shapes = std::move(s);
      }
      e = c.entries[q];
      std::rotate(c.entries.begin(), c.entries.begin() + static_cast<std::ptrdiff_t>(q), c.entries.begin() + static_cast<std::ptrdiff_t>(q) + 1);
      break;
    }
    if (e) {
      bump(counter_cells().cache_hits);
    } else {
      bump(counter_cells().cache_misses);
      std::vector<std::uint64_t> changed;
      std::string reason;
      site_marks* marks = nullptr;
      for (auto& m : c.marks)
        if (m.hash == h) marks = &m;
      if (!marks) {
        c.marks.push_back({h, std::vector<std::uint64_t>(inputs_.size(), 0)});
        marks = &c.marks.back();
      }
      if (same) {
        reason = first_failure(*same, inputs_, gm, alias, changed);
        if (marks->dims.size() == changed.size())
          for (std::size_t i = 0; i < changed.size(); ++i) marks->dims[i] |= changed[i];
      }
      if (st.compiles >= st.opts.recompile_limit) {
        run_eagerly = true;
        bump(counter_cells().fallbacks);
        if (!st.limit_logged) {
          st.limit_logged = true;
          logs::channel ch = logs::enabled(logs::recompiles) ? logs::recompiles : logs::graph_breaks;
          const std::string line = "'" + st.opts.name + "' hit the recompile limit (" + std::to_string(st.opts.recompile_limit) +
                                   "); graphs that miss the cache run eagerly from now on. Last miss: " +
                                   (reason.empty() ? std::string("a new graph") : reason);
          if (logs::enabled(ch)) logs::emit(ch, line);
          else std::fprintf(stderr, "[fusegrad] %s\n", line.c_str());
        }
      } else {
        ++st.compiles;
        if (same) {
          bump(counter_cells().recompiles);
          logs::emit(logs::recompiles, "recompiling '" + st.opts.name + "': " + reason);
        }
        std::vector<std::string> names;
        for (std::size_t i = 0; i < inputs_.size(); ++i) names.push_back(input_name(inputs_[i], i));
        auto made = compile<T>(g_, outs, rg_, inputs_, gm, alias, marks->dims, std::move(names), h, hooked);
        bump(counter_cells().unique_graphs);
        if (st.opts.backend == jit_backend::eager) made->eager = true;
        if (logs::enabled(st.opts.graph_log))
          logs::emit(st.opts.graph_log, "graph of '" + st.opts.name + "':\n" + graph_text(made->names));
        if (logs::enabled(logs::guards)) logs::emit(logs::guards, "guards of a new entry of '" + st.opts.name + "':\n" + made->guards_text());
        if (logs::enabled(logs::output_code)) logs::emit(logs::output_code, "program of '" + st.opts.name + "':\n" + made->code_text());
        if (made->dynamic) shapes = entry_shapes(*made, inputs_);
        c.entries.insert(c.entries.begin(), made);
        e = std::move(made);
      }
    }
  }

  if (run_eagerly || e->eager) {
    // Node by node through the eager ops, which record on the tape themselves.
    if (e && e->eager && st.opts.backend != jit_backend::eager) bump(counter_cells().fallbacks);
    std::optional<no_grad> off;
    if (!gm) off.emplace();
    std::vector<tensor<T>> vals(g_.size());
    const tensor<T> none;
    for (std::size_t k = 0; k < g_.size(); ++k) {
      const auto& n = g_.nodes()[k];
      if (n.kind == ir::node_kind::input) {
        vals[k] = inputs_[static_cast<std::size_t>(n.index)];
        continue;
      }
      const tensor<T>& a = vals[static_cast<std::size_t>(n.a)];
      const tensor<T>& b = n.b >= 0 ? vals[static_cast<std::size_t>(n.b)] : none;
      vals[k] = n.kind == ir::node_kind::call_hook || n.kind == ir::node_kind::call ? ir::run_call(n, a, b, &calls_, n.sizes)
                                                                                    : ir::eval_eager(n, a, b, n.sizes);
    }
    for (const auto& [k, hk] : hooks_)  // on the tape, as eager register_hook would put them
      if (const auto& impl = vals[static_cast<std::size_t>(k)].raw_impl(); impl && impl->grad_fn)
        impl->grad_fn->pre_hooks(impl->output_nr).push_back(hk);
    for (std::size_t p = 0; p < outs.size(); ++p) adopt(*targets[p], vals[static_cast<std::size_t>(outs[p])]);
    reset();
    return;
  }

  const bool dyn = e->dynamic;
  std::vector<shape> fwd_shapes;
  if (dyn) fwd_shapes.assign(shapes.begin(), shapes.begin() + static_cast<std::ptrdiff_t>(e->fwd_graph.size()));
  std::vector<tensor<T>> res = e->fwd->run(inputs_, dyn ? &fwd_shapes : nullptr, &calls_);
  for (std::size_t p = 0; p < outs.size(); ++p) adopt(*targets[p], res[p]);
  if (e->bwd) {
    std::vector<tensor<T>> saved(res.begin() + static_cast<std::ptrdiff_t>(outs.size()), res.end());
    std::vector<tensor<T>> grad_outs;
    std::vector<tensor<T>*> out_ptrs;
    for (int p : e->grad_outputs) grad_outs.emplace_back(targets[static_cast<std::size_t>(p)]);
    for (auto& t : grad_outs) out_ptrs.push_back(&t);
    auto jshapes = dyn ? std::make_shared<const std::vector<shape>>(std::move(shapes)) : nullptr;
    const std::size_t n_in = inputs_.size();
    // This call's hooks (the graph's, by slot); hooks registered later on its outputs join
    // them in the backward, on each output's whole gradient (`set_applies_hooks`).
    auto graph_hooks = hooks_.empty() ? nullptr : std::make_shared<const std::vector<std::pair<int, hook<T>>>>(hooks_);
    auto self = std::make_shared<node<T>*>(nullptr);  // the node: the rule lives in it
    // The engine leaves the gradient of an output nothing used undefined (no zeros): the
    // backward of the outputs that received one runs instead (`backward_for`).
    const auto n = record<T>("CompiledFunctionBackward", inputs_, out_ptrs, std::move(saved),
              [e, jshapes, n_in, graph_hooks, self](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& grads) {
                std::vector<tensor<T>> bin(s.begin(), s.end());
                std::vector<char> given(grads.size());
                for (std::size_t j = 0; j < grads.size(); ++j) {
                  given[j] = grads[j].defined();
                  if (given[j]) bin.push_back(grads[j]);
                }
                std::vector<std::pair<int, hook<T>>> hs;  // snapshot, as the engine's `run_hooks`
                if (graph_hooks) hs = *graph_hooks;
                for (std::size_t j = 0; j < grads.size(); ++j)
                  for (const auto& h : (*self)->pre_hooks(j))
                    hs.emplace_back(e->outputs[static_cast<std::size_t>(e->grad_outputs[j])], h);
                order_hooks(hs.begin(), hs.end(), [](const auto& hk) -> const hook<T>& { return hk.second; });
                std::vector<int> hooked;
                std::vector<ir::call_fn<T>> hook_fns;
                for (const auto& [k, h] : hs) {
                  hooked.push_back(k);
                  hook_fns.push_back([h = h](const tensor<T>& g, const tensor<T>&) { return apply_hook(h, g); });
                }
                std::vector<shape> bs;
                std::shared_ptr<const backward_code<T>> b = e->bwd;
                if (given != b->given || hooked != b->hooks) {
                  std::vector<shape> fwd;
                  if (jshapes) fwd.assign(jshapes->begin(), jshapes->begin() + static_cast<std::ptrdiff_t>(e->fwd_graph.size()));
                  b = backward_for(*e, given, hooked, jshapes ? &fwd : nullptr, bs);
                } else if (jshapes) {
                  bs = backward_shapes(*b, *jshapes);
                }
                std::vector<tensor<T>> r;
                if (auto* rec = active_recorder<T>())  // a traced backward: inline this one
                  r = rec->replay(b->prog->source(), b->prog->outputs(), bin, jshapes ? &bs : nullptr, hs.empty() ? nullptr : &hook_fns);
                else
                  r = b->prog->run(bin, jshapes ? &bs : nullptr, hs.empty() ? nullptr : &hook_fns);
                std::vector<tensor<T>> out(n_in);
                for (std::size_t j = 0; j < e->wrt.size(); ++j) {
                  const int o = b->grad_of[j];
                  const auto i = static_cast<std::size_t>(e->wrt[j]);
                  out[i] = o >= 0 ? r[static_cast<std::size_t>(o)] : tensor<T>{};
                }
                return out;
              });
    *self = n.get();
    n->set_materialize_grads(false);
    n->set_applies_hooks(true);
  }
  reset();
}

/// `T`, spelled so that it depends on `Tag`. The tracer types below are templates over a tag
/// so that a TU instantiates the tracer (its virtual functions pull in the whole run-time
/// compiler, for float and double) only when it makes a jitted call or turns compiled
/// autograd on, not by including the header (that cost every TU ~4 s, and compiled
/// autograd's runner ~30 s, at -O2).
template <class T, class Tag>
using dependent = std::conditional_t<sizeof(Tag*) == 0, Tag, T>;

/// The tracers of one thread, reused by its jitted calls (one pair per nesting depth).
template <class Tag = void>
struct basic_trace_pair {
  trace<dependent<float, Tag>> f;
  trace<dependent<double, Tag>> d;
};
template <class Tag>
std::vector<std::unique_ptr<basic_trace_pair<Tag>>>& trace_stack() {
  thread_local std::vector<std::unique_ptr<basic_trace_pair<Tag>>> s;
  return s;
}
inline std::size_t& trace_depth() noexcept {
  thread_local std::size_t d = 0;
  return d;
}

/// The tracers of one jitted call on this thread (installed for its duration). Name it as
/// `basic_frame<dependent<void, X>>` with some template parameter `X` of the caller.
template <class Tag>
class basic_frame {
 public:
  explicit basic_frame(function_state& st) {
    auto& stack = trace_stack<Tag>();
    const std::size_t depth = trace_depth()++;
    if (stack.size() <= depth) stack.push_back(std::make_unique<basic_trace_pair<Tag>>());
    t_ = stack[depth].get();
    t_->f.begin(st);
    t_->d.begin(st);
    prev_f_ = std::exchange(active_recorder<float>(), &t_->f);
    prev_d_ = std::exchange(active_recorder<double>(), &t_->d);
  }
  basic_frame(const basic_frame&) = delete;
  basic_frame& operator=(const basic_frame&) = delete;
  ~basic_frame() {
    if (!finished_) {
      t_->f.abandon();
      t_->d.abandon();
    }
    active_recorder<float>() = prev_f_;
    active_recorder<double>() = prev_d_;
    --trace_depth();
  }
  /// Names the tensors of an argument for logs and guards ('x' for a map key, arg0, arg1[2]).
  template <class A>
  void name_arg(const A& a, int i) {
    using X = std::remove_cvref_t<A>;
    if constexpr (is_tensor_v<X>) {
      name_tensor(a, i, -1, nullptr);
    } else if constexpr (requires { typename X::key_type; typename X::mapped_type; }) {
      if constexpr (is_tensor_v<typename X::mapped_type> && std::is_same_v<typename X::key_type, std::string>)
        for (const auto& [k, v] : a) name_tensor(v, i, -1, &k);
    } else if constexpr (requires { typename X::value_type; a.begin(); }) {
      if constexpr (is_tensor_v<typename X::value_type>) {
        int j = 0;
        for (const auto& v : a) name_tensor(v, i, j++, nullptr);
      }
    }
  }
  void finish() {
    t_->f.flush("the end of the function", false);
    t_->d.flush("the end of the function", false);
    finished_ = true;
  }

 private:
  template <Element T>
  void name_tensor(const tensor<T>& t, int arg, int elem, const std::string* key) {
    if (!t.defined()) return;
    if constexpr (std::is_same_v<T, float>) t_->f.name(t.raw_impl().get(), arg, elem, key);
    else t_->d.name(t.raw_impl().get(), arg, elem, key);
  }
  basic_trace_pair<Tag>* t_ = nullptr;
  recorder<float>* prev_f_ = nullptr;
  recorder<double>* prev_d_ = nullptr;
  bool finished_ = false;
};

}  // namespace detail::jit

namespace detail::jit {
/// The parameter list of a callable with one non-template call operator (empty otherwise).
template <class M>
struct call_signature {
  static constexpr bool fixed = false;
};
template <class C, class R, class... P>
struct call_signature<R (C::*)(P...) const> {
  static constexpr bool fixed = true;
  using params = type_list<P...>;
};
template <class C, class R, class... P>
struct call_signature<R (C::*)(P...)> : call_signature<R (C::*)(P...) const> {};
template <class F>
constexpr bool has_fixed_signature() {
  if constexpr (requires { &F::operator(); }) return call_signature<decltype(&F::operator())>::fixed;
  else return false;
}

/// Gives a jitted function the call operator of a non-generic callable, so that arguments
/// may be braced lists (`f({{"x", x}, {"y", y}})`).
template <class Derived, class Params>
struct fixed_call {};
template <class Derived, class... P>
struct fixed_call<Derived, type_list<P...>> {
  decltype(auto) operator()(P... p) const { return static_cast<const Derived&>(*this).call(std::forward<P>(p)...); }
};
struct no_call {
  explicit no_call() = default;
};
template <class Derived, class F>
struct call_base {
  void operator()(no_call) const = delete;  // a generic callable: the template operator() serves
};
template <class Derived, class F>
  requires(has_fixed_signature<F>())
struct call_base<Derived, F> : fixed_call<Derived, typename call_signature<decltype(&F::operator())>::params> {};
}  // namespace detail::jit

/// A callable traced at run time, with a guarded cache of compiled graphs (see this file's
/// comment). Made by `fg::jit`.
template <class F>
class jit_function : public detail::jit::call_base<jit_function<F>, F> {
 public:
  jit_function(F f, jit_options o) : fn_(std::move(f)), st_(std::make_shared<detail::jit::function_state>(std::move(o))) {}

  /// Calls the function: ops are traced, and graphs compiled or fetched at each sync point.
  template <class... Args>
    requires(!detail::jit::has_fixed_signature<F>() && std::invocable<const F&, Args...>)
  decltype(auto) operator()(Args&&... args) const {
    return call(std::forward<Args>(args)...);
  }
  using detail::jit::call_base<jit_function<F>, F>::operator();

  /// The cache entries, most recently used first, each with its guards and program.
  [[nodiscard]] std::vector<jit_entry_info> entries() const {
    std::lock_guard lock(st_->mu);
    std::vector<jit_entry_info> r;
    auto add = [&]<Element T>(const detail::jit::cache<T>& c) {
      for (const auto& e : c.entries)
        r.push_back({std::string(dtype_name<T>()), e->guards_text(), e->fwd_graph.to_string(e->names), e->code_text(), e->dynamic});
    };
    add(st_->cache_of<float>());
    add(st_->cache_of<double>());
    return r;
  }
  /// Graphs compiled by this function so far.
  [[nodiscard]] int compiles() const {
    std::lock_guard lock(st_->mu);
    return st_->compiles;
  }
  [[nodiscard]] const jit_options& options() const noexcept { return st_->opts; }

 private:
  template <class D, class P>
  friend struct detail::jit::fixed_call;

  template <class... Args>
  decltype(auto) call(Args&&... args) const {
    detail::jit::basic_frame<detail::jit::dependent<void, F>> fr(*st_);
    int i = 0;
    (fr.name_arg(args, i++), ...);
    using R = std::invoke_result_t<const F&, Args...>;
    if constexpr (std::is_void_v<R>) {
      std::invoke(fn_, std::forward<Args>(args)...);
      fr.finish();
    } else {
      R r = std::invoke(fn_, std::forward<Args>(args)...);
      fr.finish();
      return r;
    }
  }

  F fn_;
  std::shared_ptr<detail::jit::function_state> st_;
};

/// Inside a jitted call (or a compiled-autograd capture): ends the pending graph here, like
/// `torch._dynamo.graph_break()`. Elsewhere it does nothing.
inline void graph_break() {
  if (auto* r = detail::active_recorder<float>()) r->sync("graph_break()");
  if (auto* r = detail::active_recorder<double>()) r->sync("graph_break()");
}

/// Traces `f` at run time, compiling and caching its graphs (`torch.compile` for code with
/// data-dependent control flow). `f` takes and returns fusegrad tensors (or containers of them).
template <class F>
jit_function<std::decay_t<F>> jit(F&& f, jit_options o = {}) {
  return jit_function<std::decay_t<F>>(std::forward<F>(f), std::move(o));
}

}  // namespace fusegrad
