// test_compiled_autograd: cache hits that collect their inputs and run the captured graph,
// never a stale one (scalars, hooks, views, saved tensors, sizes), and the recompile limit.
#include <optional>

#include "helpers.hpp"

// ---------------------------------------------------------------------------------------
// Cache hits that collect their inputs and run the captured graph (no rule runs)
// ---------------------------------------------------------------------------------------

namespace {
/// A small tape over fresh leaves: tanh, a scaled product, a broadcast add, a sum.
struct small_tape {
  explicit small_tape(double k = 0.5) {
    x = fg::randn<double>({4, 3}, 21).requires_grad(true);
    w = fg::randn<double>({3}, 22).requires_grad(true);
    h = fg::tanh(x * w) * k + w;
    loss = fg::sum(h * h);
  }
  fg::tensor<double> x, w, h, loss;
};

/// The gradients of a fresh `small_tape(k)` under the eager engine.
std::vector<fg::tensor<double>> eager_grads(double k) {
  small_tape t(k);
  fg::compiled_autograd::disable off;
  t.loss.backward();
  return {t.x.grad(), t.w.grad()};
}
}  // namespace

TEST_CASE("a cache hit runs the captured graph on collected inputs and equals the eager engine") {
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  const auto want = eager_grads(0.5);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    small_tape t;
    fg::compiled_autograd::enable on;
    t.loss.backward();
    CHECK(max_normwise(t.x.grad(), want[0]) < 1e-12);
    CHECK(max_normwise(t.w.grad(), want[1]) < 1e-12);
  }
  const auto c = fg::counters();
  CHECK(c.compiled_autograd_captures == 1);
  CHECK(c.compiled_autograd_hits == 2);
  CHECK(c.compiled_autograd_direct == 2);
  CHECK(c.unique_graphs == 1);
  // Gradients accumulate into existing ones on a hit (the graph adds them), as eagerly.
  small_tape t;
  {
    fg::compiled_autograd::enable on;
    t.loss.backward({.retain_graph = true});
    t.loss.backward({.retain_graph = true});  // leaves hold gradients: added to after the graph
    t.loss.backward({.retain_graph = true});
  }
  CHECK(fg::counters().compiled_autograd_captures == 1);
  CHECK(fg::counters().compiled_autograd_direct == 5);
  CHECK(max_normwise(t.x.grad(), want[0] * 3.0) < 1e-12);
  CHECK(max_normwise(t.w.grad(), want[1] * 3.0) < 1e-12);
}

TEST_CASE("after the recompile limit, a graph that runs eagerly is not traced again on every backward") {
  // Regression: past the 64 compiles compiled autograd allows, every backward of a new graph
  // was traced, found no compiled entry and ran eagerly, each time: 3 to 4 times the eager
  // engine's cost for a 20-layer chain. Now the key remembers; it runs on the eager engine.
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  std::vector<fg::tensor<double>> w;
  for (int i = 0; i < 70; ++i)
    w.push_back(fg::randn<double>({6}, 100 + static_cast<std::uint64_t>(i)).requires_grad(true));
  auto chain = [&](int len, bool compiled) {  // a distinct graph per length
    auto x = fg::randn<double>({6}, 7).requires_grad(true);
    fg::tensor<double> h = x;
    for (int i = 0; i < len; ++i) h = fg::tanh(h * w[static_cast<std::size_t>(i)]);
    backward_with(compiled, fg::sum(h));
    return x.grad().to_vector();
  };
  for (int len = 1; len <= 66; ++len) chain(len, true);  // 64 compiles, then the limit
  const auto at_limit = fg::counters().fallbacks;
  CHECK(at_limit >= 1);
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    const auto want = chain(66, false);
    CHECK(chain(66, true) == want);
  }
  CHECK(fg::counters().fallbacks == at_limit);  // not traced (and not run eagerly by the tracer) again
  CHECK(chain(3, true) == chain(3, false));     // a graph compiled before the limit still runs compiled
  CHECK(fg::counters().compiled_autograd_direct >= 1);
  fg::compiled_autograd::reset();
}

TEST_CASE("a changed scalar in a rule is not a stale constant on a hit") {
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  for (double k : {0.5, 2.0, 0.5, -3.0}) {
    CAPTURE(k);
    const auto want = eager_grads(k);
    small_tape t(k);
    fg::compiled_autograd::enable on;
    t.loss.backward();
    CHECK(max_normwise(t.x.grad(), want[0]) < 1e-12);
    CHECK(max_normwise(t.w.grad(), want[1]) < 1e-12);
  }
  // `* k` is an input of the captured graph (PyTorch's `scalars`), not a constant: one capture.
  CHECK(fg::counters().compiled_autograd_captures == 1);
  CHECK(fg::counters().compiled_autograd_direct == 3);
}

TEST_CASE("scalars: x * s and x / s are graph inputs (bit for bit), x + s is not read, a pow exponent is a guard") {
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  // Gradients of sum(tanh(x * w) * a / b + c + x^p) under `compiled` or the eager engine.
  auto grads = [](double a, double b, double c, double p, bool compiled) {
    auto x = fg::randn<double>({5, 7}, 31).requires_grad(true);
    auto w = fg::randn<double>({7}, 32).requires_grad(true);
    auto loss = fg::sum((fg::tanh(x * w) * a) / b + c + fg::pow(x, p));
    backward_with(compiled, loss);
    return std::pair{x.grad().to_vector(), w.grad().to_vector()};
  };
  const double steps[][4] = {
      {0.5, 3.0, 1.0, 2.0}, {0.25, -7.0, 2.0, 2.0}, {3.0, 0.1, -4.0, 2.0}, {0.5, 3.0, 1.0, 3.0}, {1.5, 2.0, 0.0, 3.0}};
  for (const auto& s : steps) {
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(s[3]);
    const auto want = grads(s[0], s[1], s[2], s[3], false);
    const auto got = grads(s[0], s[1], s[2], s[3], true);
    CHECK(got.first == want.first);  // bit for bit: g * s and g * (0-d s) round alike
    CHECK(got.second == want.second);
  }
  // a, b, c changing: hits; the exponent is specialised (its integer powers are exact
  // multiplications, which a run-time exponent would not give): a new exponent, a capture.
  CHECK(fg::counters().compiled_autograd_captures == 2);
  CHECK(fg::counters().compiled_autograd_direct == 3);
}

TEST_CASE("a saved tensor modified in place between capture and hit is the eager engine's error") {
  ca_off guard;
  fg::compiled_autograd::reset();
  auto step = [](bool compiled, bool modify) {
    auto p = fg::from_vector<float>({1, 2, 3}).requires_grad(true);
    fg::sum(p * 1.0f).backward();  // a gradient for the step
    fg::nn::sgd<float> opt({p}, 0.5f);
    const auto y = fg::sum(fg::cos(p) * p);
    if (modify) opt.step();  // bumps the version of the saved p
    std::string what;
    try {
      backward_with(compiled, y);
    } catch (const fg::error& e) { what = e.what(); }
    return what;
  };
  CHECK(step(true, false).empty());  // the capture
  fg::reset_counters();
  CHECK(step(true, false).empty());  // a direct hit
  CHECK(fg::counters().compiled_autograd_direct == 1);
  const std::string eager = step(false, true);
  CHECK(eager.find("modified in place") != std::string::npos);
  CHECK(step(true, true) == eager);
  // And a second backward through freed saved tensors.
  auto q = fg::randn<float>({3}, 4).requires_grad(true);
  auto l = fg::sum(fg::cos(q) * q);
  fg::compiled_autograd::enable on;
  l.backward();
  CHECK_THROWS_WITH_AS(l.backward(), doctest::Contains("a second time"), fg::error);
}

TEST_CASE("hooks that change between steps are honoured on hits") {
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    const double k = 1.0 + step;
    double seen = 0;
    auto run = [&](bool compiled) {
      small_tape t;
      t.h.register_hook([k](const fg::tensor<double>& g) { return g * k; });  // a new lambda each step
      t.x.register_hook([&seen](const fg::tensor<double>& g) { seen += g.to_vector().front(); });  // a leaf hook
      t.h.retain_grad();
      if (compiled) {
        fg::compiled_autograd::enable on;
        t.loss.backward();
      } else {
        t.loss.backward();
      }
      return std::vector<fg::tensor<double>>{t.x.grad(), t.w.grad(), t.h.grad()};
    };
    const auto want = run(false);
    const double seen_eager = seen;
    seen = 0;
    const auto got = run(true);
    CHECK(seen == seen_eager);
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(max_normwise(got[i], want[i]) < 1e-12);
  }
  CHECK(fg::counters().compiled_autograd_captures == 1);
  CHECK(fg::counters().compiled_autograd_direct == 3);
}

namespace {
struct Square {
  static constexpr const char* name = "SquareBackward";
  template <class X>
  static auto forward(const X& x) {
    return x * x;
  }
  template <class S, class G>
  static auto backward(const S& saved, const G& g) {
    return g * std::get<0>(saved) * 2.0;
  }
};
}  // namespace

TEST_CASE("user functions, matmul and views are collected: a linear training step hits directly") {
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  auto model = [](bool compiled) {
    std::vector<std::vector<double>> out;
    fg::nn::linear<double> lin(10, 10, true, 3);
    fg::nn::sgd<double> opt(lin.parameters(), 0.01);
    for (int step = 0; step < 4; ++step) {
      const auto x = fg::randn<double>({8, 10}, 30 + static_cast<std::uint64_t>(step));
      auto y = fg::function<Square>::apply(lin(x));
      auto loss = fg::mean(y.reshape({-1}).transpose(0, 0));
      for (auto& p : lin.parameters()) p.zero_grad();
      backward_with(compiled, loss);
      for (auto& p : lin.parameters()) out.push_back(p.grad().to_vector());
      opt.step();
    }
    return out;
  };
  const auto want = model(false);
  const auto got = model(true);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    for (std::size_t j = 0; j < want[i].size(); ++j) CHECK(got[i][j] == doctest::Approx(want[i][j]).epsilon(1e-12));
  CHECK(fg::counters().compiled_autograd_captures == 1);
  CHECK(fg::counters().compiled_autograd_direct == 3);
}

TEST_CASE("FUSEGRAD_LOGS=compiled_autograd prints the graph's signature: inputs, sizes, scalars, hooks") {
  ca_off guard;
  fg::compiled_autograd::reset();
  std::vector<std::string> lines;
  fg::logs::set("compiled_autograd");
  fg::logs::set_sink([&](fg::logs::channel, std::string_view s) { lines.emplace_back(s); });
  {
    small_tape t;
    t.h.register_hook([](const fg::tensor<double>& g) { return g * 2.0; });
    fg::compiled_autograd::enable on;
    t.loss.backward();
  }
  fg::logs::set("");
  fg::logs::set_sink({});
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  CHECK(text.find("forward(inputs, sizes, scalars, hooks)") != std::string::npos);
  CHECK(text.find("TanhBackward0") != std::string::npos);
  CHECK(text.find("saved 1: f64[4, 3]") != std::string::npos);
  CHECK(text.find("GraphRoot (NodeCall 0) grad 0: f64[]") != std::string::npos);
  CHECK(text.find("output 0 hook 0") != std::string::npos);
  // small_tape's `* k`: an input of the graph, listed under scalars.
  CHECK(text.find("MulBackward1 (NodeCall 4) scalar: f64[]") != std::string::npos);
  CHECK(text.find("scalars: inputs[") != std::string::npos);
}

TEST_CASE("a view's constants and a size change are never served a stale captured graph") {
  ca_off guard;
  fg::compiled_autograd::reset();
  const auto w = fg::randn<double>({2, 2, 2}, 40);
  // Same node kinds, same shapes, other permutations: the rule's constants are in the key.
  for (const std::vector<fg::index_t>& dims : {std::vector<fg::index_t>{0, 2, 1}, {1, 0, 2}, {0, 2, 1}, {2, 1, 0}}) {
    auto run = [&](bool compiled) {
      auto x = fg::randn<double>({2, 2, 2}, 41).requires_grad(true);
      auto loss = fg::sum(fg::tanh(x.permute(dims)) * w);
      backward_with(compiled, loss);
      return x.grad();
    };
    CHECK(max_normwise(run(true), run(false)) < 1e-12);
  }
  // Same node kinds and shapes, other reduced dims (SumBackward1 over dim 0, then dim 1).
  for (int round = 0; round < 2; ++round)
    for (fg::index_t d : {0, 1}) {
      auto run = [&](bool compiled) {
        auto x = fg::randn<double>({3, 3}, 43).requires_grad(true);
        auto loss = fg::sum(fg::sum(fg::cos(x), d) * fg::randn<double>({3}, 44));
        backward_with(compiled, loss);
        return x.grad();
      };
      CAPTURE(d);
      CHECK(max_normwise(run(true), run(false)) < 1e-12);
    }
  // A sum's backward bakes its input's shape into a call node: sizes 3, 5, 3, 5 alternate.
  for (fg::index_t n : {3, 5, 3, 5}) {
    auto x = fg::randn<double>({n, 2}, 42).requires_grad(true);
    fg::compiled_autograd::enable on;
    fg::sum(fg::exp(x)).backward();
    CHECK(max_normwise(x.grad(), fg::exp(x.detach())) < 1e-12);
  }
}

TEST_CASE("a hit where two nodes saved one tensor at the capture and two tensors now runs correctly") {
  // Saved inputs are the tensors themselves (double backward needs their history), so two
  // nodes that save one constant hand the capture one tensor twice; the graph reads it once.
  // A later tape of the same structure whose nodes save two different constants must not
  // reuse the first for both (a regression of direct hits, which run a plan, under create_graph).
  ca_off guard;
  fg::compiled_autograd::reset();
  auto grad_of = [](bool compiled, const fg::tensor<double>& c1, const fg::tensor<double>& c2) {
    auto x = fg::from_vector<double>({0.3, -0.6, 1.1, 2.0}).requires_grad(true);
    const auto loss = fg::sum(x * c1) + fg::sum(fg::sin(x) * c2);
    backward_with(compiled, loss);
    return x.grad().to_vector();
  };
  const auto c = fg::from_vector<double>({1.5, -2.0, 0.25, 4.0});
  const auto d = fg::from_vector<double>({-3.0, 0.5, 7.0, 1.0});
  CHECK(grad_of(true, c, c) == grad_of(false, c, c));  // the capture: one tensor saved twice
  fg::reset_counters();
  CHECK(grad_of(true, c, c) == grad_of(false, c, c));  // a direct hit
  CHECK(fg::counters().compiled_autograd_direct == 1);
  CHECK(grad_of(true, c, d) == grad_of(false, c, d));  // the same key, two tensors: not that plan
  CHECK(grad_of(true, d, c) == grad_of(false, d, c));
}

TEST_CASE("two ops of one node name and equal scalars are told apart: square and pow(x, 0)") {
  // Both record PowBackward0 with the scalar 0 (square's op has none): a key without the op's
  // type served pow(x, 0) the captured graph of square (found by the opinfo paths tests, tests/opinfo/paths.hpp).
  ca_off guard;
  fg::compiled_autograd::reset();
  for (int round = 0; round < 2; ++round)
    for (int op = 0; op < 2; ++op) {
      auto run = [&](bool compiled) {
        auto x = fg::randn<double>({7}, 50).requires_grad(true);
        auto loss = fg::sum((op == 0 ? fg::square(x) : fg::pow(x, 0)) * fg::randn<double>({7}, 51));
        backward_with(compiled, loss);
        return x.grad();
      };
      CAPTURE(op);
      CHECK(max_normwise(run(true), run(false)) < 1e-12);
    }
}

TEST_CASE("long tiles: a captured chain over three long tiles and a partial one equals the eager engine bit for bit") {
  // The captured backward of an 8-layer chain streams 26 tensors, so where they stream from
  // memory (here: a last-level cache of one byte) its loop walks its space in tiles of up to
  // program::max_tile elements (program::tile_for, tile_of): the whole tiles, the partial last
  // one and the splatted scalar must give eager's bits, on the capture and on hits.
  ca_off guard;
  long_tiles streamed;
  fg::compiled_autograd::reset();
  const fg::index_t n = 3 * fg::detail::jit::program<float>::max_tile + 123;
  const auto x = fg::randn<float>({n}, 21).requires_grad(true);
  std::vector<fg::tensor<float>> w;
  for (int i = 0; i < 8; ++i)
    w.push_back((fg::randn<float>({n}, 22 + static_cast<std::uint64_t>(i)) * 0.5f + 1.0f).detach().requires_grad(true));
  const auto s = fg::full<float>({}, 0.75f).requires_grad(true);
  fg::tensor<float> h = x;
  for (const auto& wi : w) h = fg::tanh(h * wi) * s;
  const fg::tensor<float> loss = fg::sum(h * h);
  std::vector<fg::tensor<float>> leaves{x, s};
  leaves.insert(leaves.end(), w.begin(), w.end());
  auto grads = [&](bool compiled) {
    for (auto& l : leaves) l.zero_grad();
    if (compiled) {
      fg::compiled_autograd::enable on;
      loss.backward({.retain_graph = true});
    } else {
      loss.backward({.retain_graph = true});
    }
    std::vector<std::vector<float>> g;
    for (auto& l : leaves) g.push_back(l.grad().to_vector());
    return g;
  };
  const auto want = grads(false);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const auto got = grads(true);
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i] == want[i]);
    }
  }
  CHECK(fg::counters().compiled_autograd_hits >= 2);
}

TEST_CASE("a hit gives two leaves of one gradient their own buffers and leaves the tape's tensors in place") {
  // x1 and x2 get the same gradient: the captured graph outputs one node twice. A hit takes the
  // graph's outputs and inputs over rather than copying them, and writes the leaves found by
  // the key walk: each leaf must still get a buffer of its own, the saved tensors must stay on
  // the tape for the next backward, and a leaf gone before the backward gets nothing.
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  auto w = fg::randn<double>({5}, 61).requires_grad(true);
  auto run = [&](bool compiled, bool keep_x2) {
    auto x1 = fg::randn<double>({5}, 62).requires_grad(true);
    std::optional<fg::tensor<double>> x2 = fg::randn<double>({5}, 63).requires_grad(true);
    const auto loss = fg::sum(fg::tanh((x1 + *x2) * w));
    if (!keep_x2) x2.reset();  // its AccumulateGrad's leaf is gone
    w.zero_grad();
    std::optional<fg::compiled_autograd::enable> on;
    if (compiled) on.emplace();
    for (int k = 0; k < 3; ++k) loss.backward({.retain_graph = true});  // hits after the first
    return std::vector<fg::tensor<double>>{x1.grad(), x2 ? x2->grad() : fg::tensor<double>{}, w.grad()};
  };
  for (const bool keep_x2 : {true, false}) {
    CAPTURE(keep_x2);
    const auto want = run(false, keep_x2);
    for (int round = 0; round < 2; ++round) {  // the capture, then a fresh tape that hits
      CAPTURE(round);
      const auto got = run(true, keep_x2);
      CHECK(max_normwise(got[0], want[0]) < 1e-12);
      CHECK(max_normwise(got[2], want[2]) < 1e-12);
      if (keep_x2) {
        CHECK(max_normwise(got[1], want[1]) < 1e-12);
        CHECK(got[0].data_ptr() != got[1].data_ptr());
      }
    }
  }
  CHECK(fg::counters().compiled_autograd_captures == 2);  // one per key: x2 alive, x2 gone
  CHECK(fg::counters().compiled_autograd_direct == 10);
}

TEST_CASE("a hit whose graph reads a leaf's gradient so far equals the eager engine") {
  // The key holds the shapes of the saved tensors and root gradients, which passed the
  // captured graph's guards at the capture, so a hit checks the guards only of what the key
  // does not hold: a leaf's gradient so far, which a graph captured while the leaf had one
  // reads (w here; x has none at the capture and gets its later gradients added after).
  ca_off guard;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  auto w = fg::randn<double>({6}, 71).requires_grad(true);
  auto run = [&](bool compiled) {
    auto x = fg::randn<double>({6}, 72).requires_grad(true);
    const auto loss = fg::sum(fg::tanh(x * w));
    w.set_grad(fg::full<double>({6}, 0.25));
    std::optional<fg::compiled_autograd::enable> on;
    if (compiled) on.emplace();
    for (int k = 0; k < 3; ++k) loss.backward({.retain_graph = true});  // hits after the first
    return std::vector<fg::tensor<double>>{x.grad(), w.grad()};
  };
  const auto want = run(false);
  for (int round = 0; round < 2; ++round) {  // the capture, then a fresh tape that hits
    CAPTURE(round);
    const auto got = run(true);
    CHECK(max_normwise(got[0], want[0]) < 1e-12);
    CHECK(max_normwise(got[1], want[1]) < 1e-12);
  }
  CHECK(fg::counters().compiled_autograd_captures == 1);
  CHECK(fg::counters().compiled_autograd_direct == 5);
}

TEST_CASE(
    "a hit of a backward that is one loop gives eager's bits: a splatted root gradient, long tiles, a short call") {
  // The backward of sum(tanh(x * w)) is one element-wise loop whose only scalar is the root
  // gradient (a splat of an input): a hit runs it bound once for the key's sizes
  // (program::bind_single_loop), patching in the tensors' addresses and the splat's value on
  // each call. Its bits must be the general run's, which are eager's: over whole and partial
  // long tiles, at a size below one SIMD batch, and with another root gradient on each call.
  ca_off guard;
  long_tiles streamed;
  fg::compiled_autograd::reset();
  fg::reset_counters();
  for (const fg::index_t n : {3 * fg::detail::jit::program<float>::max_tile + 123, fg::index_t{5}}) {
    CAPTURE(n);
    auto w = (fg::randn<float>({n}, 91) * 0.5f + 1.0f).detach().requires_grad(true);
    auto grads = [&](bool compiled, std::uint64_t seed) {
      const auto x = fg::randn<float>({n}, seed).requires_grad(true);
      const auto loss = fg::sum(fg::tanh(x * w));
      w.zero_grad();
      std::optional<fg::compiled_autograd::enable> on;
      if (compiled) on.emplace();
      loss.backward(fg::full<float>({}, 0.25f * static_cast<float>(seed % 7) - 0.6f));
      return std::pair{x.grad().to_vector(), w.grad().to_vector()};
    };
    for (std::uint64_t seed = 92; seed < 95; ++seed) {  // the capture, then hits on fresh tapes
      CAPTURE(seed);
      const auto want = grads(false, seed);
      const auto got = grads(true, seed);
      CHECK(got.first == want.first);
      CHECK(got.second == want.second);
    }
  }
  CHECK(fg::counters().compiled_autograd_captures == 2);  // one per size
  CHECK(fg::counters().compiled_autograd_direct == 4);
}
