// test_compiled_autograd: what a capture records: random tapes against the eager engine, the
// cache key, graph breaks, hooks, and the backwards of fg::compile and fg::jit functions.
#include "helpers.hpp"

TEST_CASE("compiled autograd equals the eager engine on 1,000 random tapes") {
  ca_off guard;
  fg::reset_counters();
  int compared = 0;
  for (std::uint64_t t = 0; t < 1000; ++t) {
    CAPTURE(t);
    const fg::index_t n = 2 + static_cast<fg::index_t>(t % 4), m = 1 + static_cast<fg::index_t>(t % 3);
    const std::vector<fg::tensor<double>> base{fg::randn<double>({m, n}, 3 * t), fg::randn<double>({n}, 3 * t + 1),
                                               fg::randn<double>({m, n}, 3 * t + 2)};
    auto leaves = [&] {
      std::vector<fg::tensor<double>> l;
      for (const auto& b : base) l.push_back(b.detach().clone().requires_grad(true));
      return l;
    };
    // Every 16 tapes, a fresh cache: the captured graphs stay under the recompile limit, past
    // which they would run eagerly (and no hit could run a graph directly).
    if (t % 16 == 0) fg::compiled_autograd::reset();
    auto eager = leaves();
    random_tape(eager, t).backward();
    // The same tape twice on fresh leaves: a capture (a miss), then a hit on a new tape.
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      auto captured = leaves();
      fg::tensor<double> loss = random_tape(captured, t);
      {
        fg::compiled_autograd::enable on;
        loss.backward();
      }
      for (std::size_t i = 0; i < base.size(); ++i) {
        CAPTURE(i);
        REQUIRE(eager[i].grad().defined() == captured[i].grad().defined());
        if (eager[i].grad().defined()) {
          REQUIRE(max_normwise(eager[i].grad(), captured[i].grad()) < 1e-10);
          ++compared;
        }
      }
    }
  }
  CHECK(compared > 3000);
  const auto c = fg::counters();
  CHECK(c.compiled_autograd_captures + c.compiled_autograd_hits == 2000);
  CHECK(c.compiled_autograd_hits >= 800);  // a traced hook is keyed by its id: a new one misses
  // Most second rounds ran the captured graph on collected inputs, no rule run (the rest hold
  // a traced hook or a jitted function's backward, whose rules must run under the tracer).
  MESSAGE("direct hits: ", c.compiled_autograd_direct, " of ", c.compiled_autograd_hits, " hits");
  CHECK(c.compiled_autograd_direct >= 300);
}

TEST_CASE("the cache key: same structure hits, a new node kind misses, changed sizes go dynamic") {
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  fg::compiled_autograd::enable on;
  auto x = fg::randn<float>({10}, 1).requires_grad(true);
  fg::sum(fg::cos(x) * x).backward();
  fg::sum(fg::cos(x) * x).backward();  // same structure: a hit
  CHECK(fg::counters().compiled_autograd_captures == 1);
  CHECK(fg::counters().compiled_autograd_hits == 1);
  fg::sum(fg::sin(x) * x).backward();  // SinBackward0 instead of CosBackward0: a miss
  CHECK(fg::counters().compiled_autograd_captures == 2);
  // Sizes 10, 100, 10: captured twice (10, then 100 marks the sizes dynamic), compiled twice.
  fg::compiled_autograd::reset();
  fg::reset_counters();
  for (fg::index_t i : {10, 100, 10}) {
    auto y = fg::randn<float>({i, i}, 2).requires_grad(true);
    fg::sum(y).backward();
    CHECK(y.grad().to_vector() == std::vector<float>(static_cast<std::size_t>(i * i), 1.0f));
  }
  CHECK(fg::counters().compiled_autograd_captures == 2);
  CHECK(fg::counters().compiled_autograd_hits == 1);
  CHECK(fg::counters().unique_graphs == 2);
}

TEST_CASE("a jitted forward with graph breaks gives one backward graph; fullgraph backward throws on a break") {
  ca_off guard;
  auto fn = fg::jit([](const fg::tensor<double>& x) {
    auto t = fg::exp(x * 0.5);
    fg::graph_break();
    t = t * x;
    fg::graph_break();
    return fg::sum(t * t);
  });
  auto x = fg::randn<double>({4, 5}, 3).requires_grad(true);
  auto loss = fn(x);
  fg::reset_counters();
  {
    fg::compiled_autograd::enable on(fg::backend::fused{/*fullgraph=*/true});
    loss.backward({.retain_graph = true});
  }
  CHECK(fg::counters().cache_misses + fg::counters().cache_hits == 1);
  auto xe = x.detach().requires_grad(true);
  auto te = fg::exp(xe * 0.5) * xe;
  fg::sum(te * te).backward();
  CHECK(max_normwise(xe.grad(), x.grad()) < 1e-12);
  // matmul's and the views' backwards are opaque call nodes: still one graph, even fullgraph.
  auto w = fg::randn<double>({3, 5}, 4).requires_grad(true);
  auto b = fg::randn<double>({3}, 5).requires_grad(true);
  auto l2 = fg::sum(fg::tanh(fg::linear(x, w, b)).reshape({-1}).transpose(0, 0));
  fg::reset_counters();
  {
    fg::compiled_autograd::enable strict(fg::backend::fused{/*fullgraph=*/true});
    l2.backward({.retain_graph = true});
  }
  CHECK(fg::counters().cache_misses + fg::counters().cache_hits == 1);
  check_matches_eager(l2, {w, b});
  // A traced (generic) hook that reads values breaks the graph, which fullgraph turns into an error.
  auto y = fg::cos(x);
  y.register_hook([](auto g) { return fg::sum(g).item() > 1e300 ? g : g * 2.0; });
  auto l3 = fg::sum(y * y);
  fg::compiled_autograd::enable strict(fg::backend::fused{/*fullgraph=*/true});
  CHECK_THROWS_WITH_AS(l3.backward(), doctest::Contains("fullgraph=true"), fg::error);
}

TEST_CASE("hooks: opaque hooks are call_hook nodes of one captured graph, generic hooks are traced") {
  ca_off guard;
  std::vector<std::string> lines;
  fg::logs::set("compiled_autograd");
  fg::logs::set_sink([&](fg::logs::channel, std::string_view s) { lines.emplace_back(s); });
  auto x = fg::randn<double>({3, 4}, 5).requires_grad(true);
  auto h = fg::exp(x * 0.5);
  double seen = 0;  // a hook that reads the gradient's values and changes nothing
  h.register_hook([&seen](const fg::tensor<double>& g) { seen = g.to_vector().front(); });
  auto t = fg::tanh(h);
  t.register_hook([](const fg::tensor<double>& g) { return g * 3.0; });
  auto u = t * x;
  u.register_hook([](auto g) { return g - 1.0; });
  auto loss = fg::sum(u * u);
  fg::reset_counters();
  {
    fg::compiled_autograd::enable on;
    loss.backward({.retain_graph = true});
  }
  fg::logs::set("");
  fg::logs::set_sink({});
  CHECK(fg::counters().cache_misses + fg::counters().cache_hits == 1);  // the hooks broke nothing
  std::string text;
  for (const auto& l : lines) text += l;
  CHECK(text.find("call_hook(%") != std::string::npos);
  CHECK(text.find("fns[1]") != std::string::npos);
  CHECK(text.find("fns[2]") == std::string::npos);  // the generic hook was traced, not called
  CHECK(text.find("accumulate_grad(%") != std::string::npos);
  const double seen_captured = seen;
  check_matches_eager(loss, {x});  // the eager engine, same hooks
  CHECK(seen == seen_captured);
}

TEST_CASE("a hook that throws under compiled autograd reports its error and leaves the thread usable") {
  ca_off guard;
  auto x = fg::randn<double>({4}, 6).requires_grad(true);
  auto y = fg::cos(x);
  y.register_hook([](const fg::tensor<double>& g) { return fg::sum(g); });  // wrong shape
  fg::compiled_autograd::enable on;
  CHECK_THROWS_WITH_AS(fg::sum(y * y).backward(), doctest::Contains("register_hook"), fg::error);
  auto z = fg::randn<double>({4}, 7).requires_grad(true);
  fg::sum(fg::sin(z)).backward();
  CHECK(max_normwise(z.grad(), fg::cos(z.detach())) < 1e-12);
}

TEST_CASE("the backwards of fg::compile and fg::jit functions are inlined into one graph as aot<N>_ nodes") {
  ca_off guard;
  const auto f = fg::compile([](auto a) { return fg::cos(fg::cos(a)); });
  const auto g = fg::jit([](auto a, auto b) { return fg::tanh(a) * b; });
  auto x = fg::randn<double>({6}, 8).requires_grad(true);
  auto y = fg::randn<double>({6}, 9).requires_grad(true);
  auto loss = fg::sum(g(f(x), y) * x);
  std::vector<std::string> lines;
  fg::logs::set("compiled_autograd");
  fg::logs::set_sink([&](fg::logs::channel, std::string_view s) { lines.emplace_back(s); });
  fg::reset_counters();
  {
    fg::compiled_autograd::enable on;
    loss.backward({.retain_graph = true});
  }
  fg::logs::set("");
  fg::logs::set_sink({});
  CHECK(fg::counters().cache_misses + fg::counters().cache_hits == 1);
  std::string text;
  for (const auto& l : lines) text += l;
  CHECK(text.find("%aot0_") != std::string::npos);
  CHECK(text.find("%aot1_") != std::string::npos);
  check_matches_eager(loss, {x, y});
}
