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

#include <mutex>
#include <vector>

#include "fusegrad/compiled_autograd/key.hpp"
#include "fusegrad/compiled_autograd/options.hpp"
#include "fusegrad/compiled_autograd/plan.hpp"
#include "fusegrad/jit/tracing_scope.hpp"

namespace fusegrad {
namespace compiled_autograd {
namespace detail {

/// The backward runner installed into the engine while this header is included.
template <Element T>
void run(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads, bool retain_graph) {
  const options* o = current();
  // Off, or a backward started while a capture is running (a hook's own backward): the engine.
  thread_local bool capturing = false;
  if (!o || capturing) return fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  // All or nothing for .grad() (eager/grad_journal.hpp): a hit's writes, and a capture's lazy
  // gradients until its graph has run (fr.finish()), are undone if anything throws.
  fusegrad::detail::grad_transaction<T> all_or_nothing;
  struct flag {
    bool& f;
    explicit flag(bool& b) : f(b) { f = true; }
    ~flag() { f = false; }
  } during(capturing);
  // One captured backward at a time, process-wide: until its graph runs (fr.finish()), the
  // gradient a capture accumulates into a leaf is a lazy value of this thread's trace, which
  // another thread's backward into the same leaf must not read (docs/eager.md, "Thread safety").
  std::lock_guard one_at_a_time(global_state().capture_mu);
  // The root gradients, implicit ones made here (the engine's checks and errors where they fail).
  bool roots_ok = grads.size() == roots.size();
  for (std::size_t i = 0; i < roots.size() && roots_ok; ++i) {
    if (!fusegrad::detail::gradient_edge(roots[i]).valid()) roots_ok = false;
    else if (!grads[i].defined()) {
      if (roots[i].numel() != 1) roots_ok = false;
      else {
        grads[i] = fusegrad::detail::empty<T>(roots[i].shape());
        fusegrad::detail::fill(grads[i], T(1));
      }
    } else if (grads[i].shape() != roots[i].shape()) {
      roots_ok = false;
    }
  }
  if (!roots_ok) return fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  collected<T>& col = collected_of<T>();
  struct clear_collected {
    collected<T>& c;
    ~clear_collected() {  // no tensor outlives its backward in the thread's buffers
      c.tensors.clear();
      c.owned.clear();
      c.grads.clear();
      c.scalar_tensors.clear();
    }
  } clear_on_exit{col};
  cached_key* ck = nullptr;
  const walk_key& key = make_key(roots);
  const bool hit = lookup(key, &ck);
  col.grads = grads;
  fusegrad::detail::bump(hit ? fusegrad::detail::counter_cells().ca_hits
                             : fusegrad::detail::counter_cells().ca_captures);
  const bool direct = col.all && fusegrad::detail::active_recorder<T>() == nullptr;
  if (hit && direct)
    for (const auto& any : ck->plans) {
      // A hit: the captured graph runs on the collected values; no rule runs, nothing is traced.
      const auto& p = *static_cast<const plan<T>*>(any.get());
      if (p.key_sizes == key.sizes && run_plan(p, col, retain_graph)) {
        fusegrad::detail::bump(fusegrad::detail::counter_cells().ca_direct);
        return;
      }
    }
  // A key whose capture could only fall back to eager ops: the eager engine, untraced.
  if (hit && ck->eager_only) return fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  // A miss (or a hit whose graph does not fit): the engine runs every rule under the tracer.
  using trace_t = fusegrad::detail::jit::trace<T>;
  typename trace_t::flush_record rec;
  const bool want_plan = direct && !(hit && ck->no_plan);
  auto& programs = global_state().programs_for(*o);
  const auto fallbacks_before = programs.fallbacks.load(std::memory_order_relaxed);
  fusegrad::detail::jit::tracing_scope<fusegrad::detail::jit::deferred_t<void, T>> fr(programs);
  trace_t& tr = fr.template tracer<T>();
  if (want_plan) {
    tr.recording = &rec;
    col.owned.clear();  // what the nodes read before the engine frees or replaces it
    for (const tensor<T>* t : col.tensors) col.owned.push_back(t ? *t : tensor<T>{});
  }
  struct stop_recording {
    trace_t& t;
    ~stop_recording() { t.recording = nullptr; }
  } stop{tr};
  // For a plan, the nodes' scalar inputs as 0-d tensors their rules read (graph inputs, not
  // constants; a hit reads each node's own). Each rule uses its own up; one left over means a
  // rule did not run with it (no plan then: the graph may hold that scalar as a constant,
  // which the key does not guard).
  struct scalar_inputs {
    collected<T>& c;
    bool all_used() {
      bool used = true;
      for (std::size_t j = 0; j < c.scalar_tensors.size(); ++j)
        if (c.order[c.scalar_node[j]]->exchange_scalar_input(tensor<T>{}).defined()) used = false;
      c.scalar_tensors.clear();
      return used;
    }
    ~scalar_inputs() { all_used(); }  // (an error in a rule: no node keeps one)
  } lifted{col};
  col.scalar_node.clear();
  for (std::size_t q = 0; q < col.order.size(); ++q)
    if (T v; want_plan && col.order[q]->scalar_input(v)) {
      col.scalar_node.push_back(static_cast<std::uint32_t>(q));
      col.scalar_tensors.push_back(fusegrad::full<T>(shape{}, v));
      col.order[q]->exchange_scalar_input(col.scalar_tensors.back());
    }
  fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  fr.finish();
  tr.recording = nullptr;
  std::vector<tensor<T>> scalar_tensors = col.scalar_tensors;  // (make_plan finds the graph's inputs among them)
  const bool scalars_used = lifted.all_used();
  col.scalar_tensors = std::move(scalar_tensors);
  const bool fell_back = programs.fallbacks.load(std::memory_order_relaxed) != fallbacks_before;
  if (!want_plan && fell_back) {
    std::lock_guard lock(global_state().mu);
    ck->eager_only = true;
  }
  if (want_plan) {
    auto p = scalars_used ? make_plan<T>(rec, col, key.sizes) : nullptr;
    if (p && logs::enabled(logs::compiled_autograd)) logs::emit(logs::compiled_autograd, signature(*p, col));
    std::lock_guard lock(global_state().mu);
    ck->no_plan = !p;
    ck->eager_only = !p && fell_back;
    if (p) {
      auto& ps = ck->plans;
      std::erase_if(ps, [&](const auto& q) { return static_cast<const plan<T>*>(q.get())->key_sizes == p->key_sizes; });
      ps.insert(ps.begin(), std::move(p));
      if (ps.size() > 8) ps.pop_back();
    }
  }
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
