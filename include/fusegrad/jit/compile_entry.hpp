#pragma once
/// \file fusegrad/jit/compile_entry.hpp
/// Compiling a cache entry of `fg::jit`: the save/recompute split of a joint graph from the
/// compile-time partitioner (run at run time), deriving and lowering a backward program, the
/// entry's forward and backward programs, and the backwards derived on first use for calls
/// where some outputs received no gradient.

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "fusegrad/ir/backward.hpp"
#include "fusegrad/jit/program.hpp"
#include "fusegrad/jit/entry.hpp"
#include "fusegrad/jit/native_request.hpp"
#include "fusegrad/jit/user_rule.hpp"
#include "fusegrad/ops/table.hpp"
#include "fusegrad/partition/costs.hpp"
#include "fusegrad/partition/plan.hpp"

namespace fusegrad::detail::jit {

/// The save/recompute split of a joint graph, from the compile-time partitioner's `make_plan`.
struct split {
  std::vector<int> saved;
  std::vector<bool> keep;  ///< node the backward computes (recomputed or backward region)
  partition::size_class cls = partition::size_class::cached;  ///< whose cost-based plan this is
};

/// The size class of a joint graph's call: `partition::size_class_of` the bytes of its
/// forward's values (inputs and every pointwise value, as if all were saved).
template <Element T>
partition::size_class size_class_of(const ir::graph<T>& J, const std::vector<int>& fwd_roots) {
  std::vector<char> fwd(J.size(), 0);
  for (int r : fwd_roots) fwd[static_cast<std::size_t>(r)] = 1;
  std::size_t bytes = 0;
  for (std::size_t k = J.size(); k-- > 0;) {
    if (!fwd[k]) continue;
    const auto& n = J.nodes()[k];
    bytes += static_cast<std::size_t>(numel(n.sizes)) * sizeof(T);
    for (int c : {n.a, n.b})
      if (c >= 0) fwd[static_cast<std::size_t>(c)] = 1;
  }
  return partition::size_class_of(bytes);
}

template <std::size_t N, Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): one case per node kind, then siblings, roots
split plan_split(const ir::graph<T>& J, int n_inputs, const std::vector<int>& fwd_roots,
                 const std::vector<int>& bwd_roots) {
  auto jg = std::make_unique<partition::joint_graph<N>>();
  for (std::size_t k = 0; k < N; ++k) {
    auto& pn = jg->nodes[k];
    if (k >= J.size()) {
      pn.kind = partition::node_kind::constant;
      continue;
    }
    const auto& n = J.nodes()[k];
    pn.kind = partition::kind_of(n.kind, n.index >= n_inputs);
    if (n.kind == ir::node_kind::pointwise) pn.cost = jit::cost_of<T>(n.op);
    if (n.kind == ir::node_kind::expand) pn.cost = fusegrad::detail::op_cost_units<void>();
    pn.children[0] = n.a;
    pn.children[1] = n.b;
  }
  // Siblings (sin and cos of one operand, which the programs compute together): by the
  // sibling op's number and the operand, the node that computes it.
  std::map<std::pair<int, int>, int> unary;
  for (std::size_t k = 0; k < J.size(); ++k) {
    const auto& n = J.nodes()[k];
    if (n.kind == ir::node_kind::pointwise && n.b < 0) unary.emplace(std::pair{n.op, n.a}, static_cast<int>(k));
  }
  for (std::size_t k = 0; k < J.size(); ++k) {
    const auto& n = J.nodes()[k];
    if (n.kind != ir::node_kind::pointwise || n.b >= 0) continue;
    const int sib = jit::sibling_of<T>(n.op).op;
    if (sib < 0) continue;
    if (const auto it = unary.find({sib, n.a}); it != unary.end()) {
      jg->nodes[k].sibling = it->second;
      jg->nodes[k].sibling_cost = jit::sibling_cost_of<T>(n.op);
    }
  }
  for (int r : fwd_roots) jg->nodes[static_cast<std::size_t>(r)].forward_root = true;
  for (int r : bwd_roots)
    if (r >= 0) jg->nodes[static_cast<std::size_t>(r)].backward_root = true;
  split s;
  s.cls = size_class_of(J, fwd_roots);
  const auto p = std::make_unique<partition::plan<N>>(partition::make_plan(*jg, partition::cost_policy(s.cls)));
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

/// The forward nodes of entry `e`'s grad outputs whose flag in `given` is set: where the
/// backward starts.
template <Element T>
std::vector<int> given_output_nodes(const entry<T>& e, const std::vector<char>& given) {
  std::vector<int> gouts;
  for (std::size_t j = 0; j < e.grad_outputs.size(); ++j)
    if (given[j]) gouts.push_back(e.outputs[static_cast<std::size_t>(e.grad_outputs[j])]);
  return gouts;
}

/// The backward graph `B`'s inputs: the saved values of joint graph `J`, then its given
/// gradients (its inputs past the forward's `fwd_size` nodes, each an input even if unused).
/// `map`: joint node -> node of `B`; `origin`: node of `B` -> joint node.
template <Element T>
void add_backward_inputs(const ir::graph<T>& J, std::size_t fwd_size, const std::vector<int>& saved, ir::graph<T>& B,
                         std::vector<int>& map, std::vector<int>& origin) {
  for (int s : saved) {
    map[static_cast<std::size_t>(s)] = B.add_input(J.at(s).sizes);
    origin.push_back(s);
  }
  for (std::size_t k = fwd_size; k < J.size(); ++k) {
    const auto& n = J.nodes()[k];
    if (n.kind == ir::node_kind::input) {
      map[k] = B.add_input(n.sizes);
      origin.push_back(static_cast<int>(k));
    }
  }
}

/// The joint nodes input gradients `grads` read, from them back to the backward's inputs
/// (`map`); a forward input on the way is one the partition should have saved.
template <Element T>
std::vector<char> nodes_needed(const ir::graph<T>& J, const std::vector<int>& grads, const std::vector<int>& map) {
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
  return need;
}

/// Copies the needed joint nodes that are not inputs of `B` into it, in order, their
/// operands renumbered by `map`.
template <Element T>
void copy_needed_nodes(const ir::graph<T>& J, const std::vector<char>& need, ir::graph<T>& B, std::vector<int>& map,
                       std::vector<int>& origin) {
  for (std::size_t k = 0; k < J.size(); ++k) {
    if (map[k] >= 0 || !need[k]) continue;
    ir::node<T> n = J.nodes()[k];
    for (int* c : {&n.a, &n.b, &n.ref})
      if (*c >= 0) *c = map[static_cast<std::size_t>(*c)];
    map[k] = B.add_copy(std::move(n));
    origin.push_back(static_cast<int>(k));
  }
}

/// The backward program's outputs: the nodes of the input gradients `grads` that are not
/// zero; `grad_of` gets each gradient's output (-1: a zero gradient).
inline std::vector<int> backward_outputs(const std::vector<int>& grads, const std::vector<int>& map,
                                         std::vector<int>& grad_of) {
  std::vector<int> bouts;
  for (int gnode : grads) {
    if (gnode < 0) {
      grad_of.push_back(-1);
      continue;
    }
    grad_of.push_back(static_cast<int>(bouts.size()));
    bouts.push_back(map[static_cast<std::size_t>(gnode)]);
  }
  return bouts;
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
                                                  const std::vector<int>& hooks, std::vector<int>& saved,
                                                  bool choose_saved) {
  auto b = std::make_shared<backward_code<T>>();
  b->given = std::move(given);
  b->hooks = hooks;
  b->joint = g;
  const std::vector<int> grads =
      ir::backward(b->joint, given_output_nodes(e, b->given), e.wrt_nodes, hooks, tensor_rules<T>());
  const ir::graph<T>& J = b->joint;
  if (choose_saved) {
    if (J.size() > max_joint_nodes) return nullptr;
    split sp = plan_any(J, g.num_inputs(), e.outputs, grads);
    saved = std::move(sp.saved);
    b->plan_class = sp.cls;
  }
  // The backward graph: saved values and the given gradients become its inputs; it holds
  // the nodes the input gradients need from them.
  ir::graph<T> B;
  std::vector<int> map(J.size(), -1);
  add_backward_inputs(J, g.size(), saved, B, map, b->origin);
  copy_needed_nodes(J, nodes_needed(J, grads, map), B, map, b->origin);
  std::vector<int> bouts = backward_outputs(grads, map, b->grad_of);
  b->prog.emplace(std::move(B), std::move(bouts));
  request_native(*b->prog);
  return b;
}

/// Compiles an entry for graph `g` (outputs `outs`, `rg`: node needs grad) and these inputs.
template <Element T>
std::shared_ptr<entry<T>> compile_entry(const ir::graph<T>& g, const std::vector<int>& outs,
                                        const std::vector<char>& rg, const std::vector<tensor<T>>& ins, bool gm,
                                        const std::vector<int>& alias, const std::vector<std::uint64_t>& marks,
                                        std::vector<std::string> names, std::uint64_t hash,
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
    if (g.nodes()[k].kind == ir::node_kind::input)
      input_node[static_cast<std::size_t>(g.nodes()[k].index)] = static_cast<int>(k);
  for (std::size_t p = 0; p < outs.size(); ++p)
    if (rg[static_cast<std::size_t>(outs[p])]) e->grad_outputs.push_back(static_cast<int>(p));
  for (std::size_t i = 0; i < ins.size(); ++i)
    if (e->inputs[i].requires_grad) e->wrt.push_back(static_cast<int>(i));
  std::vector<int> fwd_outs = outs;
  if (gm && !e->wrt.empty() && !e->grad_outputs.empty()) {
    for (int i : e->wrt) e->wrt_nodes.push_back(input_node[static_cast<std::size_t>(i)]);
    auto b =
        derive_backward(*e, g, std::vector<char>(e->grad_outputs.size(), 1), e->hooks, e->saved, /*choose_saved=*/true);
    if (!b) {
      e->eager = true;
      return e;
    }
    e->bwd = std::move(b);
    fwd_outs.insert(fwd_outs.end(), e->saved.begin(), e->saved.end());
  }
  e->fwd.emplace(g.lowered(), std::move(fwd_outs));
  request_native(*e->fwd);
  return e;
}

/// The backward of entry `e` when only the grad outputs flagged in `given` received
/// gradients, with `call_hook` slot `s` on node `hooks[s]` (the entry's hooks, then hooks
/// registered on its outputs after it ran): derived on first use and kept with the entry. `fwd`: the forward's node
/// shapes of a call of a dynamic entry (null: the entry's own sizes); `bs` receives the program's node shapes for it.
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
    g = e.fwd_graph;
    g.set_sizes(*fwd);
  }
  std::vector<int> saved = e.saved;
  std::shared_ptr<const backward_code<T>> v =
      derive_backward(e, fwd ? g : e.fwd_graph, given, hooks, saved, /*choose_saved=*/false);
  if (fwd) bs = backward_shapes(*v, joint_shapes(e, *v, *fwd));
  e.variants.push_back(v);
  return v;
}

}  // namespace fusegrad::detail::jit
