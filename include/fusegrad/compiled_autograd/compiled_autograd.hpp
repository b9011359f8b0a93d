#pragma once
/// \file fusegrad/compiled_autograd/compiled_autograd.hpp
/// Compiled autograd: `backward()` captures the whole backward pass into the run-time IR
/// and runs it as compiled programs (PyTorch's compiled autograd).
///
/// When it is on (`fg::config().compiled_autograd = true`, or an `fg::compiled_autograd::enable`
/// scope on this thread), a backward pass
///  1. walks the tape from its roots and builds a **cache key**: each node's kind, its call
///     index ("NodeCall N", in breadth-first order from GraphRoot), its edges, its output
///     shapes, its saved tensors' shapes, the fingerprint of its rule's constants and the kind
///     of each hook — never tensor values — and in the same pass **collects** what each
///     node's backward reads (`node::collect`: its saved tensors, versions checked). A key
///     seen before is a hit; a new node kind is a miss ("new autograd node"); changed shapes
///     mark the sizes that changed as dynamic ("changed shapes"), as the verbose log says;
///  2. on a hit with a **plan** for these sizes (made by an earlier capture: where each input
///     of the compiled graph comes from, which hook each `call_hook` slot is, which leaf each
///     output goes to), runs the compiled graph on the collected values and the tape's hooks
///     directly and stops here: no rule runs, nothing is traced (`run_plan`);
///  3. otherwise runs the engine with the run-time tracer active: every node's backward rule (the same
///     generic code eager mode runs), gradient sums, tensor hooks written over tensors and
///     `AccumulateGrad` record into one IR graph; the backwards of `fg::jit` functions are
///     inlined; what cannot be traced (matmul, views, a hook that reads values, the fused
///     kernels of `fg::compile`) breaks the graph as in `fg::jit`;
///  4. compiles the graph with the scope's backend (tile programs, or eager node by node)
///     through the same guarded kernel cache, whose automatic dynamic shapes make a
///     shape-generic graph after a size changes, and makes the plan a later hit runs
///     (`make_plan`; none where the graph cannot run from collected values alone).
///
/// `FUSEGRAD_LOGS=compiled_autograd` prints each captured graph and its signature
/// (`forward(inputs, sizes, scalars, hooks)`, as PyTorch's); `compiled_autograd_verbose`
/// adds the reason for each cache miss.

#include <memory>
#include <mutex>
#include <vector>

#include "fusegrad/compiled_autograd/key.hpp"
#include "fusegrad/compiled_autograd/options.hpp"
#include "fusegrad/compiled_autograd/plan.hpp"
#include "fusegrad/jit/tracing_scope.hpp"

namespace fusegrad {
namespace compiled_autograd {
namespace detail {

/// Sets a flag for its lifetime.
struct raise_while_alive {
  bool& f;
  explicit raise_while_alive(bool& b) : f(b) { f = true; }
  raise_while_alive(const raise_while_alive&) = delete;
  raise_while_alive& operator=(const raise_while_alive&) = delete;
  ~raise_while_alive() { f = false; }
};

/// Empties the thread's collected buffers at the end of a backward: no tensor outlives its
/// backward there.
template <Element T>
struct clear_collected {
  collected<T>& c;
  ~clear_collected() {
    c.tensors.clear();
    c.leaves.clear();
    c.owned.clear();
    c.grads.clear();
    c.scalar_tensors.clear();
  }
};

/// Ends a capture's flush record, even where a rule throws.
template <Element T>
struct stop_recording {
  fusegrad::detail::jit::trace<T>& t;
  ~stop_recording() { t.recording = nullptr; }
};

/// For a plan, the nodes' scalar inputs as 0-d tensors their rules read (graph inputs, not
/// constants; a hit reads each node's own). Each rule uses its own up; one left over means a
/// rule did not run with it (no plan then: the graph may hold that scalar as a constant,
/// which the key does not guard).
template <Element T>
struct lifted_scalars {
  collected<T>& c;
  explicit lifted_scalars(collected<T>& col) : c(col) {}
  /// Lends each node that has a scalar input (with `want_plan`) its 0-d tensor.
  void lift(bool want_plan) {
    c.scalar_node.clear();
    for (std::size_t q = 0; q < c.order.size(); ++q)
      if (T v; want_plan && c.order[q]->scalar_input(v)) {
        c.scalar_node.push_back(static_cast<std::uint32_t>(q));
        c.scalar_tensors.push_back(fusegrad::full<T>(shape{}, v));
        c.order[q]->exchange_scalar_input(c.scalar_tensors.back());
      }
  }
  lifted_scalars(const lifted_scalars&) = delete;
  lifted_scalars& operator=(const lifted_scalars&) = delete;
  /// Takes each lifted scalar back from its node; true when every rule used its own.
  bool all_used() {
    bool used = true;
    for (std::size_t j = 0; j < c.scalar_tensors.size(); ++j)
      if (c.order[c.scalar_node[j]]->exchange_scalar_input(tensor<T>{}).defined()) used = false;
    c.scalar_tensors.clear();
    return used;
  }
  ~lifted_scalars() { all_used(); }  // (an error in a rule: no node keeps one)
};

/// The root gradients, implicit ones made here; false where the engine must run instead (to
/// raise its checks' errors): a root without a gradient edge, a missing gradient of a
/// non-scalar root, a gradient of another shape.
template <Element T>
bool complete_root_grads(const std::vector<tensor<T>>& roots, std::vector<tensor<T>>& grads) {
  if (grads.size() != roots.size()) return false;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    if (!fusegrad::detail::gradient_edge(roots[i]).valid()) return false;
    if (!grads[i].defined()) {
      if (roots[i].numel() != 1) return false;
      grads[i] = fusegrad::detail::empty<T>(roots[i].shape());
      fusegrad::detail::fill(grads[i], T(1));
    } else if (grads[i].shape() != roots[i].shape()) {
      return false;
    }
  }
  return true;
}

/// A hit: the first of the key's plans for these sizes that runs on the collected values (no
/// rule runs, nothing is traced); false where none does.
template <Element T>
bool run_hit(const cached_key& ck, const walk_key& key, const collected<T>& col, bool retain_graph) {
  for (const auto& any : ck.plans) {
    const auto& p = *static_cast<const plan<T>*>(any.get());
    if (key.sizes == p.key_sizes && run_plan(p, col, retain_graph)) {
      fusegrad::detail::bump(fusegrad::detail::counter_cells().ca_direct);
      return true;
    }
  }
  return false;
}

/// Gives the key plan `p`, first among its plans (replacing one for the same sizes; at most 8
/// kept).
template <Element T>
void add_plan(cached_key& ck, std::shared_ptr<const plan<T>> p) {
  std::lock_guard lock(global_state().mu);
  ck.no_plan = false;
  ck.eager_only = false;
  auto& ps = ck.plans;
  std::erase_if(ps, [&](const auto& q) { return static_cast<const plan<T>*>(q.get())->key_sizes == p->key_sizes; });
  ps.insert(ps.begin(), std::move(p));
  if (ps.size() > 8) ps.pop_back();
}

/// What a capture leaves in its cached key: the plan a later hit runs, or why there is none
/// (`no_plan`; `eager_only` where the capture fell back to eager ops, so later backwards run
/// on the engine untraced).
template <Element T>
void file_capture(cached_key& ck, const typename fusegrad::detail::jit::trace<T>::flush_record& rec,
                  const collected<T>& col, const walk_key& key, bool want_plan, bool scalars_used, bool fell_back) {
  if (!want_plan) {
    if (fell_back) {
      std::lock_guard lock(global_state().mu);
      ck.eager_only = true;
    }
    return;
  }
  auto p = scalars_used ? make_plan<T>(rec, col, {key.sizes.begin(), key.sizes.end()}) : nullptr;
  if (!p) {
    std::lock_guard lock(global_state().mu);
    ck.no_plan = true;
    ck.eager_only = fell_back;
    return;
  }
  if (logs::enabled(logs::compiled_autograd)) logs::emit(logs::compiled_autograd, signature(*p, col));
  add_plan(ck, std::move(p));
}

/// A miss (or a hit whose graph does not fit): the engine runs every rule under the tracer,
/// whose flushes compile the graph; with `want_plan`, what the nodes read is kept and the
/// flush recorded, for the plan a later hit runs.
template <Element T>
void capture(const std::vector<tensor<T>>& roots, std::vector<tensor<T>>&& grads, bool retain_graph, const options& o,
             cached_key& ck, const walk_key& key, bool want_plan) {
  using trace_t = fusegrad::detail::jit::trace<T>;
  collected<T>& col = collected_of<T>();
  typename trace_t::flush_record rec;
  auto& programs = global_state().programs_for(o);
  const auto fallbacks_before = programs.fallbacks.load(std::memory_order_relaxed);
  namespace J = fusegrad::detail::jit;
  // (T only: the backward of a graph of T computes on T; what a hook computes on the other
  // type runs eagerly)
  J::tracing_scope<J::deferred_t<void, T>, J::traced_only<T>> fr(programs);
  trace_t& tr = fr.template tracer<T>();
  if (want_plan) {
    tr.recording = &rec;
    col.owned.clear();  // what the nodes read before the engine frees or replaces it
    for (const tensor<T>* t : col.tensors) col.owned.push_back(t ? *t : tensor<T>{});
  }
  stop_recording<T> stop{tr};
  lifted_scalars<T> lifted(col);
  lifted.lift(want_plan);
  fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  fr.finish();
  tr.recording = nullptr;
  std::vector<tensor<T>> scalar_tensors = col.scalar_tensors;  // (make_plan finds the graph's inputs among them)
  const bool scalars_used = lifted.all_used();
  col.scalar_tensors = std::move(scalar_tensors);
  const bool fell_back = programs.fallbacks.load(std::memory_order_relaxed) != fallbacks_before;
  file_capture(ck, rec, col, key, want_plan, scalars_used, fell_back);
}

/// The backward runner installed into the engine while this header is included: the phases
/// above, in order.
template <Element T>
void run(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads, bool retain_graph) {
  const options* o = current();
  // Off, or a backward started while a capture is running (a hook's own backward): the engine.
  thread_local bool capturing = false;
  if (!o || capturing) return fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  // All or nothing for .grad() (eager/grad_journal.hpp): a hit's writes, and a capture's lazy
  // gradients until its graph has run (fr.finish()), are undone if anything throws.
  fusegrad::detail::grad_transaction<T> all_or_nothing;
  raise_while_alive during(capturing);
  // One captured backward at a time, process-wide: until its graph runs (fr.finish()), the
  // gradient a capture accumulates into a leaf is a lazy value of this thread's trace, which
  // another thread's backward into the same leaf must not read (docs/eager.md, "Thread safety").
  std::lock_guard one_at_a_time(global_state().capture_mu);
  if (!complete_root_grads(roots, grads)) return fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  collected<T>& col = collected_of<T>();
  clear_collected<T> clear_on_exit{col};
  cached_key* ck = nullptr;
  walk_key& key = make_key(roots);
  const bool hit = lookup(key, &ck);
  col.grads = grads;
  fusegrad::detail::bump(hit ? fusegrad::detail::counter_cells().ca_hits
                             : fusegrad::detail::counter_cells().ca_captures);
  const bool direct = col.all && fusegrad::detail::active_recorder<T>() == nullptr;
  if (hit && direct && run_hit(*ck, key, col, retain_graph)) return;
  // A key whose capture could only fall back to eager ops: the eager engine, untraced.
  if (hit && ck->eager_only) return fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  capture(roots, std::move(grads), retain_graph, *o, *ck, key, direct && !(hit && ck->no_plan));
}

template <class Tag>
void install() noexcept {
  using F = fusegrad::detail::jit::deferred_t<float, Tag>;  // instantiated on use only
  using D = fusegrad::detail::jit::deferred_t<double, Tag>;
  fusegrad::detail::compiled_backward_runner<F>().store(&run<F>, std::memory_order_release);
  fusegrad::detail::compiled_backward_runner<D>().store(&run<D>, std::memory_order_release);
}

}  // namespace detail
}  // namespace compiled_autograd
}  // namespace fusegrad
