#pragma once
/// \file fusegrad/compiled_autograd/plan.hpp
/// How a cache hit runs a captured backward without running a rule: the `plan` a capture
/// makes (`make_plan`: where each input of the compiled graph comes from in what the key walk
/// collects, which hook each call slot is, which leaf each output accumulates into), its
/// printed signature, and `run_plan`, which runs it.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusegrad/compiled_autograd/key.hpp"
#include "fusegrad/core/reused_vector.hpp"
#include "fusegrad/jit/trace.hpp"

namespace fusegrad {
namespace compiled_autograd {

namespace detail {

/// How a cache hit runs a captured backward without running a rule (PyTorch's
/// `forward(inputs, sizes, scalars, hooks)`): the captured graph's cache entry, where each of
/// its inputs comes from in what the key walk collects (a saved tensor, a root gradient, a
/// node's scalar input), the leaves its outputs accumulate into, and its call slots: a
/// matmul's or a view's backward (kept from the capture: the rule's constants are in the key)
/// or a tensor hook, collected from the tape on each hit.
template <Element T>
struct plan {
  std::shared_ptr<const fusegrad::detail::jit::entry<T>> e;
  /// The key's sizes at the capture: a plan runs on those only (equal structure, constants
  /// and sizes trace to the same graph; the graph's own inputs do not give every size a
  /// rule baked in, such as a sum's input shape in its backward's `call` node).
  std::vector<index_t> key_sizes;
  std::vector<shape> shapes;  ///< the entry's node shapes for these sizes (a shape-generic entry)
  /// Per graph input: a collected tensor (`collected::tensors` index), root gradient `index`,
  /// or the scalar input of node `index` (NodeCall - 1; the graph reads it as a 0-d tensor).
  enum class from : std::uint8_t { saved, root, scalar };
  struct source {
    from kind = from::saved;
    std::uint32_t index = 0;
  };
  std::vector<source> inputs;
  /// The graph inputs whose shapes the key does not hold (a leaf's gradient so far): checked
  /// against the entry's guards on each hit. The key holds the others' shapes (saved tensors,
  /// root gradients; a scalar is 0-d), which passed those guards at the capture, so a hit
  /// with the capture's key sizes passes them again without a check.
  std::vector<std::uint32_t> unkeyed;
  /// Sources that were one tensor at the capture (a tensor two nodes saved: the graph reads it
  /// once, from the first): a hit runs the plan only where they are one tensor again.
  std::vector<std::pair<source, source>> same;
  std::vector<std::uint32_t> out_node;                 ///< per graph output: its AccumulateGrad (NodeCall - 1)
  std::vector<std::uint32_t> out_leaf;                 ///< per graph output: its leaf (`collected::leaves` index)
  std::size_t leaf_count = 0;                          ///< `collected::leaves`'s size at the capture (and on a hit)
  std::vector<char> out_added;                         ///< per graph output: the graph adds the leaf's gradient so far
  std::vector<fusegrad::detail::jit::call_fn<T>> fns;  ///< per call slot (a hook's is made on each hit)
  /// A hook slot: the hook at `index` of output `output` of node `node` (-1: the hooks of
  /// leaf `leaf`, a `collected::leaves` index).
  struct hook_source {
    std::uint32_t slot, node;
    int output;
    std::uint32_t index, leaf = 0;
  };
  std::vector<hook_source> hooks;
  /// The program bound once for these sizes where it is one element-wise loop
  /// (`program::bind_single_loop`): a hit without unkeyed inputs patches in its tensors'
  /// addresses alone.
  std::optional<typename fusegrad::detail::jit::program<T>::single_loop_run> single;
};

/// The name of size `d` of graph input `i` where it is dynamic: `s<i>_<d>`.
inline std::string size_name(std::size_t i, std::size_t d) {
  // Appended, not `"s" + std::to_string(i)`: GCC 12 warns falsely (-Wrestrict) on that inlined.
  std::string s = "s";
  s += std::to_string(i);
  s += '_';
  s += std::to_string(d);
  return s;
}

/// The node whose collected tensors hold flat index `flat` (`collected::tensors`), and which
/// of them it is.
template <Element T>
std::pair<std::size_t, std::uint32_t> node_of_flat(const collected<T>& col, std::uint32_t flat) {
  const auto q =
      static_cast<std::size_t>(std::upper_bound(col.offsets.begin(), col.offsets.end(), flat) - col.offsets.begin()) -
      1;
  return {q, flat - col.offsets[q]};
}

/// Where a graph input comes from, as the signature names it: the root gradient, a node's
/// scalar, a node's saved tensor or an AccumulateGrad's gradient so far.
template <Element T>
std::string source_text(const typename plan<T>::source& src, const collected<T>& col) {
  if (src.kind == plan<T>::from::root) return "GraphRoot (NodeCall 0) grad " + std::to_string(src.index);
  if (src.kind == plan<T>::from::scalar) {
    const auto q = src.index;
    return std::string(col.order[q]->name()) + " (NodeCall " + std::to_string(q + 1) + ") scalar";
  }
  const auto [q, k] = node_of_flat(col, src.index);
  const std::string_view name = col.order[q]->name();
  return std::string(name) + " (NodeCall " + std::to_string(q + 1) + ") " +
         (name == "AccumulateGrad" ? "grad so far" : "saved " + std::to_string(k));
}

/// Graph input `i`'s type: its element type and sizes, a dynamic size by its name.
template <Element T>
std::string input_type_text(const fusegrad::detail::jit::input_guard& g, std::size_t i) {
  std::string s = std::string(sizeof(T) == 4 ? "f32" : "f64") + "[";
  for (std::size_t d = 0; d < g.sizes.size(); ++d)
    s += (d ? ", " : "") + ((g.dynamic >> d) & 1U ? size_name(i, d) : std::to_string(g.sizes[d]));
  return s + "]";
}

/// The `sizes` line: every dynamic size of the graph's inputs.
template <Element T>
std::string dynamic_sizes_text(const plan<T>& p) {
  std::string s;
  for (std::size_t i = 0; i < p.e->inputs.size(); ++i)
    for (std::size_t d = 0; d < p.e->inputs[i].sizes.size(); ++d)
      if ((p.e->inputs[i].dynamic >> d) & 1U) s += std::string(s.empty() ? "" : ", ") + size_name(i, d);
  return s.empty() ? "(all static)" : s;
}

/// The `scalars` line: the inputs that are a node's lifted scalar.
template <Element T>
std::string scalars_text(const plan<T>& p) {
  std::string s;
  for (std::size_t i = 0; i < p.inputs.size(); ++i)
    if (p.inputs[i].kind == plan<T>::from::scalar)
      s += std::string(s.empty() ? " " : ", ") + "inputs[" + std::to_string(i) + "]";
  return s + (s.empty() ? " (none; " : " (") + "other constants specialised, keyed on each node's constants)";
}

/// The `hooks` lines: per hook slot, the node output or leaf whose hook it runs.
template <Element T>
std::string hooks_text(const plan<T>& p, const collected<T>& col) {
  std::string s;
  for (const auto& h : p.hooks)
    s += "\n    hooks[" + std::to_string(h.slot) + "] " + std::string(col.order[h.node]->name()) + " (NodeCall " +
         std::to_string(h.node + 1) + ") " +
         (h.output < 0 ? std::string("leaf") : "output " + std::to_string(h.output)) + " hook " +
         std::to_string(h.index);
  return p.hooks.empty() ? " (none)" : s;
}

/// The signature of a plan's graph, as PyTorch's compiled autograd prints it: a line per
/// input, then the dynamic sizes, the lifted scalars, the hooks and the outputs.
template <Element T>
std::string signature(const plan<T>& p, const collected<T>& col) {
  std::string s = "compiled autograd graph: forward(inputs, sizes, scalars, hooks)\n  inputs:";
  for (std::size_t i = 0; i < p.inputs.size(); ++i)
    s += "\n    inputs[" + std::to_string(i) + "] " + source_text(p.inputs[i], col) + ": " +
         input_type_text<T>(p.e->inputs[i], i);
  s += "\n  sizes: " + dynamic_sizes_text(p);
  s += "\n  scalars:" + scalars_text(p);
  s += "\n  hooks:" + hooks_text(p, col);
  s += "\n  outputs:";
  for (std::size_t o = 0; o < p.out_node.size(); ++o)
    s += " accumulate_grad(NodeCall " + std::to_string(p.out_node[o] + 1) + ")";
  return s;
}

/// What a capture's trace records of its flushes (the graph a plan runs).
template <Element T>
using flush_record = typename fusegrad::detail::jit::trace<T>::flush_record;

/// Where each collected tensor, root gradient and lifted scalar comes from, by its impl (one
/// source per impl, sorted by impl); `same` gets the sources that are one tensor with another
/// (saved inputs are the tensors themselves): the first of them reads it.
template <Element T>
std::vector<std::pair<const void*, typename plan<T>::source>> sources_by_impl(
    const collected<T>& col, std::vector<std::pair<typename plan<T>::source, typename plan<T>::source>>& same) {
  using from = typename plan<T>::from;
  std::vector<std::pair<const void*, typename plan<T>::source>> by_impl;
  for (std::size_t j = 0; j < col.owned.size(); ++j)
    if (col.owned[j].defined())
      by_impl.push_back({col.owned[j].raw_impl().get(), {from::saved, static_cast<std::uint32_t>(j)}});
  for (std::size_t j = 0; j < col.grads.size(); ++j)
    by_impl.push_back({col.grads[j].raw_impl().get(), {from::root, static_cast<std::uint32_t>(j)}});
  for (std::size_t j = 0; j < col.scalar_tensors.size(); ++j)
    by_impl.push_back({col.scalar_tensors[j].raw_impl().get(), {from::scalar, col.scalar_node[j]}});
  std::stable_sort(by_impl.begin(), by_impl.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::size_t w = 0;
  for (std::size_t j = 0; j < by_impl.size(); ++j) {
    if (w > 0 && by_impl[j].first == by_impl[w - 1].first) {
      same.emplace_back(by_impl[w - 1].second, by_impl[j].second);
      continue;
    }
    by_impl[w++] = by_impl[j];
  }
  by_impl.resize(w);
  return by_impl;
}

/// The source of each input of the captured graph; false where one was not collected (made by
/// a rule: zeros, ...).
template <Element T>
bool find_inputs(plan<T>& p, const flush_record<T>& rec,
                 const std::vector<std::pair<const void*, typename plan<T>::source>>& by_impl) {
  for (const auto& in : rec.inputs) {
    const void* k = in.raw_impl().get();
    auto it =
        std::lower_bound(by_impl.begin(), by_impl.end(), k, [](const auto& a, const void* b) { return a.first < b; });
    if (it == by_impl.end() || it->first != k) return false;
    p.inputs.push_back(it->second);
  }
  return true;
}

/// The `collected::leaves` index of the leaf of AccumulateGrad NodeCall q + 1: how many
/// AccumulateGrads come before it (the same on every tape of its key).
template <Element T>
std::uint32_t leaf_index(const collected<T>& col, std::size_t q) {
  return static_cast<std::uint32_t>(std::count_if(col.order.begin(), col.order.begin() + static_cast<std::ptrdiff_t>(q),
                                                  [](const node<T>* n) { return n->accumulates(); }));
}

/// The graph inputs whose shapes the key does not hold (`plan::unkeyed`): an AccumulateGrad's
/// gradient so far.
template <Element T>
void find_unkeyed(plan<T>& p, const collected<T>& col) {
  for (std::size_t i = 0; i < p.inputs.size(); ++i)
    if (p.inputs[i].kind == plan<T>::from::saved &&
        col.order[node_of_flat(col, p.inputs[i].index).first]->accumulates())
      p.unkeyed.push_back(static_cast<std::uint32_t>(i));
}

/// Whether `t` passes guard `g` of a graph input in a run without grad mode (what
/// `entry::accepts` checks of each input).
template <Element T>
bool fits_guard(const fusegrad::detail::jit::input_guard& g, const tensor<T>& t) {
  const shape& s = t.shape();
  if (g.requires_grad || s.size() != g.sizes.size()) return false;
  for (std::size_t d = 0; d < s.size(); ++d)
    if ((g.dynamic >> d) & 1U ? s[d] < 2 : s[d] != g.sizes[d]) return false;
  return true;
}

/// The AccumulateGrad each output of the captured graph goes to (its leaf's gradient), and
/// whether the graph added the gradient the leaf had; false where an output is not a leaf's.
template <Element T>
bool find_outputs(plan<T>& p, const flush_record<T>& rec, const collected<T>& col) {
  using from = typename plan<T>::from;
  for (const auto* t : rec.targets) {
    bool found = false;
    for (std::size_t q = 0; q < col.order.size() && !found; ++q)
      if (col.order[q]->accumulates())
        if (auto* acc = static_cast<fusegrad::detail::accumulate_grad<T>*>(col.order[q]))
          if (auto leaf = acc->variable(); leaf.defined() && leaf.raw_impl()->grad.raw_impl().get() == t) {
            p.out_node.push_back(static_cast<std::uint32_t>(q));
            p.out_leaf.push_back(leaf_index(col, q));
            const auto flat = col.offsets[q];  // the gradient it had: an input of the graph?
            p.out_added.push_back(std::any_of(p.inputs.begin(), p.inputs.end(), [&](const auto& src) {
              return src.kind == from::saved && src.index == flat;
            }));
            found = true;
          }
    if (!found) return false;
  }
  return true;
}

/// The pre-hook with id `id` of an output of node `n`: that output and the hook's index.
template <Element T>
std::optional<std::pair<int, std::uint32_t>> pre_hook_with_id(node<T>& n, std::uint64_t id) {
  for (std::size_t i = 0; i < n.num_outputs(); ++i) {
    const auto& hs = n.pre_hooks(i);
    for (std::size_t j = 0; j < hs.size(); ++j)
      if (hs[j].id == id) return std::pair{static_cast<int>(i), static_cast<std::uint32_t>(j)};
  }
  return std::nullopt;
}

/// The index of the leaf hook with id `id` where node `n` is an AccumulateGrad whose leaf
/// holds it.
template <Element T>
std::optional<std::uint32_t> leaf_hook_with_id(node<T>& n, std::uint64_t id) {
  if (!n.accumulates()) return std::nullopt;
  auto* acc = static_cast<fusegrad::detail::accumulate_grad<T>*>(&n);
  auto leaf = acc->variable();
  if (!leaf.defined()) return std::nullopt;
  const auto& hs = leaf.raw_impl()->leaf_hooks;
  for (std::size_t j = 0; j < hs.size(); ++j)
    if (hs[j].id == id) return static_cast<std::uint32_t>(j);
  return std::nullopt;
}

/// The tape's hook with id `id` for call slot `slot`: an output's pre-hook, or (output -1) an
/// AccumulateGrad's leaf hook; none where no node of the tape holds it.
template <Element T>
std::optional<typename plan<T>::hook_source> find_hook(const collected<T>& col, std::uint64_t id, std::size_t slot) {
  using hook_source = typename plan<T>::hook_source;
  const auto k = static_cast<std::uint32_t>(slot);
  for (std::size_t q = 0; q < col.order.size(); ++q) {
    node<T>& n = *col.order[q];
    if (const auto at = pre_hook_with_id(n, id))
      return hook_source{k, static_cast<std::uint32_t>(q), at->first, at->second, 0};
    if (const auto j = leaf_hook_with_id(n, id))
      return hook_source{k, static_cast<std::uint32_t>(q), -1, *j, leaf_index(col, q)};
  }
  return std::nullopt;
}

/// The call slots: matmul's and views' functions kept; hooks found on the tape by id (their
/// functions made on each hit); false where a hook is traced into the graph or not found.
template <Element T>
bool find_call_slots(plan<T>& p, const flush_record<T>& rec, const collected<T>& col) {
  p.fns = rec.calls;
  for (std::size_t k = 0; k < rec.calls.size(); ++k) {
    const std::uint64_t id = rec.call_hook_ids[k];
    if (id == 0) continue;
    if (id == ~std::uint64_t{0}) return false;
    const auto h = find_hook(col, id, k);
    if (!h) return false;
    p.hooks.push_back(*h);
    p.fns[k] = nullptr;
  }
  return true;
}

/// The plan of a capture that ran as one compiled graph, or null where its graph cannot run
/// from collected values alone (a graph break, an eager fallback, an input the walk did not
/// collect, an output that is not a leaf's gradient, a hook traced into the graph).
template <Element T>
std::shared_ptr<const plan<T>> make_plan(const flush_record<T>& rec, const collected<T>& col,
                                         const std::vector<index_t>& key_sizes) {
  if (!col.all || rec.flushes != 1 || !rec.compiled || !rec.e || rec.e->bwd || rec.e->eager) return nullptr;
  if (!rec.e->accepts(rec.inputs, false, rec.e->alias_of))
    return nullptr;  // (what a hit then checks of `unkeyed` only)
  auto p = std::make_shared<plan<T>>();
  p->e = rec.e;
  p->key_sizes = key_sizes;
  p->leaf_count = col.leaves.size();
  if (rec.e->dynamic) p->shapes = fusegrad::detail::jit::entry_shapes(*rec.e, rec.inputs);
  const auto by_impl = sources_by_impl(col, p->same);
  if (!find_inputs(*p, rec, by_impl) || !find_outputs(*p, rec, col) || !find_call_slots(*p, rec, col)) return nullptr;
  find_unkeyed(*p, col);
  if (p->unkeyed.empty()) p->single = rec.e->fwd->bind_single_loop(rec.e->dynamic ? &p->shapes : nullptr);
  return p;
}

/// The graph's inputs for a hit, in `inputs`: the collected tensors and root gradients the
/// plan names, by address (no node runs on a hit, so the tape's tensors stay where the walk
/// found them), and this tape's scalar inputs, made into 0-d tensors kept in `scalars`; false
/// where one is missing or the sources that were one tensor at the capture are no longer.
template <Element T>
bool gather_inputs(const plan<T>& p, const collected<T>& col, std::vector<const tensor<T>*>& inputs,
                   std::vector<tensor<T>>& scalars) {
  using from = typename plan<T>::from;
  auto tensor_of = [&](const typename plan<T>::source& src) {
    return src.kind == from::root ? &col.grads[src.index] : col.tensors[src.index];
  };
  for (const auto& [a, b] : p.same) {  // (scalar inputs are never one tensor with another)
    const tensor<T>*ta = tensor_of(a), *tb = tensor_of(b);
    if (!ta || !tb || ta->raw_impl() != tb->raw_impl()) return false;
  }
  scalars.reserve(p.inputs.size());  // (the addresses taken below stay valid)
  for (const auto& src : p.inputs) {
    if (src.kind == from::scalar) {  // this tape's value of the node's scalar
      T v;
      if (src.index >= col.order.size() || !col.order[src.index]->scalar_input(v)) return false;
      scalars.push_back(fusegrad::full<T>(shape{}, v));
      inputs.push_back(&scalars.back());
      continue;
    }
    const tensor<T>* t = tensor_of(src);
    if (!t || !t->defined()) return false;
    inputs.push_back(t);
  }
  return true;
}

/// The plan's call slots with this tape's hooks in theirs, in `with_hooks`; false where a
/// hooked leaf is gone.
template <Element T>
bool bind_hooks(const plan<T>& p, const collected<T>& col, std::vector<fusegrad::detail::jit::call_fn<T>>& with_hooks) {
  with_hooks = p.fns;
  for (const auto& hs : p.hooks) {
    node<T>* n = col.order[hs.node];
    hook<T> h;
    if (hs.output >= 0) {
      h = n->pre_hooks(static_cast<std::size_t>(hs.output)).at(hs.index);
    } else {
      const tensor<T>& leaf = col.leaves[hs.leaf];  // (alive at the walk, kept since)
      if (!leaf.defined()) return false;
      h = leaf.raw_impl()->leaf_hooks.at(hs.index);
    }
    with_hooks[hs.slot] = [h = std::move(h)](const tensor<T>& g, const tensor<T>&) {
      return fusegrad::detail::apply_hook(h, g);
    };
  }
  return true;
}

/// Each graph output into its leaf's gradient (added to the gradient so far where the graph
/// did not add it, as eagerly; else taken over, copied unless owned alone).
template <Element T>
void accumulate_outputs(const plan<T>& p, const collected<T>& col, std::vector<tensor<T>>& res) {
  for (std::size_t o = 0; o < p.out_node.size(); ++o) {
    const tensor<T>& leaf = col.leaves[p.out_leaf[o]];  // (alive at the walk, kept since)
    if (!leaf.defined()) continue;
    const auto& impl = leaf.raw_impl();
    tensor<T> g = std::move(res[o]);
    std::lock_guard lock(impl->mutex);
    if (!p.out_added[o] && impl->grad.defined()) {  // captured without a gradient so far: added here, as eagerly
      fusegrad::detail::write_grad(
          impl, fusegrad::detail::zip("AccumulateGrad", fusegrad::detail::accumulate_values{}, impl->grad, g));
    } else {
      if (!fusegrad::detail::owned_alone(g)) g = fusegrad::detail::contiguous_copy(g);
      fusegrad::detail::write_grad(impl, std::move(g));
    }
  }
}

/// A cache hit: the captured graph run on the values the key walk collected, its outputs
/// accumulated into the leaves (PyTorch's AccumulateGrad: a fresh buffer is taken over).
/// False, having changed nothing, where the inputs do not fit the plan's program (the caller
/// then captures again). The caller matched the key's sizes to the plan's: of the entry's
/// guards, only the `unkeyed` inputs' are left to check.
template <Element T>
bool run_plan(const plan<T>& p, const collected<T>& col, bool retain_graph) {
  const auto& e = *p.e;
  struct plan_inputs;
  struct plan_scalars;
  struct plan_outputs;
  fusegrad::detail::reused_vector<const tensor<T>*, plan_inputs> inputs;
  fusegrad::detail::reused_vector<tensor<T>, plan_scalars> scalars;
  if (col.leaves.size() != p.leaf_count || !gather_inputs(p, col, *inputs, *scalars)) return false;
  for (const std::uint32_t i : p.unkeyed)
    if (!fits_guard(e.inputs[i], *(*inputs)[i])) return false;
  const std::vector<fusegrad::detail::jit::call_fn<T>>* fns = &p.fns;
  std::vector<fusegrad::detail::jit::call_fn<T>> with_hooks;
  if (!p.hooks.empty()) {
    if (!bind_hooks(p, col, with_hooks)) return false;
    fns = &with_hooks;
  }
  fusegrad::detail::bump(fusegrad::detail::counter_cells().cache_hits);
  // The key's sizes are the capture's, and so the shapes of the inputs it holds: only an
  // unkeyed input (a leaf's gradient so far, whose dynamic sizes its guard lets vary) leaves
  // the program a shape to check.
  using check = typename fusegrad::detail::jit::program<T>::input_check;
  fusegrad::detail::reused_vector<tensor<T>, plan_outputs> res;
  {
    no_grad off;
    if (!p.single || !e.fwd->run_single_loop(*p.single, *inputs, *res))
      e.fwd->run_into(*inputs, *res, e.dynamic ? &p.shapes : nullptr, fns,
                      p.unkeyed.empty() ? check::guarded : check::shapes);
  }
  accumulate_outputs(p, col, *res);
  if (!retain_graph)
    for (node<T>* n : col.order) n->release_saved();
  return true;
}

}  // namespace detail
}  // namespace compiled_autograd
}  // namespace fusegrad
