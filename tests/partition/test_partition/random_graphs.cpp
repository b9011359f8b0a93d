// test_partition: min_cut and the cost policy against brute force on random DAGs.
#include "checker.hpp"

TEST_CASE("partition: min_cut matches brute force on 300 random DAGs") {
  constexpr std::size_t N = 24;
  lcg seeds{20240607};
  int graphs = 0, with_needed = 0, beats_save_all = 0, beats_recompute_all = 0, beats_both = 0;
  for (int t = 0; t < 300; ++t) {
    const bool local = t >= 200;  // 200 dense graphs, then 100 long narrow ones
    const int inputs = 1 + seeds.below(3);
    const int fwd = 1 + seeds.below(13 - inputs + 1);  // inputs + fwd <= 14 forward-section nodes
    const int bwd = 1 + seeds.below(static_cast<int>(N) - inputs - fwd - 1);
    const auto g = random_graph<N>(seeds.next(), inputs, fwd, bwd, local);
    INFO("graph " << t << " inputs " << inputs << " fwd " << fwd << " bwd " << bwd);
    const all_plans ps = plans_of(g);
    check_all_policies(to_rt(g), ps);
    ++graphs;
    if (ps.all.saved_count > 0) ++with_needed;
    const bool below_all = ps.cut.saved_count < ps.all.saved_count;
    const bool below_rec = ps.cut.saved_count < ps.rec.saved_count;
    beats_save_all += below_all ? 1 : 0;
    beats_recompute_all += below_rec ? 1 : 0;
    beats_both += below_all && below_rec ? 1 : 0;
  }
  CHECK(graphs == 300);
  // The generator must exercise the interesting cases, not only trivial graphs.
  CHECK(with_needed > 150);
  CHECK(beats_save_all > 100);
  CHECK(beats_recompute_all > 20);
  CHECK(beats_both >= 3);
  MESSAGE("random graphs: " << with_needed << " need saved values; min_cut saves strictly less "
                            << "than save_all on " << beats_save_all << ", than recompute_all on "
                            << beats_recompute_all << ", than both on " << beats_both);
}

TEST_CASE("partition: the cost policy is the least-cost plan (brute force on 300 random DAGs with random costs)") {
  constexpr std::size_t N = 24;
  lcg seeds{20261125};
  int differs_from_min_cut = 0, recomputes_less = 0;
  for (int t = 0; t < 300; ++t) {
    const bool local = t >= 200;
    const int inputs = 1 + seeds.below(3);
    const int fwd = 1 + seeds.below(13 - inputs + 1);
    const int bwd = 1 + seeds.below(static_cast<int>(N) - inputs - fwd - 1);
    auto g = random_graph<N>(seeds.next(), inputs, fwd, bwd, local);
    for (auto& n : g.nodes)
      if (n.kind == node_kind::pointwise) n.cost = seeds.below(4) == 0 ? 1 : seeds.below(48);
    const fusegrad::partition::memory_costs mem{1 + seeds.below(24), seeds.below(24)};
    INFO("graph " << t << " load " << mem.load << " store " << mem.store);
    const rt_graph rg = to_rt(g);
    const regions_rt r = regions_of(rg);
    const rt_plan p = to_rt(make_plan(g, policy{policy_kind::cost, 0, mem}));
    check_plan(rg, r, p);
    CHECK(plan_cost(rg, r, p.saved, mem) == brute_force_min_cost(rg, r, mem));
    // With uniform costs it is min_cut, plan for plan.
    auto u = g;
    for (auto& n : u.nodes) n.cost = 0;
    CHECK(same_plan(make_plan(u, uniform), make_plan(u, min_cut)));
    const rt_plan cut = to_rt(make_plan(g, min_cut));
    differs_from_min_cut += !same_rt_plan(cut, p);
    recomputes_less += plan_cost(rg, r, p.saved, mem) < plan_cost(rg, r, cut.saved, mem);
  }
  CHECK(differs_from_min_cut > 50);  // the generator exercises the costs
  MESSAGE("cost policy: differs from min_cut on " << differs_from_min_cut << " graphs, cheaper on " << recomputes_less);
}
