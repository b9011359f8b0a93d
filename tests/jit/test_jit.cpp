// fg::jit: the run-time tracer (lazy tensors, graph breaks, fullgraph), the guarded kernel
// cache (guards, MRU lookup, automatic dynamic shapes, recompile limit), counters and logs.
// Every jitted result is checked against the eager path in the same test, and gradients in
// double against finite differences (gradcheck).
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_normwise;
using fusegrad_test::max_rel;

namespace {

fg::tensor<double> as_double(const fg::tensor<float>& t) {
  const auto v = t.to_vector();
  return fg::from_vector<double>(std::vector<double>(v.begin(), v.end()), t.shape());
}

/// Calls `f` jitted and eagerly on fresh leaves; compares values and gradients.
template <class T, class F, class... X>
void same_as_eager(F fn, double tol, const X&... xs) {
  auto jf = fg::jit(fn);
  for (int round = 0; round < 3; ++round) {  // the first call compiles, the others hit the cache
    CAPTURE(round);
    std::vector<fg::tensor<T>> a{xs.detach().clone().requires_grad(true)...};
    std::vector<fg::tensor<T>> b{xs.detach().clone().requires_grad(true)...};
    const fg::tensor<T> yj = [&]<std::size_t... I>(std::index_sequence<I...>) { return jf(a[I]...); }
    (std::index_sequence_for<X...>{});
    const fg::tensor<T> ye = [&]<std::size_t... I>(std::index_sequence<I...>) { return fn(b[I]...); }
    (std::index_sequence_for<X...>{});
    REQUIRE(!yj.is_lazy());
    const auto w = fg::randn<T>(ye.shape(), 77);
    fg::sum(yj * w).backward();
    fg::sum(ye * w).backward();
    if constexpr (std::is_same_v<T, float>) {
      CHECK(max_normwise(as_double(ye), as_double(yj)) < tol);
      for (std::size_t i = 0; i < a.size(); ++i)
        CHECK(max_normwise(as_double(b[i].grad()), as_double(a[i].grad())) < tol);
    } else {
      CHECK(max_normwise(ye, yj) < tol);
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(max_normwise(b[i].grad(), a[i].grad()) < tol);
    }
  }
}

auto coscos = [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; };
auto coscos4 = [](auto a, auto b, auto c, auto d) { return fg::cos(fg::cos(a + b + c + d)); };
auto softmax = [](auto x) {
  auto e = fg::exp(x - fg::max(x, -1, true));
  return e / fg::sum(e, -1, true);
};
auto logsumexp = [](auto x) {
  auto m = fg::max(x, -1, true);
  return fg::log(fg::sum(fg::exp(x - m), -1, true)) + m;
};

struct log_capture {
  std::vector<std::string> lines;
  explicit log_capture(const char* spec) {
    fg::logs::set(spec);
    fg::logs::set_sink([this](fg::logs::channel, std::string_view s) { lines.emplace_back(s); });
  }
  ~log_capture() {
    fg::logs::set("");
    fg::logs::set_sink({});
  }
  [[nodiscard]] int count(std::string_view needle) const {
    int n = 0;
    for (const auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
};

}  // namespace

TEST_CASE("jitted composite graphs equal eager, values and gradients (float and double)") {
  const auto x = fg::randn<float>({1000}, 1), y = fg::randn<float>({1000}, 2);
  SUBCASE("cos(cos(x)) * y") {
    same_as_eager<float>(coscos, 1e-5, x, y);
    same_as_eager<double>(coscos, 1e-12, as_double(x), as_double(y));
  }
  SUBCASE("cos(cos(a+b+c+d))") {
    const auto c = fg::randn<float>({1000}, 3), d = fg::randn<float>({1000}, 4);
    same_as_eager<float>(coscos4, 1e-5, x, y, c, d);
  }
  SUBCASE("softmax and log-sum-exp over the last dim (eager steps between loops)") {
    const auto m = fg::randn<float>({16, 33}, 5);
    same_as_eager<float>(softmax, 1e-5, m);
    same_as_eager<float>(logsumexp, 1e-5, m);
    same_as_eager<double>(softmax, 1e-12, as_double(m));
  }
  SUBCASE("full reductions and a 0-d input") {
    same_as_eager<double>(
        [](auto a, auto s) { return fg::sin(a) * s + fg::mean(a * a) - fg::max(a) / fg::sum(fg::exp(a)); }, 1e-12,
        as_double(x), fg::randn<double>({}, 6));
  }
  SUBCASE("a two-layer MLP with linear and tanh (matmul is a graph break)") {
    const auto w1 = fg::randn<float>({8, 5}, 7) * 0.3f, b1 = fg::randn<float>({8}, 8);
    const auto w2 = fg::randn<float>({3, 8}, 9) * 0.3f, b2 = fg::randn<float>({3}, 10);
    auto mlp = [](auto in, auto a1, auto c1, auto a2, auto c2) {
      return fg::linear(fg::tanh(fg::linear(in, a1, c1)), a2, c2);
    };
    fg::reset_counters();
    same_as_eager<float>(mlp, 1e-5, fg::randn<float>({4, 5}, 11), w1, b1, w2, b2);
    CHECK(fg::counters().graph_breaks >= 1);
  }
}

TEST_CASE("jitted functions pass gradcheck in double") {
  const auto x = fg::randn<double>({3, 4}, 12), y = fg::randn<double>({3, 4}, 13);
  CHECK(fg::gradcheck({}, fg::jit(coscos), x, y));
  CHECK(fg::gradcheck({}, fg::jit(softmax), x));
  CHECK(fg::gradcheck({}, fg::jit(logsumexp), x));
  CHECK(fg::gradcheck({}, fg::jit([](auto a, auto b) { return a / (fg::abs(b) + 1.0) - fg::mean(a, 0, true); }), x, y));
}

TEST_CASE("the walk-through program: a data-dependent branch is a graph break") {
  fg::reset_counters();
  auto function = fg::jit([](const std::map<std::string, fg::tensor<float>>& in) {
    auto x = fg::cos(fg::cos(in.at("x")));
    if (fg::mean(x).item() > 0.5f) x = x / 1.1f;
    return x * in.at("y");
  });
  auto eager = [](const fg::tensor<float>& x0, const fg::tensor<float>& y) {
    auto x = fg::cos(fg::cos(x0));
    if (fg::mean(x).item() > 0.5f) x = x / 1.1f;
    return x * y;
  };
  for (int n : {10, 8}) {
    CAPTURE(n);
    for (int it = 0; it < 100; ++it) {
      auto x = fg::randn<float>({n}, static_cast<std::uint64_t>(it)).requires_grad(true);
      auto y = fg::randn<float>({n}, static_cast<std::uint64_t>(500 + it)).requires_grad(true);
      auto out = function({{"x", x}, {"y", y}});
      fg::sum(out).backward();
      auto xe = x.detach().requires_grad(true), ye = y.detach().requires_grad(true);
      auto oe = eager(xe, ye);
      fg::sum(oe).backward();
      REQUIRE(max_rel(as_double(oe), as_double(out)) < 1e-5);
      REQUIRE(max_normwise(as_double(xe.grad()), as_double(x.grad())) < 1e-5);
      REQUIRE(max_normwise(as_double(ye.grad()), as_double(y.grad())) < 1e-5);
    }
  }
  const auto c = fg::counters();
  CHECK(c.graph_breaks == 200);  // one per call, at item()
  CHECK(c.unique_graphs <= 6);   // per graph: static 10, then dynamic; the branch adds one
  CHECK(c.recompiles >= 1);
  CHECK(c.cache_hits >= 390);
}

TEST_CASE("fullgraph: a sync point throws, naming the op") {
  auto f = fg::jit(
      [](const fg::tensor<float>& x) {
        auto y = fg::cos(x);
        if (fg::sum(y).item() > 0) return y * 2.0f;
        return y;
      },
      {.fullgraph = true, .name = "branchy"});
  CHECK_THROWS_WITH_AS(f(fg::randn<float>({5}, 1)), doctest::Contains("fullgraph=true, but item needs"), fg::error);
  // The tensors the failed call left lazy cannot be read, and say why; the next call works.
  auto g = fg::jit([](const fg::tensor<float>& x) { return fg::exp(x) + 1.0f; }, {.fullgraph = true});
  CHECK(max_rel(as_double(g(fg::ones<float>({3}))), as_double(fg::exp(fg::ones<float>({3})) + 1.0f)) < 1e-6);
}

TEST_CASE("automatic dynamic shapes: sizes 10, 8, 8, 6, 12 compile exactly twice") {
  log_capture logs("recompiles");
  auto f = fg::jit(coscos, {.name = "coscos"});
  fg::reset_counters();
  for (fg::index_t n : {10, 8, 8, 6, 12}) {
    auto x = fg::randn<float>({n}, 1).requires_grad(true), y = fg::randn<float>({n}, 2);
    auto out = f(x, y);
    fg::sum(out).backward();
    CHECK(max_rel(as_double(out), as_double(coscos(x.detach(), y))) < 1e-6);
    CHECK(max_rel(as_double(x.grad()), as_double(-fg::sin(fg::cos(x.detach())) * -fg::sin(x.detach()) * y)) < 1e-5);
  }
  CHECK(f.compiles() == 2);
  CHECK(fg::counters().unique_graphs == 2);
  CHECK(fg::counters().recompiles == 1);
  CHECK(fg::counters().cache_hits == 3);
  REQUIRE(logs.lines.size() == 1);
  CHECK(logs.lines[0].find("size of input 'arg0' dim 0 changed from 10 to 8: marking dim 0 dynamic") !=
        std::string::npos);
  const auto es = f.entries();
  REQUIRE(es.size() == 2);
  CHECK(es[0].dynamic);  // most recently used first
  CHECK(es[0].guards.find("size(0) >= 2 (dynamic)") != std::string::npos);
  CHECK(es[1].guards.find("size(0) == 10") != std::string::npos);
  CHECK(es[0].graph.find("cos(%0)") != std::string::npos);
  CHECK(es[0].code.find("loop 0") != std::string::npos);
  // Size 1 stays specialised: a new entry, not a hit of the dynamic one.
  (void)f(fg::randn<float>({1}, 3), fg::randn<float>({1}, 4));
  CHECK(f.compiles() == 3);
}

TEST_CASE("dynamic shapes in 2-d, with broadcasting and row reductions") {
  auto f = fg::jit([](auto x, auto b) { return softmax(x * b) + fg::mean(x, 0, true); });
  for (fg::index_t r : {4, 6, 3}) {
    CAPTURE(r);
    auto x = fg::randn<double>({r, 7}, 1).requires_grad(true), b = fg::randn<double>({7}, 2).requires_grad(true);
    auto xe = x.detach().requires_grad(true), be = b.detach().requires_grad(true);
    auto out = f(x, b);
    auto oe = softmax(xe * be) + fg::mean(xe, 0, true);
    const auto w = fg::randn<double>(oe.shape(), 3);
    fg::sum(out * w).backward();
    fg::sum(oe * w).backward();
    CHECK(max_rel(oe, out) < 1e-12);
    CHECK(max_normwise(xe.grad(), x.grad()) < 1e-12);
    CHECK(max_normwise(be.grad(), b.grad()) < 1e-12);
  }
  CHECK(f.compiles() == 2);
}

TEST_CASE("guards: rank, element type, requires_grad, grad mode and aliasing make new entries") {
  auto f = fg::jit([](auto x, auto y) { return fg::sin(x) * y; });
  auto x = fg::randn<float>({6}, 1), y = fg::randn<float>({6}, 2);
  (void)f(x, y);
  (void)f(x, y);
  CHECK(f.compiles() == 1);
  (void)f(fg::randn<float>({2, 3}, 1), fg::randn<float>({2, 3}, 2));  // rank
  CHECK(f.compiles() == 2);
  (void)f(as_double(x), as_double(y));  // element type
  CHECK(f.compiles() == 3);
  auto xr = x.detach().requires_grad(true);
  auto out = f(xr, y);  // requires_grad
  CHECK(f.compiles() == 4);
  CHECK(out.requires_grad());
  {
    fg::no_grad ng;
    auto o2 = f(xr, y);  // grad mode
    CHECK(!o2.requires_grad());
  }
  CHECK(f.compiles() == 5);
  auto big = fg::randn<float>({12}, 3);
  (void)f(big.slice(0, 0, 6), big.slice(0, 6, 12));  // two views of one storage
  CHECK(f.compiles() == 6);
  (void)f(x, y);
  CHECK(f.compiles() == 6);  // still cached
}

TEST_CASE("recompile limit: past it, misses run eagerly with one log line") {
  log_capture logs("recompiles");
  auto f = fg::jit([](auto x) { return fg::exp(x) * 2.0f; }, {.recompile_limit = 2, .name = "limited"});
  fg::reset_counters();
  for (int r = 1; r <= 5; ++r) {  // ranks 1..5: a new entry each, no dynamic dims can help
    fg::shape s(static_cast<std::size_t>(r), 2);
    auto x = fg::randn<float>(s, 1).requires_grad(true);
    auto out = f(x);
    fg::sum(out).backward();
    CHECK(max_rel(as_double(out), as_double(fg::exp(x.detach()) * 2.0f)) < 1e-6);
    CHECK(max_rel(as_double(x.grad()), as_double(fg::exp(x.detach()) * 2.0f)) < 1e-6);
  }
  CHECK(f.compiles() == 2);
  CHECK(fg::counters().fallbacks == 3);
  CHECK(logs.count("hit the recompile limit (2)") == 1);
}

TEST_CASE("graph breaks: opaque ops, views and item split the graph; values stay right") {
  fg::reset_counters();
  log_capture logs("graph_breaks");
  auto f = fg::jit([](const fg::tensor<double>& x) {
    auto y = fg::exp(x) * 3.0;
    auto t = y.t();  // a view: not traced, so a graph break
    auto z = fg::sum(fg::tanh(t), 0) + fg::max(y).item();
    return z;
  });
  const auto x = fg::randn<double>({3, 4}, 1);
  const auto r = f(x);
  auto ye = fg::exp(x) * 3.0;
  CHECK(max_rel(fg::sum(fg::tanh(ye.t()), 0) + fg::max(ye).item(), r) < 1e-12);
  CHECK(fg::counters().graph_breaks == 2);
  CHECK(logs.count("graph break in 'function'") == 2);
}

TEST_CASE("a compiled function called inside a jitted one is traced into its graph") {
  const auto inner = fg::compile([](auto x, auto y) { return fg::cos(fg::cos(x)) * y; });
  auto f = fg::jit([&](auto x, auto y) { return fg::exp(inner(x, y)) + x; });
  fg::reset_counters();
  auto x = fg::randn<double>({50}, 1).requires_grad(true), y = fg::randn<double>({50}, 2);
  auto out = f(x, y);
  fg::sum(out).backward();
  CHECK(fg::counters().graph_breaks == 0);
  CHECK(fg::counters().unique_graphs == 1);
  auto xe = x.detach().requires_grad(true);
  auto oe = fg::exp(fg::cos(fg::cos(xe)) * y) + xe;
  fg::sum(oe).backward();
  CHECK(max_rel(oe, out) < 1e-12);
  CHECK(max_normwise(xe.grad(), x.grad()) < 1e-12);
  CHECK(fg::gradcheck({}, f, fg::randn<double>({6}, 3), fg::randn<double>({6}, 4)));
}

namespace {
/// Same bits (NaN equal to NaN), element by element.
template <class T>
int differing_bits(const fg::tensor<T>& a, const fg::tensor<T>& b) {
  REQUIRE(a.shape() == b.shape());
  const auto u = a.contiguous().to_vector(), v = b.contiguous().to_vector();
  int n = 0;
  for (std::size_t i = 0; i < u.size(); ++i)
    n += !(std::memcmp(&u[i], &v[i], sizeof(T)) == 0 || (u[i] != u[i] && v[i] != v[i]));
  return n;
}

/// `fn` jitted (first call and a cache hit) against eager: values and gradients bitwise equal.
template <class T, class F>
void rows_bitwise(F fn, const fg::shape& s) {
  CAPTURE(fg::to_string(s));
  auto x = fg::randn<T>(s, 21);
  if (fg::numel(s) > 3) x.data_ptr()[1] = T(1000);  // the stable forms' shift at work
  const auto w = fg::randn<T>(s, 22);
  auto jf = fg::jit(fn);
  auto xe = x.detach().requires_grad(true);
  const auto ye = fn(xe);
  fg::sum(ye * w).backward();
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    auto xj = x.detach().requires_grad(true);
    const auto yj = jf(xj);
    fg::sum(yj * w).backward();
    CHECK(differing_bits(ye, yj) == 0);
    CHECK(differing_bits(xe.grad(), xj.grad()) == 0);
  }
  fg::no_grad ng;
  CHECK(differing_bits(fn(x), jf(x)) == 0);
}
}  // namespace

// The softmax family under fg::jit: the nodes around reductions over the last dim run as one
// row step (each row in L1 across its passes), forward and backward, with eager mode's bits.
TEST_CASE("softmax, log_softmax, logsumexp and a row normalisation run as one row step, bitwise equal to eager") {
  auto sm = [](const auto& a) { return fg::softmax(a, -1); };
  auto lsm = [](const auto& a) { return fg::log_softmax(a, -1); };
  auto lse = [](const auto& a) { return fg::logsumexp(a, -1, true) * a; };
  auto norm = [](const auto& a) {
    auto d = a - fg::mean(a, {-1}, true);
    return d / fg::sqrt(fg::mean(d * d, {-1}, true) + 1e-5);
  };
  for (const fg::shape& s : {fg::shape{4, 5}, fg::shape{3, 300}, fg::shape{2, 3, 17}, fg::shape{33, 1030}}) {
    rows_bitwise<double>(sm, s);
    rows_bitwise<float>(sm, s);
    rows_bitwise<double>(lsm, s);
    rows_bitwise<float>(lsm, s);
    rows_bitwise<double>(lse, s);
    rows_bitwise<float>(norm, s);
  }
  // What the programs are: one row step forward (max, then exp and the sum, then the
  // division) and one backward; no eager step.
  log_capture logs("output_code");
  auto f = fg::jit([](const fg::tensor<double>& a) { return fg::softmax(a, -1); });
  auto x = fg::randn<double>({8, 40}, 23).requires_grad(true);
  fg::sum(f(x) * fg::randn<double>({8, 40}, 24)).backward();
  REQUIRE(logs.lines.size() == 1);
  const std::string& code = logs.lines[0];
  CHECK(code.find("rows of [8, 40] in 3 passes") != std::string::npos);
  CHECK(code.find("eager %") == std::string::npos);
  CHECK(logs.count("rows of") == 1);
  CHECK(code.find("backward") != std::string::npos);
  CHECK(code.substr(code.find("backward")).find("rows of [8, 40]") != std::string::npos);
}

TEST_CASE("row steps under changing shapes: dynamic rows and columns, one column, one row, empty rows") {
  auto fn = [](const fg::tensor<double>& a) { return fg::log_softmax(a, -1) + fg::logsumexp(a, -1, true); };
  auto f = fg::jit(fn);
  for (const fg::shape& s : {fg::shape{4, 5}, fg::shape{6, 5}, fg::shape{6, 7}, fg::shape{9, 300}, fg::shape{1, 5},
                             fg::shape{3, 1}, fg::shape{0, 4}, fg::shape{3, 0}}) {
    CAPTURE(fg::to_string(s));
    const auto x = fg::randn<double>(s, 25), w = fg::randn<double>(s, 26);
    auto xe = x.detach().requires_grad(true), xj = x.detach().requires_grad(true);
    if (s[1] == 0) {  // eager's error, word for word
      std::string want;
      try {
        (void)fn(xe);
      } catch (const fg::error& e) { want = e.what(); }
      REQUIRE(!want.empty());
      CHECK_THROWS_WITH_AS(f(xj), want.c_str(), fg::error);
      continue;
    }
    const auto ye = fn(xe), yj = f(xj);
    fg::sum(ye * w).backward();
    fg::sum(yj * w).backward();
    CHECK(differing_bits(ye, yj) == 0);
    CHECK(differing_bits(xe.grad(), xj.grad()) == 0);
  }
}

TEST_CASE("a jitted loop over several tiles and a partial one equals eager bit for bit") {
  // Forward and backward of a traced function whose loops run over many tiles (the long
  // tiles of loops with many streams: test_ir.cpp, test_compiled_autograd/cache_hits.cpp), with a
  // scalar splatted along them and a full sum: eager's bits.
  const fg::index_t n = 3 * 4096 + 123;
  auto f = [](auto a, auto b) { return fg::sum(fg::cos(a) * b * 0.5f + a * a); };
  auto jf = fg::jit(f);
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    const auto x = fg::randn<float>({n}, 31).requires_grad(true);
    const auto y = fg::randn<float>({n}, 32).requires_grad(true);
    const auto xe = x.detach().requires_grad(true), ye = y.detach().requires_grad(true);
    const auto got = jf(x, y);
    const auto want = f(xe, ye);
    CHECK(got.to_vector() == want.to_vector());
    got.backward();
    want.backward();
    CHECK(x.grad().to_vector() == xe.grad().to_vector());
    CHECK(y.grad().to_vector() == ye.grad().to_vector());
  }
}

// A call traces the element types its tensor arguments hold (a TU that jits only float
// functions compiles no double tracer); work on the other type inside the function runs
// eagerly, op by op, so its values are eager mode's and reading one is no graph break.
TEST_CASE("a call traces its arguments' element types; the other type's work runs eagerly, eager's bits") {
  const auto w = fg::randn<double>({5}, 7);
  auto body = [&](const fg::tensor<float>& x) {
    const double s = fg::sum(fg::exp(w) * 2.0).item();  // double: not traced in a float call
    return fg::tanh(x) * static_cast<float>(s) + x;
  };
  auto f = fg::jit(body);
  fg::reset_counters();
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    auto x = fg::randn<float>({8}, 1).requires_grad(true);
    auto xe = x.detach().requires_grad(true);
    const auto out = f(x), oe = body(xe);
    fg::sum(out).backward();
    fg::sum(oe).backward();
    CHECK(differing_bits(out, oe) == 0);
    CHECK(differing_bits(x.grad(), xe.grad()) == 0);
  }
  CHECK(fg::counters().graph_breaks == 0);
  CHECK(f.compiles() == 1);
  for (const auto& e : f.entries()) CHECK(e.dtype == "float32");

  // A float and a double argument: both traced, so reading the double value is a graph break.
  auto g = fg::jit([](const fg::tensor<float>& x, const fg::tensor<double>& y) {
    return fg::tanh(x) * static_cast<float>(fg::sum(fg::exp(y)).item());
  });
  fg::reset_counters();
  const auto x = fg::randn<float>({8}, 2);
  const auto y = fg::randn<double>({5}, 3);
  CHECK(differing_bits(g(x, y), fg::tanh(x) * static_cast<float>(fg::sum(fg::exp(y)).item())) == 0);
  CHECK(fg::counters().graph_breaks == 1);

  // A double function called inside a float one traces its own type, and the outer call's
  // double ops after it run eagerly again.
  auto inner = fg::jit([](const fg::tensor<double>& v) { return fg::exp(v) * 2.0; });
  auto outer = fg::jit([&](const fg::tensor<float>& v) {
    const auto d = inner(w);
    return v * static_cast<float>(fg::sum(d * d).item());
  });
  const auto v = fg::randn<float>({4}, 4);
  const auto de = fg::exp(w) * 2.0;
  CHECK(differing_bits(outer(v), v * static_cast<float>(fg::sum(de * de).item())) == 0);
  CHECK(inner.compiles() == 1);
}
