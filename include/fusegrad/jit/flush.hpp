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

template <Element T>
void trace<T>::flush(std::string_view why, bool is_break) {
  if (g_.empty()) return;
  if (recording) {
    ++recording->flushes;
    recording->compiled = false;
  }
  function_state& st = *st_;
  if (st.opts.trace_once) refuse_unreplayable(why, is_break);
  if (is_break) {
    if (st.opts.fullgraph)
      fail("jit", "fullgraph=true, but ", why, " needs the value of a traced tensor, which would break the graph in '",
           st.opts.name, "'; remove the data-dependent code, or call fg::jit without fullgraph");
    bump(counter_cells().graph_breaks);
    if (logs::enabled(logs::graph_breaks)) {
      std::lock_guard lock(st.mu);
      if (st.breaks_logged.insert(std::string(why)).second)
        logs::emit(logs::graph_breaks, "graph break in '" + st.opts.name + "': " + std::string(why) +
                                           " needs the value of a traced tensor; the graph so far (" +
                                           std::to_string(g_.size()) +
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
  find_aliases(inputs_, alias, first_of_storage_);
  fnv1a key(g_.structure_hash());
  for (int o : outs) key.mix(static_cast<std::uint64_t>(o));
  std::vector<int>& hooked = hook_nodes_;  // the node of each hook: part of the key
  hooked.clear();
  order_hooks(hooks_.begin(), hooks_.end(), [](const auto& hk) -> const hook<T>& { return hk.second; });
  for (const auto& hk : hooks_) {
    hooked.push_back(hk.first);
    // Offset so that a hook on node k mixes unlike an output k: neither list's length is mixed.
    key.mix(0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(hk.first));
  }
  const std::uint64_t h = key.value();

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
      if (cand.hash != h || cand.outputs != outs || cand.hooks != hooked || !cand.fwd_graph.same_structure(g_))
        continue;
      if (!same) same = &cand;
      if (!cand.accepts(inputs_, gm, alias)) continue;
      if (cand.dynamic) {
        std::vector<shape> s;
        try {
          s = entry_shapes(cand, inputs_);
        } catch (const error&) { continue; }
        if (!cand.fwd->fits(s) || (cand.bwd && !cand.bwd->prog->fits(backward_shapes(*cand.bwd, s)))) continue;
        shapes = std::move(s);
      }
      e = c.entries[q];
      std::rotate(c.entries.begin(), c.entries.begin() + static_cast<std::ptrdiff_t>(q),
                  c.entries.begin() + static_cast<std::ptrdiff_t>(q) + 1);
      break;
    }
    if (e) {
      bump(counter_cells().cache_hits);
    } else {
      bump(counter_cells().cache_misses);
      std::vector<std::uint64_t> changed;
      std::string reason;
      dynamic_dim_marks* marks = nullptr;
      for (auto& m : c.marks)
        if (m.hash == h) marks = &m;
      if (!marks) {
        c.marks.push_back({h, std::vector<std::uint64_t>(inputs_.size(), 0)});
        marks = &c.marks.back();
      }
      if (same) {
        reason = first_guard_failure(*same, inputs_, gm, alias, changed);
        if (marks->dims.size() == changed.size())
          for (std::size_t i = 0; i < changed.size(); ++i) marks->dims[i] |= changed[i];
      }
      if (st.compiles >= st.opts.recompile_limit) {
        run_eagerly = true;
        bump(counter_cells().fallbacks);
        if (!st.limit_logged) {
          st.limit_logged = true;
          logs::channel ch = logs::enabled(logs::recompiles) ? logs::recompiles : logs::graph_breaks;
          const std::string line = "'" + st.opts.name + "' hit the recompile limit (" +
                                   std::to_string(st.opts.recompile_limit) +
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
        auto made = compile_entry<T>(g_, outs, rg_, inputs_, gm, alias, marks->dims, std::move(names), h, hooked);
        bump(counter_cells().unique_graphs);
        if (st.opts.backend == jit_backend::eager) made->eager = true;
        if (logs::enabled(st.opts.graph_log))
          logs::emit(st.opts.graph_log, "graph of '" + st.opts.name + "':\n" + graph_text(made->names));
        if (logs::enabled(logs::guards))
          logs::emit(logs::guards, "guards of a new entry of '" + st.opts.name + "':\n" + made->guards_text());
        if (logs::enabled(logs::output_code))
          logs::emit(logs::output_code, "program of '" + st.opts.name + "':\n" + made->code_text());
        if (made->dynamic) shapes = entry_shapes(*made, inputs_);
        c.entries.insert(c.entries.begin(), made);
        e = std::move(made);
      }
    }
  }

  if (run_eagerly || e->eager) {
    // Node by node through the eager ops, which record on the tape themselves.
    if (run_eagerly || st.opts.backend != jit_backend::eager) {  // a fallback, not the eager backend's way
      st.fallbacks.fetch_add(1, std::memory_order_relaxed);
      if (!run_eagerly) bump(counter_cells().fallbacks);
    }
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
      if (n.kind == ir::node_kind::custom) {  // the function again, eagerly, with its tape node
        const ir::custom_call& c = g_.custom_at(static_cast<int>(k));
        std::vector<tensor<T>> in;
        for (int i : c.inputs) in.push_back(vals[static_cast<std::size_t>(i)]);
        vals[k] = ops::user_function_at<T>(c.fn, "jit").eager(in);
        continue;
      }
      const tensor<T>& a = vals[static_cast<std::size_t>(n.a)];
      const tensor<T>& b = n.b >= 0 ? vals[static_cast<std::size_t>(n.b)] : none;
      vals[k] = n.kind == ir::node_kind::call_hook || n.kind == ir::node_kind::call
                    ? ir::run_call(n, a, b, &calls_, n.sizes)
                    : ir::eval_eager(n, a, b, n.sizes);
    }
    for (const auto& [k, hk] : hooks_)  // on the tape, as eager register_hook would put them
      if (const auto& impl = vals[static_cast<std::size_t>(k)].raw_impl(); impl && impl->grad_fn)
        impl->grad_fn->pre_hooks(impl->output_nr).push_back(hk);
    for (std::size_t p = 0; p < outs.size(); ++p) adopt(*targets[p], vals[static_cast<std::size_t>(outs[p])]);
    reset();
    return;
  }

  auto jshapes = e->dynamic ? std::make_shared<const std::vector<shape>>(std::move(shapes)) : nullptr;
  run_entry(e, inputs_, std::move(jshapes), calls_, hooks_, targets);
  if (recording) {
    recording->compiled = true;
    recording->e = e;
    recording->inputs = inputs_;
    recording->targets.clear();
    for (const auto& t : targets) recording->targets.push_back(t.get());
    recording->calls = calls_;
    recording->call_hook_ids = call_hook_ids_;
    recording->call_hook_ids.resize(calls_.size());
  }
  reset();
}

}  // namespace fusegrad::detail::jit
