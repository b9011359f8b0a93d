#pragma once

// test_partition: an independent checker of plans at run time, and brute-force searches.
#include "helpers.hpp"

namespace {

// ---------------------------------------------------------------------------------------------
// Independent runtime checker. It works on vectors (not on the templates) so that it is
// compiled once, whatever the graph size; only make_plan is instantiated per N.
// ---------------------------------------------------------------------------------------------

using rt_graph = std::vector<node_info>;

struct rt_plan {
  std::vector<bool> forward, backward, saved, recompute;
  int saved_count = 0;
  std::vector<int> saved_nodes;
};

template <std::size_t N>
rt_graph to_rt(const joint_graph<N>& g) {
  return rt_graph(g.nodes, g.nodes + N);
}

template <std::size_t N>
rt_plan to_rt(const plan<N>& p) {
  return {std::vector<bool>(p.forward, p.forward + N),
          std::vector<bool>(p.backward, p.backward + N),
          std::vector<bool>(p.saved, p.saved + N),
          std::vector<bool>(p.recompute, p.recompute + N),
          p.saved_count,
          std::vector<int>(p.saved_nodes, p.saved_nodes + N)};
}

inline bool same_rt_plan(const rt_plan& a, const rt_plan& b) {
  return a.forward == b.forward && a.backward == b.backward && a.saved == b.saved && a.recompute == b.recompute &&
         a.saved_count == b.saved_count && a.saved_nodes == b.saved_nodes;
}

/// The plans of every policy on one graph; `budgets[b + 1]` is memory_budget with budget b,
/// for b = -1 .. N.
struct all_plans {
  rt_plan all, cut, rec;
  std::vector<rt_plan> budgets;
};

template <std::size_t N>
all_plans plans_of(const joint_graph<N>& g) {
  all_plans out{to_rt(make_plan(g, save_all)), to_rt(make_plan(g, min_cut)), to_rt(make_plan(g, recompute_all)), {}};
  for (int b = -1; b <= static_cast<int>(N); ++b) out.budgets.push_back(to_rt(make_plan(g, budget(b))));
  return out;
}

struct regions_rt {
  std::vector<bool> forward, backward, needed;
};

/// F, B and needed by recursive search from the roots (a different method than the header's).
inline regions_rt regions_of(const rt_graph& g) {
  const std::size_t n = g.size();
  regions_rt r{std::vector<bool>(n), std::vector<bool>(n), std::vector<bool>(n)};
  std::vector<bool> from_bwd(n);
  auto mark = [&](auto&& self, std::vector<bool>& set, int v) -> void {
    if (set[v]) return;
    set[v] = true;
    for (int c : g[v].children)
      if (c >= 0) self(self, set, c);
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (g[i].forward_root) mark(mark, r.forward, static_cast<int>(i));
    if (g[i].backward_root) mark(mark, from_bwd, static_cast<int>(i));
  }
  for (std::size_t i = 0; i < n; ++i)
    if (from_bwd[i] && g[i].kind == node_kind::input) r.forward[i] = true;
  for (std::size_t i = 0; i < n; ++i) r.backward[i] = from_bwd[i] && !r.forward[i];
  for (std::size_t i = 0; i < n; ++i) {
    if (r.backward[i]) {
      for (int c : g[i].children)
        if (c >= 0 && r.forward[c] && g[c].kind != node_kind::constant) r.needed[c] = true;
    }
    if (r.forward[i] && g[i].backward_root && g[i].kind != node_kind::constant) r.needed[i] = true;
  }
  return r;
}

/// Walks down from the needed nodes, stopping at `saved` and constants. Returns false when the
/// walk meets an unsaved input/reduction/extern_op (the saved set is invalid); fills `recompute`.
inline bool walk(const rt_graph& g, const regions_rt& r, const std::vector<bool>& saved, std::vector<bool>& recompute) {
  const std::size_t n = g.size();
  recompute.assign(n, false);
  std::vector<bool> seen(n);
  std::vector<int> stack;
  for (std::size_t i = 0; i < n; ++i)
    if (r.needed[i]) stack.push_back(static_cast<int>(i));
  bool ok = true;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (seen[v]) continue;
    seen[v] = true;
    const node_kind k = g[v].kind;
    if (saved[v] || k == node_kind::constant) continue;
    if (k == node_kind::input || k == node_kind::reduction || k == node_kind::extern_op) ok = false;
    recompute[v] = true;
    for (int c : g[v].children)
      if (c >= 0) stack.push_back(c);
  }
  return ok;
}

/// The smallest number of saved F nodes that makes the walk valid, by trying every subset of
/// the non-constant F nodes (at most 16 of them).
inline int brute_force_min(const rt_graph& g, const regions_rt& r) {
  std::vector<int> cand;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (r.forward[i] && g[i].kind != node_kind::constant) cand.push_back(static_cast<int>(i));
  REQUIRE(cand.size() <= 16);
  int best = static_cast<int>(cand.size()) + 1;
  std::vector<bool> saved(g.size()), recompute;
  for (std::uint32_t mask = 0; mask < (1u << cand.size()); ++mask) {
    const int size = __builtin_popcount(mask);
    if (size >= best) continue;
    for (std::size_t k = 0; k < cand.size(); ++k) saved[cand[k]] = ((mask >> k) & 1u) != 0;
    if (walk(g, r, saved, recompute)) best = size;
  }
  return best;
}

/// What a saved set costs under the `cost` policy's model: a store (not for inputs) and a load
/// per saved node, each recomputed node's own cost; -1 for an invalid set.
inline long plan_cost(const rt_graph& g, const regions_rt& r, const std::vector<bool>& saved,
                      fusegrad::partition::memory_costs mem) {
  std::vector<bool> recompute;
  if (!walk(g, r, saved, recompute)) return -1;
  long c = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (saved[i]) c += (g[i].kind == node_kind::input ? 0 : mem.store) + mem.load;
    if (recompute[i]) c += g[i].cost;
  }
  return c;
}

/// The least cost of any valid saved set, by trying every subset of the non-constant F nodes.
inline long brute_force_min_cost(const rt_graph& g, const regions_rt& r, fusegrad::partition::memory_costs mem) {
  std::vector<int> cand;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (r.forward[i] && g[i].kind != node_kind::constant) cand.push_back(static_cast<int>(i));
  REQUIRE(cand.size() <= 16);
  long best = -1;
  std::vector<bool> saved(g.size());
  for (std::uint32_t mask = 0; mask < (1u << cand.size()); ++mask) {
    for (std::size_t k = 0; k < cand.size(); ++k) saved[cand[k]] = ((mask >> k) & 1u) != 0;
    const long c = plan_cost(g, r, saved, mem);
    if (c >= 0 && (best < 0 || c < best)) best = c;
  }
  return best;
}

/// Checks the structural invariants of one plan against the independent regions.
inline void check_plan(const rt_graph& g, const regions_rt& r, const rt_plan& p) {
  const std::size_t n = g.size();
  int count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    INFO("node " << i);
    CHECK(p.forward[i] == r.forward[i]);
    CHECK(p.backward[i] == r.backward[i]);
    if (p.saved[i]) {
      CHECK(r.forward[i]);
      CHECK(g[i].kind != node_kind::constant);
      CHECK(g[i].kind != node_kind::grad_input);
      CHECK(p.saved_nodes[static_cast<std::size_t>(count)] == static_cast<int>(i));
      ++count;
    }
  }
  CHECK(p.saved_count == count);
  for (std::size_t k = static_cast<std::size_t>(count); k < n; ++k) CHECK(p.saved_nodes[k] == -1);
  std::vector<bool> recompute;
  CHECK(walk(g, r, p.saved, recompute));  // the plan is valid
  for (std::size_t i = 0; i < n; ++i) {
    INFO("node " << i);
    CHECK(p.recompute[i] == recompute[i]);
    if (p.recompute[i]) {
      CHECK(r.forward[i]);
      CHECK(g[i].kind == node_kind::pointwise);  // never reductions, extern ops, inputs
    }
  }
}

/// All policies on one graph: invariants, save_all = needed, recompute_all only saves
/// inputs/reductions/extern ops, min_cut is minimal, memory_budget picks the right plan.
inline void check_all_policies(const rt_graph& g, const all_plans& ps) {
  const regions_rt r = regions_of(g);
  check_plan(g, r, ps.all);
  check_plan(g, r, ps.cut);
  check_plan(g, r, ps.rec);
  for (std::size_t i = 0; i < g.size(); ++i) {
    CHECK(ps.all.saved[i] == r.needed[i]);
    if (ps.rec.saved[i]) {
      const node_kind k = g[i].kind;
      CHECK((k == node_kind::input || k == node_kind::reduction || k == node_kind::extern_op));
    }
  }
  CHECK(ps.cut.saved_count == brute_force_min(g, r));
  CHECK(ps.cut.saved_count <= ps.all.saved_count);
  CHECK(ps.cut.saved_count <= ps.rec.saved_count);
  for (std::size_t k = 0; k < ps.budgets.size(); ++k) {
    const int b = static_cast<int>(k) - 1;
    INFO("budget " << b);
    const rt_plan& want = ps.all.saved_count <= b ? ps.all : ps.cut.saved_count <= b ? ps.cut : ps.rec;
    CHECK(same_rt_plan(ps.budgets[k], want));
  }
}

template <std::size_t N>
void check_all_policies(const joint_graph<N>& g) {
  check_all_policies(to_rt(g), plans_of(g));
}

}  // namespace
