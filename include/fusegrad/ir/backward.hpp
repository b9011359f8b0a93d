#pragma once
/// \file fusegrad/ir/backward.hpp
/// Reverse mode on the run-time IR (AOTAutograd's joint graph, at run time): each op's own
/// derivative rule called on `ir::value`s appends the backward nodes.

#include <functional>
#include <vector>

#include "fusegrad/ir/graph.hpp"

namespace fusegrad::ir {

/// How `backward` differentiates a node of a user's element-wise op (fusegrad/ops/user_ops.hpp):
/// the op's rule is known only as a function of tensors, so the layer that records tensors into
/// a graph supplies this. It appends to `g` the gradient of operand `operand` (0 or 1) of node
/// `k`, whose gradient is node `gk`, and returns its node (-1: none).
template <Element T>
using user_rule = std::function<int(graph<T>& g, int k, int operand, int gk)>;
/// Likewise for the output of a user's `fg::function` (a `custom` node): appends to `g` its
/// backward for node `k`, whose gradient is node `gk`, and returns the node of each input's
/// gradient (-1: none), in the order of `g.custom_at(k).inputs`.
template <Element T>
using custom_rule = std::function<std::vector<int>(graph<T>& g, int k, int gk)>;

/// The rules `backward` is given for what only tensors can run (see `user_rule`).
template <Element T>
struct tensor_rules {
  user_rule<T> op;
  custom_rule<T> function;
};

/// Reverse mode on an IR graph, at run time, with each op's own derivative rule: appends
/// to `g` the backward of `outputs`, each seeded by a new input (its gradient, in order),
/// and returns the node of each of `wrt`'s gradients (-1: no path). `hooks[s]` is a node
/// whose complete gradient goes through `call_hook` slot `s` before flowing on (a tensor
/// hook; several on one node run in slot order), as the eager engine runs a tensor's hooks.
/// `user` differentiates the nodes of user ops and functions (without it, a graph holding one
/// is an error). A `custom` node is lowered to its value once its backward is appended: the
/// graph then holds only nodes that programs run.
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity,readability-function-size): one case per node kind
std::vector<int> backward(graph<T>& g, const std::vector<int>& outputs, const std::vector<int>& wrt,
                          const std::vector<int>& hooks = {}, const tensor_rules<T>& user = {}) {
  const std::size_t N = g.size();
  std::vector<int> adj(N, -1);
  for (int o : outputs) {
    const int seed = g.add_input(g.at(o).sizes);
    auto& a = adj[static_cast<std::size_t>(o)];
    a = a < 0 ? seed : (value<T>{&g, a} + value<T>{&g, seed}).id;
  }
  auto add_to = [&](int k, int contribution) {
    if (g.at(contribution).sizes != g.at(k).sizes) contribution = g.add_sum_to(contribution, k);
    auto& a = adj[static_cast<std::size_t>(k)];
    a = a < 0 ? contribution : (value<T>{&g, a} + value<T>{&g, contribution}).id;
  };
  for (std::size_t k = N; k-- > 0;) {
    if (adj[k] < 0) continue;
    for (std::size_t s = 0; s < hooks.size(); ++s)  // the users of node k are done: its gradient is whole
      if (hooks[s] == static_cast<int>(k)) adj[k] = g.add_call_hook(adj[k], static_cast<int>(s));
    const int gk = adj[k];
    const node<T> n = g.at(static_cast<int>(k));  // a copy: appending may reallocate
    const value<T> gv{&g, gk}, y{&g, static_cast<int>(k)};
    switch (n.kind) {
      case node_kind::input: break;
      case node_kind::pointwise:
        if (n.op >= ops::table_size<T>) {  // a user's op: its rule runs on tensors
          if (!graph<T>::op_has_derivative(n.op)) break;
          if (!user.op)
            fusegrad::detail::fail("ir::backward", "node ", k, " is the user op '", graph<T>::op_name(n.op),
                                   "', whose rule runs on tensors; expected a user_rule to record it");
          for (int operand = 0; operand < (n.b >= 0 ? 2 : 1); ++operand)
            if (const int d = user.op(g, static_cast<int>(k), operand, gk); d >= 0) add_to(operand == 0 ? n.a : n.b, d);
          break;
        }
        visit_op(n, [&](const auto& op) {
          using Op = std::remove_cvref_t<decltype(op)>;
          const value<T> x0{&g, n.a};
          if constexpr (fusegrad::detail::has_unary_derivative<Op, value<T>>) {
            add_to(n.a, op.derivative(x0, y, gv).id);
          } else if constexpr (fusegrad::detail::has_binary_derivative<Op, value<T>>) {
            const value<T> x1{&g, n.b};
            const int da = op.da(x0, x1, y, gv).id;
            const int db = op.db(x0, x1, y, gv).id;
            add_to(n.a, da);
            add_to(n.b, db);
          }
        });
        break;
      case node_kind::sum: add_to(n.a, g.add_expand(gk, n.a, n.dims)); break;
      case node_kind::mean: add_to(n.a, g.add_expand(gk, n.a, n.dims, /*average=*/true)); break;
      case node_kind::max: {
        // amax's rule (fusegrad/ops/max.hpp): the gradient is split evenly between the maximal elements.
        const value<T> x{&g, n.a};
        const value<T> mask =
            fusegrad::detail::max_hits(x, value<T>{&g, g.add_expand(static_cast<int>(k), n.a, n.dims)});
        const value<T> sums{&g, g.add_reduction(node_kind::sum, mask.id, n.dims)};
        const value<T> count{&g, g.add_expand(fusegrad::detail::max_count(sums).id, n.a, n.dims)};
        add_to(n.a, (value<T>{&g, g.add_expand(gk, n.a, n.dims)} * mask / count).id);
        break;
      }
      case node_kind::expand: {
        // The adjoint of broadcasting a reduced value back: sum over the same dims.
        int r = g.add_reduction(node_kind::sum, gk, n.dims, /*keepdim=*/false);
        if (g.at(r).sizes != g.at(n.a).sizes) r = g.add_sum_to(r, n.a);  // keepdim-shaped operand
        if (n.average) {
          const auto cnt =
              fusegrad::detail::reduced_count(g.at(n.ref).sizes, dims_mask(n.dims, g.at(n.ref).sizes.size()));
          r = (value<T>{&g, r} / static_cast<T>(cnt)).id;
        }
        add_to(n.a, r);
        break;
      }
      case node_kind::sum_to: add_to(n.a, g.add_expand(gk, n.a, 0)); break;
      case node_kind::custom: {
        if (!g.custom_at(static_cast<int>(k)).differentiable) break;  // its output needs no grad
        if (!user.function)
          fusegrad::detail::fail("ir::backward", "node ", k,
                                 " is the output of a user's fg::function, whose backward "
                                 "runs on tensors; expected a custom_rule to record it");
        const std::vector<int> inputs = g.custom_at(static_cast<int>(k)).inputs;  // a copy: appending may reallocate
        const std::vector<int> grads = user.function(g, static_cast<int>(k), gk);
        for (std::size_t i = 0; i < inputs.size() && i < grads.size(); ++i)
          if (grads[i] >= 0) add_to(inputs[i], grads[i]);
        break;
      }
      case node_kind::call_hook:
      case node_kind::call:
        fusegrad::detail::fail("ir::backward",
                               "a call node has no derivative rule (an opaque function is not differentiated); "
                               "expected call nodes only in captured backward passes, which run without grad mode");
    }
  }
  for (std::size_t k = 0; k < N; ++k)
    if (g.at(static_cast<int>(k)).kind == node_kind::custom) g.lower_custom(static_cast<int>(k));
  std::vector<int> out;
  for (int w : wrt) out.push_back(adj.at(static_cast<std::size_t>(w)));
  return out;
}

}  // namespace fusegrad::ir
