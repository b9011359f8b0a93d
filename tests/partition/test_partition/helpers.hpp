#pragma once

// Tests of fusegrad's save/recompute partitioner (fusegrad/partition/plan.hpp).
//
// The joint graphs are built by hand; the expected saved sets are derived by hand in the
// comments. Every plan is also checked by an independent runtime checker (regions, validity,
// recompute set), and min_cut's size is compared with a brute-force search over all subsets
// of the forward set, on the hand-built graphs and on ~200 random DAGs. The namespace-scope
// static_asserts prove that make_plan runs in constant evaluation.

#include <doctest/doctest.h>

#include <fusegrad/partition/plan.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

using fusegrad::partition::joint_graph;
using fusegrad::partition::make_plan;
using fusegrad::partition::node_info;
using fusegrad::partition::node_kind;
using fusegrad::partition::plan;
using fusegrad::partition::policy;
using fusegrad::partition::policy_kind;

// ---------------------------------------------------------------------------------------------
// Graph-building helpers (spell all three children: see the header's "Writing graphs").
// ---------------------------------------------------------------------------------------------

constexpr node_info mk(node_kind k, int a = -1, int b = -1, int c = -1) {
  node_info n;
  n.kind = k;
  n.children[0] = a;
  n.children[1] = b;
  n.children[2] = c;
  return n;
}
constexpr node_info in() { return mk(node_kind::input); }
constexpr node_info gin() { return mk(node_kind::grad_input); }
constexpr node_info cst() { return mk(node_kind::constant); }
constexpr node_info pw(int a, int b = -1, int c = -1) { return mk(node_kind::pointwise, a, b, c); }
constexpr node_info red(int a) { return mk(node_kind::reduction, a); }
constexpr node_info ext(int a, int b) { return mk(node_kind::extern_op, a, b); }
constexpr node_info froot(node_info n) {
  n.forward_root = true;
  return n;
}
constexpr node_info broot(node_info n) {
  n.backward_root = true;
  return n;
}

constexpr policy min_cut{policy_kind::min_cut, 0};
constexpr policy save_all{policy_kind::save_all, 0};
constexpr policy recompute_all{policy_kind::recompute_all, 0};
constexpr policy budget(int b) { return {policy_kind::memory_budget, b}; }
/// Every save costing one load (no store), recomputation free: the cost policy is min_cut.
constexpr policy uniform{policy_kind::cost, 0, {1, 0}};

/// True when exactly the nodes in `want` are saved, listed ascending in saved_nodes.
template <std::size_t N, std::size_t M>
constexpr bool saves(const plan<N>& p, const int (&want)[M]) {
  if (p.saved_count != static_cast<int>(M)) return false;
  for (std::size_t k = 0; k < M; ++k)
    if (p.saved_nodes[k] != want[k] || !p.saved[want[k]]) return false;
  for (std::size_t k = M; k < N; ++k)
    if (p.saved_nodes[k] != -1) return false;
  return true;
}
template <std::size_t N>
constexpr bool saves_nothing(const plan<N>& p) {
  if (p.saved_count != 0) return false;
  for (std::size_t i = 0; i < N; ++i)
    if (p.saved[i] || p.saved_nodes[i] != -1) return false;
  return true;
}

/// True when exactly the nodes in `want` are recomputed.
template <std::size_t N, std::size_t M>
constexpr bool recomputes(const plan<N>& p, const int (&want)[M]) {
  bool expect[N] = {};
  for (int w : want) expect[w] = true;
  for (std::size_t i = 0; i < N; ++i)
    if (p.recompute[i] != expect[i]) return false;
  return true;
}
template <std::size_t N>
constexpr bool recomputes_nothing(const plan<N>& p) {
  for (bool r : p.recompute)
    if (r) return false;
  return true;
}

template <std::size_t N>
constexpr bool same_plan(const plan<N>& a, const plan<N>& b) {
  if (a.saved_count != b.saved_count) return false;
  for (std::size_t i = 0; i < N; ++i)
    if (a.forward[i] != b.forward[i] || a.backward[i] != b.backward[i] || a.saved[i] != b.saved[i] ||
        a.recompute[i] != b.recompute[i] || a.saved_nodes[i] != b.saved_nodes[i])
      return false;
  return true;
}

// A constexpr LCG shared by the compile-time and runtime random graphs.
struct lcg {
  std::uint64_t state;
  constexpr std::uint32_t next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 33);
  }
  constexpr int below(int n) { return static_cast<int>(next() % static_cast<std::uint32_t>(n)); }
};

/// A random joint graph of N nodes: `inputs` inputs, `fwd` forward ops (mostly pointwise, some
/// reductions/extern ops/constants), one grad input, `bwd` backward ops reading earlier nodes
/// (forward values and gradients); unused trailing nodes are unreachable constants. With
/// `local`, forward operands are drawn from the three latest nodes: long, narrow graphs where
/// the cheapest cut lies in the middle rather than at the inputs or at the needed values.
template <std::size_t N>
constexpr joint_graph<N> random_graph(std::uint64_t seed, int inputs, int fwd, int bwd, bool local = false) {
  lcg r{seed};
  joint_graph<N> g{};
  for (auto& n : g.nodes) n = cst();
  int k = 0;
  for (int i = 0; i < inputs; ++i) g.nodes[k++] = in();
  const int fwd_begin = k;
  for (int i = 0; i < fwd; ++i, ++k) {
    const int roll = r.below(20);
    const int arity = 1 + r.below(3);
    node_info n = mk(node_kind::pointwise);
    if (roll <= 1) n.kind = node_kind::reduction;
    if (roll == 2) n.kind = node_kind::extern_op;
    if (roll == 3) {
      g.nodes[k] = cst();
      continue;
    }
    for (int c = 0; c < arity; ++c) n.children[c] = local ? k - 1 - r.below(k < 3 ? k : 3) : r.below(k);
    if (g.nodes[n.children[0]].kind == node_kind::constant) n.children[0] = r.below(inputs);
    g.nodes[k] = n;
  }
  const int fwd_end = k;
  g.nodes[fwd_end - 1].forward_root = true;
  for (int i = fwd_begin; i < fwd_end; ++i)
    if (r.below(5) == 0) g.nodes[i].forward_root = true;
  const int grad = k;
  g.nodes[k++] = gin();
  for (int i = 0; i < bwd && k < static_cast<int>(N); ++i, ++k) {
    const int roll = r.below(20);
    const int arity = 1 + r.below(3);
    node_info n = mk(roll == 0 ? node_kind::reduction : roll == 1 ? node_kind::extern_op : node_kind::pointwise);
    // First operand: the gradient flow (grad input or an earlier backward node) most of the time.
    n.children[0] = r.below(3) == 0 ? r.below(fwd_end) : grad + r.below(k - grad);
    for (int c = 1; c < arity; ++c) n.children[c] = r.below(k);
    if (r.below(4) == 0) n.backward_root = true;
    g.nodes[k] = n;
  }
  g.nodes[k - 1].backward_root = true;
  return g;
}

}  // namespace
