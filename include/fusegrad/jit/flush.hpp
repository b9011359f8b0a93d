#pragma once
/// \file fusegrad/jit/flush.hpp
/// A trace's flush (`trace<T>::flush`): the pending graph's cache lookup (or compile, or the
/// eager fallback), its run, giving the lazy tensors still alive their values, and the
/// `CompiledFunctionBackward` node recorded for its backward (run_entry.hpp).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fusegrad/core/hash.hpp"
#include "fusegrad/core/reused_vector.hpp"
#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/views.hpp"
#include "fusegrad/ir/backward.hpp"
#include "fusegrad/jit/program.hpp"
#include "fusegrad/jit/compile_entry.hpp"
#include "fusegrad/jit/entry.hpp"
#include "fusegrad/jit/log.hpp"
#include "fusegrad/jit/run_entry.hpp"
#include "fusegrad/jit/trace.hpp"

namespace fusegrad::detail::jit {

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

/// For each input, the first earlier input that shares its storage (-1: none), in one pass
/// over the inputs (`first` is scratch space kept between calls).
template <Element T>
void find_aliases(const std::vector<tensor<T>>& inputs, std::vector<int>& alias,
                  std::unordered_map<const void*, int>& first) {
  alias.assign(inputs.size(), -1);
  first.clear();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (const void* s = inputs[i].raw_impl()->store.get())
      if (const auto [at, fresh] = first.try_emplace(s, static_cast<int>(i)); !fresh) alias[i] = at->second;
}

/// What a flush's cache lookup chose: the entry to run (none: a miss past the recompile
/// limit, run eagerly), and for a dynamic entry its node shapes for these inputs.
template <Element T>
struct chosen_entry {
  std::shared_ptr<const entry<T>> e;
  std::vector<shape> shapes;
};

/// The node shapes of dynamic entry `e` for inputs `ins`, none when they break its graph's
/// shape rules or exceed what its programs were sized for: the entry cannot run them.
template <Element T>
std::optional<std::vector<shape>> shapes_if_fits(const entry<T>& e, const std::vector<tensor<T>>& ins) {
  std::vector<shape> s;
  try {
    s = entry_shapes(e, ins);
  } catch (const error&) { return std::nullopt; }
  if (!e.fwd->fits(s) || (e.bwd && !e.bwd->prog->fits(backward_shapes(*e.bwd, s)))) return std::nullopt;
  return s;
}

/// The dims marked dynamic for graphs keyed `key` (one word per input), added with none
/// marked on the key's first miss: a recompile generalizes the dims that failed its guards.
inline dynamic_dim_marks& marks_for(std::vector<dynamic_dim_marks>& marks, std::uint64_t key, std::size_t inputs) {
  dynamic_dim_marks* found = nullptr;
  for (auto& m : marks)
    if (m.hash == key) found = &m;
  if (found) return *found;
  marks.push_back({key, std::vector<std::uint64_t>(inputs, 0)});
  return marks.back();
}

/// Past the recompile limit a miss runs eagerly instead of compiling; the first such miss
/// says so (recompiles, else graph_breaks, else stderr), or the slowdown would be silent.
inline void fall_back_past_limit(function_state& st, const std::string& reason) {
  bump(counter_cells().fallbacks);
  if (st.limit_logged) return;
  st.limit_logged = true;
  logs::channel ch = logs::enabled(logs::recompiles) ? logs::recompiles : logs::graph_breaks;
  const std::string line = "'" + st.opts.name + "' hit the recompile limit (" +
                           std::to_string(st.opts.recompile_limit) +
                           "); graphs that miss the cache run eagerly from now on. Last miss: " +
                           (reason.empty() ? std::string("a new graph") : reason);
  if (logs::enabled(ch)) logs::emit(ch, line);
  else std::fprintf(stderr, "[fusegrad] %s\n", line.c_str());
}

/// Runs the pending graph (and clears the trace): the phases below, in order. A graph with
/// no live output is dropped; a thrown error leaves the trace for `abandon`.
template <Element T>
void trace<T>::flush(std::string_view why, bool is_break) {
  if (g_.empty()) return;
  note_flush_for_capture();
  if (st_->opts.trace_once) refuse_unreplayable(why, is_break);
  if (is_break) note_graph_break(why);
  pause_recording paused;
  if (collect_outputs()) {
    const bool gm = grad_mode_;
    find_aliases(inputs_, alias_, first_of_storage_);
    const std::uint64_t key = cache_key();
    chosen_entry<T> chosen = look_up(key, gm);
    if (!chosen.e || chosen.e->eager) {
      run_node_by_node(!chosen.e, gm);
    } else {
      run_compiled(chosen.e, std::move(chosen.shapes));
      hand_run_to_capture(chosen.e);
    }
  }
  reset();
}

/// Counts the flush for a compiled-autograd capture that asked, not yet as a compiled run.
template <Element T>
void trace<T>::note_flush_for_capture() {
  if (!recording) return;
  ++recording->flushes;
  recording->compiled = false;
}

/// A sync point needs a traced value: an error under fullgraph, else a counted (and, once
/// per reason, logged) graph break.
template <Element T>
void trace<T>::note_graph_break(std::string_view why) {
  function_state& st = *st_;
  if (st.opts.fullgraph)
    fail("jit", "fullgraph=true, but ", why, " needs the value of a traced tensor, which would break the graph in '",
         st.opts.name, "'; remove the data-dependent code, or call fg::jit without fullgraph");
  bump(counter_cells().graph_breaks);
  if (!logs::enabled(logs::graph_breaks)) return;
  std::lock_guard lock(st.mu);
  if (st.breaks_logged.insert(std::string(why)).second)
    logs::emit(logs::graph_breaks, "graph break in '" + st.opts.name + "': " + std::string(why) +
                                       " needs the value of a traced tensor; the graph so far (" +
                                       std::to_string(g_.size()) +
                                       " nodes) is compiled and run, and tracing resumes after it");
}

/// The graph's outputs (`outs_`, `targets_`): its lazy tensors still alive, the only values
/// the run must produce; false when there are none and nothing needs to run.
template <Element T>
bool trace<T>::collect_outputs() {
  outs_.clear();
  targets_.clear();
  for (auto& [id, w] : lazies_)
    if (auto p = w.lock(); p && p->lazy == this) {
      outs_.push_back(id);
      targets_.push_back(std::move(p));
    }
  return !outs_.empty();
}

/// The hash the cache files the graph under: its structure, outputs and hooked nodes
/// (`hook_nodes_`, after putting the hooks in their run order, which the entry keys on).
template <Element T>
std::uint64_t trace<T>::cache_key() {
  fnv1a key(g_.structure_hash());
  for (int o : outs_) key.mix(static_cast<std::uint64_t>(o));
  hook_nodes_.clear();
  order_hooks(hooks_.begin(), hooks_.end(), [](const auto& hk) -> const hook<T>& { return hk.second; });
  for (const auto& hk : hooks_) {
    hook_nodes_.push_back(hk.first);
    // Offset so that a hook on node k mixes unlike an output k: neither list's length is mixed.
    key.mix(0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(hk.first));
  }
  return key.value();
}

/// The entry to run, under the function's lock: a cached one whose guards pass (a hit),
/// else a new compile, or none past the recompile limit.
template <Element T>
chosen_entry<T> trace<T>::look_up(std::uint64_t key, bool gm) {
  std::lock_guard lock(st_->mu);
  cache<T>& c = st_->cache_of<T>();
  if (chosen_entry<T> hit = find_cached(c, key, gm); hit.e) {
    bump(counter_cells().cache_hits);
    return hit;
  }
  bump(counter_cells().cache_misses);
  return compile_or_fall_back(c, key, gm);
}

/// Whether entry `e` was compiled from this graph: same key, outputs, hooked nodes and
/// structure (its guards on the inputs aside).
template <Element T>
bool trace<T>::is_this_graph(const entry<T>& e, std::uint64_t key) const {
  return e.hash == key && e.outputs == outs_ && e.hooks == hook_nodes_ && e.fwd_graph.same_structure(g_);
}

/// The most recently used entry of this graph whose guards pass and, if dynamic, whose
/// programs fit these shapes; moved to the front, so the next lookup tries it first.
template <Element T>
chosen_entry<T> trace<T>::find_cached(cache<T>& c, std::uint64_t key, bool gm) const {
  for (std::size_t q = 0; q < c.entries.size(); ++q) {
    const entry<T>& cand = *c.entries[q];
    if (!is_this_graph(cand, key) || !cand.accepts(inputs_, gm, alias_)) continue;
    chosen_entry<T> hit;
    if (cand.dynamic) {
      std::optional<std::vector<shape>> s = shapes_if_fits(cand, inputs_);
      if (!s) continue;
      hit.shapes = std::move(*s);
    }
    hit.e = c.entries[q];
    std::rotate(c.entries.begin(), c.entries.begin() + static_cast<std::ptrdiff_t>(q),
                c.entries.begin() + static_cast<std::ptrdiff_t>(q) + 1);
    return hit;
  }
  return {};
}

/// On a miss: compiles a new entry (a recompile, logged with its reason, when the graph has
/// one already), or past `recompile_limit` chooses none, so the graph runs eagerly.
template <Element T>
chosen_entry<T> trace<T>::compile_or_fall_back(cache<T>& c, std::uint64_t key, bool gm) {
  function_state& st = *st_;
  dynamic_dim_marks& marks = marks_for(c.marks, key, inputs_.size());
  const entry<T>* same = latest_of_graph(c, key);
  const std::string reason = same ? miss_reason(*same, gm, marks) : std::string();
  if (st.compiles >= st.opts.recompile_limit) {
    fall_back_past_limit(st, reason);
    return {};
  }
  ++st.compiles;
  if (same) {
    bump(counter_cells().recompiles);
    logs::emit(logs::recompiles, "recompiling '" + st.opts.name + "': " + reason);
  }
  return compile_new_entry(c, key, gm, marks.dims);
}

/// The most recently used entry of this graph, whatever its guards: the one a miss reports.
template <Element T>
const entry<T>* trace<T>::latest_of_graph(const cache<T>& c, std::uint64_t key) const {
  for (const auto& e : c.entries)
    if (is_this_graph(*e, key)) return e.get();
  return nullptr;
}

/// Why the inputs failed the guards of `same` (the first failing guard), marking in `marks`
/// the dims whose change failed them, so that the recompile takes them as dynamic.
template <Element T>
std::string trace<T>::miss_reason(const entry<T>& same, bool gm, dynamic_dim_marks& marks) const {
  std::vector<std::uint64_t> changed;
  std::string reason = first_guard_failure(same, inputs_, gm, alias_, changed);
  if (marks.dims.size() == changed.size())
    for (std::size_t i = 0; i < changed.size(); ++i) marks.dims[i] |= changed[i];
  return reason;
}

/// Compiles the graph into a new entry (eager-only under the eager backend), logs it, and
/// caches it as the most recently used.
template <Element T>
chosen_entry<T> trace<T>::compile_new_entry(cache<T>& c, std::uint64_t key, bool gm,
                                            const std::vector<std::uint64_t>& dynamic_dims) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < inputs_.size(); ++i) names.push_back(input_name(inputs_[i], i));
  auto made = compile_entry<T>(g_, outs_, rg_, inputs_, gm, alias_, dynamic_dims, std::move(names), key, hook_nodes_);
  bump(counter_cells().unique_graphs);
  if (st_->opts.backend == jit_backend::eager) made->eager = true;
  log_new_entry(*made);
  chosen_entry<T> chosen;
  if (made->dynamic) chosen.shapes = entry_shapes(*made, inputs_);
  c.entries.insert(c.entries.begin(), made);
  chosen.e = std::move(made);
  return chosen;
}

/// A new entry's graph, guards and program, each on the log channel that asks for it.
template <Element T>
void trace<T>::log_new_entry(const entry<T>& e) const {
  const function_state& st = *st_;
  if (logs::enabled(st.opts.graph_log))
    logs::emit(st.opts.graph_log, "graph of '" + st.opts.name + "':\n" + graph_text(e.names));
  if (logs::enabled(logs::guards))
    logs::emit(logs::guards, "guards of a new entry of '" + st.opts.name + "':\n" + e.guards_text());
  if (logs::enabled(logs::output_code))
    logs::emit(logs::output_code, "program of '" + st.opts.name + "':\n" + e.code_text());
}

/// Runs the graph through the eager ops in its grad mode, which record on the tape
/// themselves: the eager backend's way, or a fallback (past the limit, or too large).
template <Element T>
void trace<T>::run_node_by_node(bool past_limit, bool gm) {
  if (past_limit || st_->opts.backend != jit_backend::eager) {  // a fallback, not the eager backend's way
    st_->fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (!past_limit) bump(counter_cells().fallbacks);
  }
  std::optional<no_grad> off;
  if (!gm) off.emplace();
  const std::vector<tensor<T>> vals = eval_nodes_eagerly();
  for (const auto& [k, hk] : hooks_)  // on the tape, as eager register_hook would put them
    if (const auto& impl = vals[static_cast<std::size_t>(k)].raw_impl(); impl && impl->grad_fn)
      impl->grad_fn->pre_hooks(impl->output_nr).push_back(hk);
  for (std::size_t p = 0; p < outs_.size(); ++p) adopt(*targets_[p], vals[static_cast<std::size_t>(outs_[p])]);
}

/// Every node's value by its eager op (a custom node's function again, with its tape node).
template <Element T>
std::vector<tensor<T>> trace<T>::eval_nodes_eagerly() {
  std::vector<tensor<T>> vals(g_.size());
  const tensor<T> none;
  for (std::size_t k = 0; k < g_.size(); ++k) {
    const auto& n = g_.nodes()[k];
    if (n.kind == ir::node_kind::input) {
      vals[k] = inputs_[static_cast<std::size_t>(n.index)];
      continue;
    }
    if (n.kind == ir::node_kind::custom) {
      const ir::custom_call& c = g_.custom_at(static_cast<int>(k));
      std::vector<tensor<T>> in;
      for (int i : c.inputs) in.push_back(vals[static_cast<std::size_t>(i)]);
      vals[k] = ops::user_function_at<T>(c.fn, "jit").eager(in);
      continue;
    }
    const tensor<T>& a = vals[static_cast<std::size_t>(n.a)];
    const tensor<T>& b = n.b >= 0 ? vals[static_cast<std::size_t>(n.b)] : none;
    vals[k] = n.kind == ir::node_kind::call_hook || n.kind == ir::node_kind::call
                  ? jit::run_call(n, a, b, &calls_, n.sizes)
                  : jit::eval_eager(n, a, b, n.sizes);
  }
  return vals;
}

/// Runs compiled entry `e` (`shapes`: a dynamic entry's node shapes), giving the outputs
/// their values and recording its backward on the tape (run_entry.hpp).
template <Element T>
void trace<T>::run_compiled(const std::shared_ptr<const entry<T>>& e, std::vector<shape> shapes) {
  auto jshapes = e->dynamic ? std::make_shared<const std::vector<shape>>(std::move(shapes)) : nullptr;
  run_entry(e, inputs_, std::move(jshapes), calls_, hooks_, targets_);
}

/// Hands a capture that asked what it needs to replay this compiled run: the entry, its
/// inputs, the tensors it filled, and the call slots' functions and hook ids.
template <Element T>
void trace<T>::hand_run_to_capture(const std::shared_ptr<const entry<T>>& e) {
  if (!recording) return;
  recording->compiled = true;
  recording->e = e;
  recording->inputs = inputs_;
  recording->targets.clear();
  for (const auto& t : targets_) recording->targets.push_back(t.get());
  recording->calls = calls_;
  recording->call_hook_ids = call_hook_ids_;
  recording->call_hook_ids.resize(calls_.size());
}

}  // namespace fusegrad::detail::jit
