#pragma once
/// \file fusegrad/jit/entry.hpp
/// The guarded kernel cache of `fg::jit`: an entry's guards (graph structure, input sizes,
/// requires_grad, grad mode, aliasing) and compiled programs, the per-type caches (with their
/// `trace_once` records) and dims
/// marked dynamic of a jitted function, its shared state, the node shapes of an entry for
/// other inputs, and why an entry's guards reject inputs (the recompiles log).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fusegrad/ir/backward.hpp"
#include "fusegrad/jit/options.hpp"
#include "fusegrad/jit/program.hpp"
#include "fusegrad/partition/costs.hpp"

namespace fusegrad::detail::jit {

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
  std::vector<char> given;              ///< per grad output (`entry::grad_outputs`): its gradient is an input
  std::vector<int> hooks;               ///< per `call_hook` slot: the forward node whose gradient it hooks
  ir::graph<T> joint;                   ///< forward + backward of the given outputs (shapes of dynamic entries)
  std::optional<jit::program<T>> prog;  ///< inputs: the entry's saved values, then the given gradients
  std::vector<int> origin;              ///< backward node -> joint node
  std::vector<int> grad_of;             ///< per wrt input: its output in `prog` (-1: zero gradient)
  /// The size class whose cost-based plan chose the saved values (the entry's first backward).
  partition::size_class plan_class = partition::size_class::cached;
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
  bool eager = false;                  ///< run node by node on the eager tape (graph too large to partition)
  std::optional<jit::program<T>> fwd;  ///< outputs: the graph's outputs, then the saved values
  // Backward.
  std::vector<int> grad_outputs;                ///< positions in `outputs` that take gradients
  std::vector<int> wrt;                         ///< input indices that receive gradients
  std::vector<int> wrt_nodes;                   ///< their input nodes
  std::vector<int> saved;                       ///< forward nodes the forward saves (chosen for all grad outputs)
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
    std::string s =
        "dtype == " + std::string(dtype_name<T>()) + "\ngrad_mode == " + (grad_mode ? "true" : "false") + "\n";
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto& g = inputs[i];
      s += "input '" + names[i] + "': rank == " + std::to_string(g.sizes.size());
      for (std::size_t d = 0; d < g.sizes.size(); ++d)
        s += ", size(" + std::to_string(d) + ")" +
             ((g.dynamic >> d) & 1U ? " >= 2 (dynamic)" : " == " + std::to_string(g.sizes[d]));
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
    if (bwd)
      s += "backward (saves " + std::to_string(saved.size()) + ", the cost-based plan for values that " +
           (bwd->plan_class == partition::size_class::cached ? "fit in cache" : "stream from memory") + "):\n" +
           bwd->prog->to_string();
    return s;
  }
};

/// Dims marked dynamic for one graph structure (per input).
struct dynamic_dim_marks {
  std::uint64_t hash = 0;
  std::vector<std::uint64_t> dims;
};

template <Element T>
struct traced_call;  // fusegrad/jit/replay.hpp

template <Element T>
struct cache {
  std::vector<std::shared_ptr<const entry<T>>> entries;  ///< most recently used first
  std::vector<dynamic_dim_marks> marks;
  std::vector<std::shared_ptr<const traced_call<T>>> traced;  ///< trace_once records, most recently used first
};

/// A number no other jitted function of the process has had (an address may be reused).
inline std::uint64_t next_function_id() noexcept {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

/// Everything a jitted function shares between calls and threads.
struct function_state {
  explicit function_state(jit_options o) : opts(std::move(o)) {}
  const std::uint64_t id = next_function_id();  ///< never 0
  jit_options opts;
  std::mutex mu;
  std::tuple<cache<float>, cache<double>> caches;
  int compiles = 0;
  /// Flushes of this function that ran eagerly as a fallback (past `recompile_limit`, or an
  /// entry too large to compile); compiled autograd reads it around a capture.
  std::atomic<std::uint64_t> fallbacks{0};
  bool limit_logged = false;
  std::set<std::string> breaks_logged;
  template <Element T>
  cache<T>& cache_of() {
    return std::get<cache<T>>(caches);
  }
};

/// Node shapes of backward `b`'s joint graph, from the shapes `fwd` of the forward's nodes
/// (its gradient inputs have the shapes of their outputs).
template <Element T>
std::vector<shape> joint_shapes(const entry<T>& e, const backward_code<T>& b, const std::vector<shape>& fwd) {
  std::vector<shape> in(e.inputs.size());
  for (std::size_t k = 0; k < e.fwd_graph.size(); ++k)
    if (const auto& n = e.fwd_graph.nodes()[k]; n.kind == ir::node_kind::input)
      in[static_cast<std::size_t>(n.index)] = fwd[k];
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

/// Why the most recent entry of a graph rejects these inputs (for the recompiles log), and
/// which dims changed size (to be marked dynamic).
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): one test per guard, in the guards' order
std::string first_guard_failure(const entry<T>& e, const std::vector<tensor<T>>& ins, bool gm,
                                const std::vector<int>& alias, std::vector<std::uint64_t>& changed) {
  std::string why;
  changed.assign(ins.size(), 0);
  auto note = [&](std::string s) {
    if (why.empty()) why = std::move(s);
  };
  if (gm != e.grad_mode)
    note(std::string("grad mode changed from ") + (e.grad_mode ? "enabled" : "disabled") + " to " +
         (gm ? "enabled" : "disabled"));
  if (ins.size() != e.inputs.size())
    note("number of inputs changed from " + std::to_string(e.inputs.size()) + " to " + std::to_string(ins.size()));
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
      note("requires_grad of " + nm + " changed from " + (g.requires_grad ? "true" : "false") + " to " +
           (g.requires_grad ? "false" : "true"));
  }
  if (alias != e.alias_of) note("aliasing between inputs changed");
  if (why.empty()) why = "shapes no longer fit the program's loops";
  return why;
}

}  // namespace fusegrad::detail::jit
