#pragma once
/// \file fusegrad/partition/plan.hpp
/// The save/recompute partitioner: fusegrad's counterpart of AOTAutograd's min-cut
/// partitioner, written as `constexpr` code over a small table of nodes so that a plan can
/// be computed (and checked) inside a `static_assert`.
///
/// **Input.** A `joint_graph<N>` holds the forward and the backward of one function as a
/// single DAG in topological order (every child index is smaller than its parent's).
/// `forward_root` marks the forward's outputs, `backward_root` the backward's outputs.
///
/// **Regions.**
///  - *F*, the forward set: every node reachable (through children) from a forward root.
///    A forward root must never reach a `grad_input` (the forward has no gradients): such a
///    graph is rejected (see "Errors"). Extension: an `input` reachable only from the
///    backward is also put in F, since inputs are handed to the forward, never computed by
///    the backward (a backward that reads it then gets it saved).
///  - *B*, the backward region: every node reachable from a backward root that is not in F
///    (this includes derivative-rule nodes that depend only on forward values, such as
///    `-sin(x)`: the backward computes them).
///  - *needed*: the non-`constant` F nodes that are direct children of a B node. Extension:
///    a non-`constant` F node that is itself a backward root is needed as well (the backward
///    must return it). Every needed value must be available to the backward, either saved by
///    the forward or recomputed in the backward from saved values.
///
/// **Policies** (`policy_kind`).
///  - `save_all` (what eager autograd saves): saved = needed.
///  - `recompute_all` (save only what cannot be recomputed): walk down from every needed
///    node through children; an `input`, `reduction` or `extern_op` node met by the walk is
///    saved and the walk stops there (so an input only feeding a saved reduction is not
///    saved); `constant`s stop the walk; everything else visited is recomputed.
///  - `min_cut` (the default): a minimum number of saved F nodes from which every needed
///    node can be recomputed with pointwise ops only. Computed as a max-flow/min-cut on the
///    node-split graph, every tensor costing 1:
///      * every non-`constant` F node v becomes v_in -> v_out, capacity 1 (cutting it = saving v);
///      * every F edge child -> parent becomes child_out -> parent_in, capacity infinite
///        (`constant` children are skipped: they are always available);
///      * source -> v_in (infinite) for every `input`, `reduction` and `extern_op` F node:
///        inputs are where values come from, and reductions/matmuls are never recomputed in
///        the backward, so for the flow they behave like fresh values from the source
///        (either they or something between them and the needed node must be saved);
///      * v_out -> sink (infinite) for every needed node v.
///    Every source-sink path crosses an in->out edge, so the max flow is at most N. It is
///    computed with Dinic's algorithm (BFS levels, then iterative blocking-flow DFS with
///    current-arc pointers; no recursion, so no constexpr depth limit) on fixed-size arrays.
///    **Tie-break:** among all minimum cuts we take the one *closest to the sink*: T = the
///    vertices that can still reach the sink in the residual graph (a reverse residual
///    search from the sink); saved = { v : v_out in T, v_in not in T }. The saved values are
///    then the latest possible ones, which minimises the recomputation left to the backward
///    (e.g. y = tanh(x) with a backward that reads y saves y, not x). This cut is unique, so
///    the plan is deterministic.
///    A forward node whose sibling (`node_info::sibling`: sin and cos of one operand) is a
///    backward node costs `sibling_cost` to recompute: the backward computes both together.
///  - `memory_budget`: the first of save_all, min_cut, recompute_all (least recomputation
///    first) whose saved_count <= budget; recompute_all when none fits.
///  - `cost` (the default): the plan of least estimated time. AOTAutograd's min-cut counts
///    tensors, the right measure on a GPU where pointwise ops are memory-bound; on a CPU a
///    `cos` costs more than streaming its result out and back in, while out of cache a load
///    costs more than most ops. So each node carries `cost`, what recomputing one element
///    of it costs, and the policy carries what a load and a store of one element cost in the
///    memory regime of the call (`memory_costs`: in cache or streaming). Saving a node costs
///    a store in the forward (none for an input: it is already in memory) and a load in the
///    backward; recomputing it costs its `cost`, or its `sibling_cost` where its sibling
///    (`node_info::sibling`: sin and cos of one operand) is a backward node, which the backward
///    computes anyway and together with it. The plan minimises the sum over the saved
///    and the recomputed nodes, exactly, as a min cut of the same node-split network with
///    these capacities:
///      * v_in -> v_out: the save cost of v (cut: v saved);
///      * source -> v_in: the recompute cost of v, infinite for inputs, reductions and
///        extern ops (cut: v_in on the sink side, i.e. v recomputed, which by the infinite
///        child edges makes its operands available to the backward too);
///    the other edges as for `min_cut`. With every save costing the same and recomputation
///    free it is `min_cut` (same network, same tie-break).
///
/// **Recompute set** (all policies): walk down from every needed node through children,
/// stopping at saved nodes and `constant`s; every F node visited that is not saved is
/// recomputed by the backward. A walk that would reach an unsaved `input`, `reduction` or
/// `extern_op` means an invalid plan; none of the three policies produces one (it is an
/// internal error if it ever happens).
///
/// **Errors.** A malformed graph throws `fusegrad::error` (op "partition::make_plan"), which in
/// a constant evaluation (`static_assert`, `constexpr` variable) is a compile error pointing at
/// the `throw` and its message: a child index that is not -1 and not smaller than the node's
/// own index, an `input`/`grad_input`/`constant` with children, a forward root that reaches a
/// `grad_input`, or an unknown policy kind.
///
/// **Writing graphs.** `node_info{kind, {3}}` initialises `children` to {3, 0, 0} (aggregate
/// initialisation value-initialises the rest of an array, the `{-1, -1, -1}` default only
/// applies when `children` is omitted entirely): always spell all three entries, e.g.
/// `{node_kind::pointwise, {3, -1, -1}}`.

#include <cstddef>

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/node_kinds.hpp"

namespace fusegrad::partition {

/// The most operands a node may have.
inline constexpr int max_children = 3;

/// One node of the joint graph.
struct node_info {
  node_kind kind = node_kind::pointwise;
  int children[max_children] = {-1, -1, -1};  ///< indices of operands (-1: none), each < this node's index
  bool forward_root = false;                  ///< an output of the forward
  bool backward_root = false;                 ///< an output of the backward (a gradient of an input)
  int cost = 0;                               ///< `cost` policy: recomputing one element of this (pointwise) node
  /// `cost` policy: the node whose value comes out of the same work as this one's on the same
  /// operand (sin and cos: ops/op.hpp, `has_sibling`), or -1; and what this node costs once
  /// that one is computed. A forward node whose sibling the backward computes is recomputed
  /// beside it for `sibling_cost`.
  int sibling = -1;
  int sibling_cost = 0;
};

/// What a load and a store of one element cost (`cost` policy), in the unit of the nodes'
/// costs (fusegrad's graphs use `ops::cost_units_per_load`; partition/costs.hpp has the
/// memory regimes).
struct memory_costs {
  int load = 0;
  int store = 0;
};

/// Forward and backward as one DAG, nodes in topological order: children always have smaller
/// indices than their parents.
template <std::size_t N>
struct joint_graph {
  node_info nodes[N];
  static constexpr std::size_t size = N;
};

/// Which plan to compute; see the file comment.
enum class policy_kind : unsigned char { min_cut, save_all, recompute_all, memory_budget, cost };

/// A policy and, for `memory_budget`, its budget; for `cost`, the memory regime's costs.
struct policy {
  policy_kind kind = policy_kind::min_cut;
  int budget = 0;         ///< memory_budget only: most tensors that may be saved
  memory_costs mem = {};  ///< cost only
};

/// What the forward saves and what the backward recomputes.
template <std::size_t N>
struct plan {
  bool forward[N] = {};     ///< node is computed by the forward pass (reachable from forward roots)
  bool backward[N] = {};    ///< node is part of the backward region
  bool saved[N] = {};       ///< node is saved by the forward for the backward
  bool recompute[N] = {};   ///< forward node the backward must recompute (not saved, needed)
  int saved_count = 0;      ///< number of saved nodes
  int saved_nodes[N] = {};  ///< the saved node indices in increasing order, then -1s
};

namespace detail {

inline constexpr const char* op_name = "partition::make_plan";

/// True for the kinds the backward never (re)computes from other forward values.
constexpr bool is_source_kind(node_kind k) {
  return k == node_kind::input || k == node_kind::reduction || k == node_kind::extern_op;
}

/// Rejects malformed graphs (see "Errors" in the file comment).
template <std::size_t N>
constexpr void validate(const joint_graph<N>& g) {
  for (std::size_t i = 0; i < N; ++i) {
    const node_info& n = g.nodes[i];
    for (int c : n.children) {
      if (c == -1) continue;
      if (c < 0 || static_cast<std::size_t>(c) >= i)
        throw fusegrad::error(op_name,
                              "a child index must be -1 or smaller than the node's own index "
                              "(nodes in topological order)");
      if (n.kind == node_kind::input || n.kind == node_kind::grad_input || n.kind == node_kind::constant)
        throw fusegrad::error(op_name, "an input, grad_input or constant node has no children");
    }
    if (n.sibling < -1 || n.sibling >= static_cast<int>(N) || n.sibling == static_cast<int>(i))
      throw fusegrad::error(op_name, "a sibling index must be -1 or another node's index");
  }
}

/// F, B and the needed set (see the file comment).
template <std::size_t N>
struct regions {
  bool forward[N] = {};
  bool backward[N] = {};
  bool needed[N] = {};
};

/// Reachability from the forward roots (into `r.forward`) and from the backward roots (into
/// `from_backward`): children have smaller indices, so one descending sweep propagates both.
template <std::size_t N>
constexpr void sweep_reachable(const joint_graph<N>& g, regions<N>& r, bool (&from_backward)[N]) {
  for (std::size_t i = 0; i < N; ++i) {
    r.forward[i] = g.nodes[i].forward_root;
    from_backward[i] = g.nodes[i].backward_root;
  }
  for (std::size_t i = N; i-- > 0;) {
    if (r.forward[i]) {
      if (g.nodes[i].kind == node_kind::grad_input)
        throw fusegrad::error(op_name,
                              "a forward root reaches a grad_input; expected the forward "
                              "to depend on inputs only");
      for (int c : g.nodes[i].children)
        if (c >= 0) r.forward[c] = true;
    }
    if (from_backward[i])
      for (int c : g.nodes[i].children)
        if (c >= 0) from_backward[c] = true;
  }
}

/// F (with the inputs only the backward reaches) and B, from the reachability sets.
template <std::size_t N>
constexpr void split_forward_backward(const joint_graph<N>& g, regions<N>& r, const bool (&from_backward)[N]) {
  for (std::size_t i = 0; i < N; ++i) {
    if (from_backward[i] && g.nodes[i].kind == node_kind::input) r.forward[i] = true;
    r.backward[i] = from_backward[i] && !r.forward[i];
  }
}

/// The needed set: non-`constant` F nodes read by a B node, or returned as a backward root.
template <std::size_t N>
constexpr void mark_needed(const joint_graph<N>& g, regions<N>& r) {
  for (std::size_t i = 0; i < N; ++i) {
    if (r.backward[i]) {
      for (int c : g.nodes[i].children)
        if (c >= 0 && r.forward[c] && g.nodes[c].kind != node_kind::constant) r.needed[c] = true;
    } else if (r.forward[i] && g.nodes[i].backward_root && g.nodes[i].kind != node_kind::constant) {
      r.needed[i] = true;
    }
  }
}

template <std::size_t N>
constexpr regions<N> find_regions(const joint_graph<N>& g) {
  regions<N> r;
  bool from_backward[N] = {};
  sweep_reachable(g, r, from_backward);
  split_forward_backward(g, r, from_backward);
  mark_needed(g, r);
  return r;
}

/// A flow network on fixed-size arrays: vertex 2v is v_in, 2v+1 is v_out, then source and sink.
/// Arcs come in pairs (a, a^1) = (edge, reverse edge); adjacency is a linked list per vertex.
template <std::size_t N>
struct flow_network {
  static constexpr int vertices = 2 * static_cast<int>(N) + 2;
  static constexpr int source = 2 * static_cast<int>(N);
  static constexpr int sink = source + 1;
  // Per node at most: in->out, source->in, 3 children->in, out->sink; two arcs each.
  static constexpr int max_arcs = 12 * static_cast<int>(N);
  static constexpr int infinite = 1 << 28;

  int head[vertices] = {};
  int next[max_arcs] = {};
  int to[max_arcs] = {};
  int cap[max_arcs] = {};
  int arcs = 0;

  constexpr flow_network() {
    for (int& h : head) h = -1;
  }

  constexpr void add_edge(int u, int v, int c) {
    to[arcs] = v;
    cap[arcs] = c;
    next[arcs] = head[u];
    head[u] = arcs++;
    to[arcs] = u;
    cap[arcs] = 0;
    next[arcs] = head[v];
    head[v] = arcs++;
  }

  /// Dinic's max flow from source to sink; leaves the residual capacities in `cap`.
  // NOLINTNEXTLINE(readability-function-cognitive-complexity): Dinic's algorithm, in its textbook form
  constexpr int max_flow() {
    int flow = 0;
    int level[vertices] = {};
    int queue[vertices] = {};
    int current[vertices] = {};
    int path[vertices] = {};  // arcs of the DFS path (a simple path: < vertices arcs)
    for (;;) {
      // BFS: levels in the residual graph.
      for (int& l : level) l = -1;
      int qh = 0, qt = 0;
      level[source] = 0;
      queue[qt++] = source;
      while (qh < qt) {
        const int u = queue[qh++];
        for (int a = head[u]; a != -1; a = next[a])
          if (cap[a] > 0 && level[to[a]] < 0) {
            level[to[a]] = level[u] + 1;
            queue[qt++] = to[a];
          }
      }
      if (level[sink] < 0) return flow;
      // Blocking flow: iterative DFS along level-increasing arcs, current-arc pointers.
      for (int v = 0; v < vertices; ++v) current[v] = head[v];
      int depth = 0;
      int u = source;
      for (;;) {
        if (u == sink) {
          int push = infinite;
          for (int k = 0; k < depth; ++k)
            if (cap[path[k]] < push) push = cap[path[k]];
          for (int k = 0; k < depth; ++k) {
            cap[path[k]] -= push;
            cap[path[k] ^ 1] += push;
          }
          flow += push;
          depth = 0;
          u = source;
          continue;
        }
        int& a = current[u];
        while (a != -1 && !(cap[a] > 0 && level[to[a]] == level[u] + 1)) a = next[a];
        if (a != -1) {
          path[depth++] = a;
          u = to[a];
          continue;
        }
        // Dead end: retreat and skip the arc that led here.
        if (u == source) break;
        level[u] = -1;
        const int back = path[--depth];
        u = to[back ^ 1];
        current[u] = next[current[u]];
      }
    }
  }

  /// Marks the vertices that can reach the sink in the residual graph.
  constexpr void reaches_sink(bool (&mark)[vertices]) const {
    int queue[vertices] = {};
    int qh = 0, qt = 0;
    mark[sink] = true;
    queue[qt++] = sink;
    while (qh < qt) {
      const int w = queue[qh++];
      // Every arc a out of w has its partner a^1 going into w, from to[a].
      for (int a = head[w]; a != -1; a = next[a])
        if (cap[a ^ 1] > 0 && !mark[to[a]]) {
          mark[to[a]] = true;
          queue[qt++] = to[a];
        }
    }
  }
};

/// The saved set of one policy, as flags.
template <std::size_t N>
struct saved_set {
  bool saved[N] = {};
};

template <std::size_t N>
constexpr saved_set<N> save_all(const joint_graph<N>&, const regions<N>& r) {
  saved_set<N> s;
  for (std::size_t i = 0; i < N; ++i) s.saved[i] = r.needed[i];
  return s;
}

template <std::size_t N>
constexpr saved_set<N> recompute_all(const joint_graph<N>& g, const regions<N>& r) {
  saved_set<N> s;
  bool visit[N] = {};
  for (std::size_t i = 0; i < N; ++i) visit[i] = r.needed[i];
  for (std::size_t i = N; i-- > 0;) {
    if (!visit[i]) continue;
    const node_kind k = g.nodes[i].kind;
    if (k == node_kind::constant) continue;
    if (is_source_kind(k)) {
      s.saved[i] = true;
      continue;
    }
    for (int c : g.nodes[i].children)
      if (c >= 0) visit[c] = true;
  }
  return s;
}

/// What recomputing forward node `i` in the backward costs (`cost` policy): its `cost`, or its
/// `sibling_cost` where its sibling is a backward node (computed anyway, from the same operand).
template <std::size_t N>
constexpr int recompute_cost(const joint_graph<N>& g, const regions<N>& r, std::size_t i) {
  const node_info& n = g.nodes[i];
  if (n.sibling >= 0 && r.backward[static_cast<std::size_t>(n.sibling)] && n.sibling_cost < n.cost)
    return n.sibling_cost;
  return n.cost;
}

/// The min cut of the node-split network (see the file comment): `min_cut` when `costed` is
/// false (every save costs 1, recomputation is free), the `cost` policy's network otherwise.
template <std::size_t N>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the network's construction and its cut
constexpr saved_set<N> min_cut(const joint_graph<N>& g, const regions<N>& r, bool costed = false,
                               memory_costs mem = {}) {
  using net_t = flow_network<N>;
  net_t net;
  auto save_cost = [&](const node_info& n) {
    if (!costed) return 1;
    return (n.kind == node_kind::input ? 0 : mem.store) + mem.load;
  };
  for (std::size_t i = 0; i < N; ++i) {
    const node_info& n = g.nodes[i];
    if (!r.forward[i] || n.kind == node_kind::constant) continue;
    if (n.cost < 0 || n.sibling_cost < 0 || mem.load < 0 || mem.store < 0)
      throw fusegrad::error(op_name, "a cost must not be negative");
    const int vin = 2 * static_cast<int>(i), vout = vin + 1;
    net.add_edge(vin, vout, save_cost(n));
    if (is_source_kind(n.kind)) net.add_edge(net_t::source, vin, net_t::infinite);
    else if (costed && recompute_cost(g, r, i) > 0) net.add_edge(net_t::source, vin, recompute_cost(g, r, i));
    for (int c : n.children)
      if (c >= 0 && g.nodes[c].kind != node_kind::constant) net.add_edge(2 * c + 1, vin, net_t::infinite);
    if (r.needed[i]) net.add_edge(vout, net_t::sink, net_t::infinite);
  }
  const int flow = net.max_flow();
  bool to_sink[net_t::vertices] = {};
  net.reaches_sink(to_sink);
  saved_set<N> s;
  int cut = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const node_info& n = g.nodes[i];
    if (!r.forward[i] || n.kind == node_kind::constant) continue;
    if (!to_sink[2 * i] && to_sink[2 * i + 1]) {
      s.saved[i] = true;
      cut += save_cost(n);
    } else if (costed && to_sink[2 * i] && !is_source_kind(n.kind)) {
      cut += recompute_cost(g, r, i);  // recomputed
    }
  }
  if (cut != flow) throw fusegrad::error(op_name, "internal error: the min cut does not match the max flow");
  return s;
}

/// Fills a plan from the regions and a saved set: saved_nodes, saved_count and recompute.
template <std::size_t N>
constexpr plan<N> finish(const joint_graph<N>& g, const regions<N>& r, const saved_set<N>& s) {
  plan<N> p;
  for (std::size_t i = 0; i < N; ++i) {
    p.forward[i] = r.forward[i];
    p.backward[i] = r.backward[i];
    p.saved[i] = s.saved[i];
    p.saved_nodes[i] = -1;
  }
  for (std::size_t i = 0; i < N; ++i)
    if (p.saved[i]) p.saved_nodes[p.saved_count++] = static_cast<int>(i);
  bool visit[N] = {};
  for (std::size_t i = 0; i < N; ++i) visit[i] = r.needed[i];
  for (std::size_t i = N; i-- > 0;) {
    if (!visit[i] || p.saved[i] || g.nodes[i].kind == node_kind::constant) continue;
    if (is_source_kind(g.nodes[i].kind))
      throw fusegrad::error(op_name,
                            "internal error: the plan neither saves nor can recompute "
                            "an input, reduction or extern_op the backward needs");
    p.recompute[i] = true;
    for (int c : g.nodes[i].children)
      if (c >= 0) visit[c] = true;
  }
  return p;
}

}  // namespace detail

/// What a call under plan `p` costs per element by the `cost` policy's measures, in the regime
/// whose loads and stores cost `mem`: every forward node computed once and every backward node
/// once, the inputs and the gradients of the outputs loaded, the outputs and the gradients of
/// the inputs stored, each saved value stored (an input is in memory already) and loaded back,
/// each recomputed value computed again. Two plans differ in the saved and recomputed terms
/// alone, which is what the plan's min cut minimises; the rest puts that difference in
/// proportion to the whole call.
template <std::size_t N>
constexpr long estimated_cost(const joint_graph<N>& g, const plan<N>& p, memory_costs mem) {
  long t = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const node_info& n = g.nodes[i];
    if (n.kind == node_kind::constant || (!p.forward[i] && !p.backward[i])) continue;
    const bool loaded = n.kind == node_kind::input || n.kind == node_kind::grad_input;
    t += loaded ? mem.load : n.cost;
    if (n.forward_root || n.backward_root) t += mem.store;
    if (p.saved[i]) t += (n.kind == node_kind::input ? 0 : mem.store) + mem.load;
    if (p.recompute[i])
      t += n.sibling >= 0 && p.backward[static_cast<std::size_t>(n.sibling)] && n.sibling_cost < n.cost ? n.sibling_cost
                                                                                                        : n.cost;
  }
  return t;
}

/// Partitions `g` under policy `p`: which forward values to save, which to recompute in the
/// backward. Usable in constant expressions; throws `fusegrad::error` for a malformed graph.
template <std::size_t N>
constexpr plan<N> make_plan(const joint_graph<N>& g, policy p) {
  detail::validate(g);
  const detail::regions<N> r = detail::find_regions(g);
  switch (p.kind) {
    case policy_kind::save_all: return detail::finish(g, r, detail::save_all(g, r));
    case policy_kind::recompute_all: return detail::finish(g, r, detail::recompute_all(g, r));
    case policy_kind::min_cut: return detail::finish(g, r, detail::min_cut(g, r));
    case policy_kind::cost: return detail::finish(g, r, detail::min_cut(g, r, true, p.mem));
    case policy_kind::memory_budget: {
      const plan<N> all = detail::finish(g, r, detail::save_all(g, r));
      if (all.saved_count <= p.budget) return all;
      const plan<N> cut = detail::finish(g, r, detail::min_cut(g, r));
      if (cut.saved_count <= p.budget) return cut;
      return detail::finish(g, r, detail::recompute_all(g, r));
    }
  }
  throw fusegrad::error(detail::op_name, "unknown policy kind");
}

}  // namespace fusegrad::partition
