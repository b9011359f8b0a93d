// fg::jit with trace_once: the function runs once per signature, later calls replay the cached
// programs without calling it; values and gradients equal the default mode's and eager's bit
// for bit; a new signature retraces; what a replay could not redo is refused at trace time.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

namespace {

template <class T>
bool same_bits(const fg::tensor<T>& a, const fg::tensor<T>& b) {
  return a.shape() == b.shape() && a.to_vector() == b.to_vector();
}

/// `cos(cos(x)) * y + sum(x)`, counting its calls.
struct counted {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  template <class X>
  X operator()(const X& x, const X& y) const {
    ++*calls;
    return fg::cos(fg::cos(x)) * y + fg::sum(x);
  }
};

template <class T>
void values_and_grads_equal_default_and_eager() {
  counted fn;
  auto once = fg::jit(fn, {.trace_once = true});
  auto every = fg::jit(fn);
  const auto x0 = fg::randn<T>({300}, 1), y0 = fg::randn<T>({300}, 2), w = fg::randn<T>({300}, 3);
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    auto xo = x0.detach().clone().requires_grad(true), yo = y0.detach().clone().requires_grad(true);
    auto xd = x0.detach().clone().requires_grad(true), yd = y0.detach().clone().requires_grad(true);
    auto xe = x0.detach().clone().requires_grad(true), ye = y0.detach().clone().requires_grad(true);
    const int before = *fn.calls;
    const fg::tensor<T> o = once(xo, yo);
    CHECK(*fn.calls == before + (round == 0 ? 1 : 0));  // a hit does not call the function
    const fg::tensor<T> d = every(xd, yd);
    const fg::tensor<T> e = fn(xe, ye);
    REQUIRE(!o.is_lazy());
    CHECK(o.requires_grad());
    CHECK(same_bits(o, d));
    CHECK(same_bits(o, e));
    fg::sum(o * w).backward();
    fg::sum(d * w).backward();
    fg::sum(e * w).backward();
    CHECK(same_bits(xo.grad(), xd.grad()));
    CHECK(same_bits(yo.grad(), yd.grad()));
    CHECK(same_bits(xo.grad(), xe.grad()));
    CHECK(same_bits(yo.grad(), ye.grad()));
  }
}

}  // namespace

TEST_CASE("trace_once: a hit replays without calling the function; values and gradients equal default jit and eager") {
  SUBCASE("float") { values_and_grads_equal_default_and_eager<float>(); }
  SUBCASE("double") { values_and_grads_equal_default_and_eager<double>(); }
}

TEST_CASE("trace_once: a new signature retraces (sizes, requires_grad, grad mode, dtype, aliasing, numbers)") {
  counted fn;
  auto f = fg::jit(fn, {.trace_once = true});
  const auto x = fg::randn<float>({8}, 1), y = fg::randn<float>({8}, 2);
  auto calls_for = [&](auto&&... args) {
    const int before = *fn.calls;
    (void)f(args...);
    return *fn.calls - before;
  };
  CHECK(calls_for(x, y) == 1);
  CHECK(calls_for(x, y) == 0);
  CHECK(calls_for(fg::randn<float>({8}, 5), fg::randn<float>({8}, 6)) == 0);  // other tensors, same signature
  CHECK(calls_for(fg::randn<float>({9}, 1), fg::randn<float>({9}, 2)) == 1);  // sizes
  CHECK(calls_for(x.detach().requires_grad(true), y) == 1);                   // requires_grad
  CHECK(calls_for(x.detach().requires_grad(true), y) == 0);
  {
    fg::no_grad ng;
    CHECK(calls_for(x.detach().requires_grad(true), y) == 1);  // grad mode
  }
  CHECK(calls_for(fg::randn<double>({8}, 1), fg::randn<double>({8}, 2)) == 1);  // element type
  CHECK(calls_for(x, x) == 1);                                                  // the same tensor twice
  CHECK(calls_for(x, x.detach()) == 1);                                         // two tensors sharing storage
  CHECK(calls_for(x, x) == 0);
  // The same tensor twice is bound as one: a replay with two tensors of one storage is a
  // different signature, and its values are those of the two tensors.
  const auto a = fg::randn<float>({8}, 7);
  const auto b = a.detach();
  CHECK(same_bits(f(x, x), fn(x, x)));
  CHECK(same_bits(f(a, b), fn(a, b)));

  int scale_calls = 0;
  auto g = fg::jit(
      [&](const fg::tensor<float>& t, float s) {
        ++scale_calls;
        return t * s;
      },
      {.trace_once = true});
  CHECK(same_bits(g(x, 2.0f), x * 2.0f));
  CHECK(same_bits(g(x, 3.0f), x * 3.0f));  // a number argument is part of the signature
  CHECK(same_bits(g(x, 2.0f), x * 2.0f));
  CHECK(scale_calls == 2);
}

TEST_CASE("trace_once: what a replay could not redo is refused while tracing, naming the op") {
  const auto x = fg::randn<float>({6}, 1), y = fg::randn<float>({6}, 2);
  SUBCASE("item (a graph break)") {
    auto f = fg::jit([](const fg::tensor<float>& a) { return fg::sum(a * a).item() > 0 ? a * 2.0f : a * 3.0f; },
                     {.trace_once = true});
    CHECK_THROWS_WITH_AS(f(x), doctest::Contains("item: 'function' is jitted with trace_once=true, but item needs"),
                         fg::error);
  }
  SUBCASE("to_vector and graph_break()") {
    auto f = fg::jit(
        [](const fg::tensor<float>& a) {
          auto b = a * 2.0f;
          (void)b.to_vector();
          return b;
        },
        {.name = "reads", .trace_once = true});
    CHECK_THROWS_WITH_AS(f(x), doctest::Contains("'reads' is jitted with trace_once=true, but to_vector needs"),
                         fg::error);
    auto g = fg::jit(
        [](const fg::tensor<float>& a) {
          auto b = a * 2.0f;
          fg::graph_break();
          return b + 1.0f;
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(g(x), doctest::Contains("but graph_break() needs"), fg::error);
  }
  SUBCASE("an untraced op on a traced tensor") {
    auto f = fg::jit([](const fg::tensor<float>& a) { return (a * 2.0f).reshape({2, 3}); }, {.trace_once = true});
    CHECK_THROWS_WITH_AS(f(x), doctest::Contains("but an op the tracer does not capture needs"), fg::error);
  }
  SUBCASE("an untraced op on an argument") {
    auto f = fg::jit([](const fg::tensor<float>& a) { return a.reshape({2, 3}) * 2.0f; }, {.trace_once = true});
    CHECK_THROWS_WITH_AS(
        f(x.detach().requires_grad(true)),
        doctest::Contains("mul: 'function' (jitted with trace_once=true) reads a tensor of shape [2, 3] "
                          "that is not one of its arguments (computed by "),
        fg::error);
  }
  SUBCASE("work on the other element type") {
    const auto w = fg::randn<double>({3}, 3);
    auto f = fg::jit(
        [&w](const fg::tensor<float>& a) {
          auto d = fg::exp(w);  // double work inside a float function: not in the float graph
          (void)d;
          return a * 2.0f;
        },
        {.name = "mixed", .trace_once = true});
    CHECK_THROWS_WITH_AS(f(x),
                         doctest::Contains("a pointwise op: 'mixed' (jitted with trace_once=true) computes on "
                                           "float64 tensors, but its tensor arguments are float32"),
                         fg::error);
    auto g = fg::jit(
        [&w](const fg::tensor<float>& a) {
          (void)fg::sum(w);
          return a * 2.0f;
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(g(x), doctest::Contains("sum: 'function' (jitted with trace_once=true) computes on float64"),
                         fg::error);
    // What it did not trace before the refusal is no record: the next call traces again.
    CHECK_THROWS_AS(g(x), fg::error);
    CHECK(fg::detail::active_recorder<double>() == nullptr);
  }
  SUBCASE("a hook registered inside the function") {
    auto f = fg::jit(
        [](const fg::tensor<float>& a) {
          auto b = a * 2.0f;
          b.register_hook([](const fg::tensor<float>& g) { return g; });
          return b;
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(f(x.detach().requires_grad(true)), doctest::Contains("register_hook: a tensor hook"),
                         fg::error);
    auto r = fg::jit(
        [](const fg::tensor<float>& a) {
          auto b = a * 2.0f;
          b.retain_grad();
          return b + 1.0f;
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(r(x.detach().requires_grad(true)), doctest::Contains("(register_hook or retain_grad)"),
                         fg::error);
  }
  SUBCASE("a hook put on an argument, or taken off it, inside the function") {
    // The argument is no traced tensor, but a replay would leave it without the hook (found
    // by the fuzzer: the argument returned with a hook that scales its gradient).
    auto f = fg::jit(
        [](fg::tensor<float> a) {
          a.register_hook([](const fg::tensor<float>& g) { return g * 10.0f; });
          return a;
        },
        {.trace_once = true});
    auto a = x.detach().requires_grad(true);
    CHECK_THROWS_WITH_AS(f(a), doctest::Contains("register_hook: a tensor hook"), fg::error);
    CHECK_THROWS_WITH_AS(f(a), doctest::Contains("register_hook: a tensor hook"), fg::error);  // still no record
    fg::sum(a).backward();
    CHECK(a.grad().to_vector() == std::vector<float>(6, 1.0f));  // the refused hook was not installed
    auto b = x.detach().requires_grad(true);
    const std::uint64_t id = b.register_hook([](const fg::tensor<float>& g) { return g * 10.0f; });
    auto g = fg::jit(
        [id](fg::tensor<float> t) {
          t.remove_hook(id);
          return t * 2.0f;
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(g(b), doctest::Contains("remove_hook: a tensor hook removed inside"), fg::error);
    fg::sum(b).backward();
    CHECK(b.grad().to_vector() == std::vector<float>(6, 10.0f));  // still there
    // retain_grad on an argument computed outside (not a leaf): refused, and it is not left
    // marked as retaining.
    auto c = x.detach().requires_grad(true);
    auto d = c * 3.0f;
    auto keep = fg::jit(
        [](fg::tensor<float> t) {
          t.retain_grad();
          return t * 2.0f;
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(keep(d), doctest::Contains("(register_hook or retain_grad)"), fg::error);
    fg::sum(d * 2.0f).backward();
    CHECK_FALSE(d.grad().defined());
  }
  SUBCASE("reading an argument's values in C++") {
    // Found by the fuzzer: `a * a.item()` replayed the first call's number for new values.
    auto f = fg::jit([](const fg::tensor<float>& a) { return a * a.item(); }, {.trace_once = true});
    const auto one = fg::randn<float>({}, 5);
    CHECK_THROWS_WITH_AS(
        f(one), doctest::Contains("item: 'function' (jitted with trace_once=true) reads the values of argument 0"),
        fg::error);
    auto g = fg::jit([](const fg::tensor<float>& a, const fg::tensor<float>& b) { return b * a.to_vector()[0]; },
                     {.trace_once = true});
    CHECK_THROWS_WITH_AS(
        g(x, y),
        doctest::Contains("to_vector: 'function' (jitted with trace_once=true) reads the values of argument 0"),
        fg::error);
    auto h = fg::jit([](const fg::tensor<float>& a) { return a * a.reshape({2, 3}).at({1, 2}); }, {.trace_once = true});
    CHECK_THROWS_WITH_AS(h(x), doctest::Contains("reads the values of argument 0 (through a view of it)"), fg::error);
    // A tensor of the function's own (not an argument) is a constant of the trace, read freely.
    auto k =
        fg::jit([](const fg::tensor<float>& a) { return a * fg::full<float>({}, 2.0f).item(); }, {.trace_once = true});
    CHECK(k(x).to_vector() == (x * 2.0f).to_vector());
    CHECK(k(y).to_vector() == (y * 2.0f).to_vector());  // replayed
  }
  SUBCASE("a random op inside the function") {
    auto f =
        fg::jit([](const fg::tensor<float>& a) { return a * fg::randn<float>(a.shape(), 3); }, {.trace_once = true});
    CHECK_THROWS_WITH_AS(f(x),
                         doctest::Contains("mul: 'function' (jitted with trace_once=true) reads a tensor of shape [6]"),
                         fg::error);
    CHECK_THROWS_WITH_AS(f(x), doctest::Contains("random op (randn"), fg::error);
  }
  SUBCASE("a tensor captured from outside") {
    auto f = fg::jit([&y](const fg::tensor<float>& a) { return fg::exp(a) + y; }, {.trace_once = true});
    CHECK_THROWS_WITH_AS(f(x), doctest::Contains("add: 'function' (jitted with trace_once=true) reads a tensor"),
                         fg::error);
  }
  SUBCASE("grad mode changed inside the function") {
    auto f = fg::jit(
        [](const fg::tensor<float>& a) {
          auto b = a * 2.0f;
          fg::no_grad ng;
          return b + 1.0f;
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(f(x), doctest::Contains("no_grad: grad mode changed inside 'function'"), fg::error);
  }
  SUBCASE("a result the trace did not compute, and a traced tensor kept outside the result") {
    auto f = fg::jit(
        [](const fg::tensor<float>& a) {
          return std::pair{a * 2.0f, fg::zeros<float>({3})};
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(
        f(x),
        doctest::Contains("tensor 1 of the result of 'function' (jitted with trace_once=true), of shape [3], "
                          "was neither computed by the trace nor passed as an argument"),
        fg::error);
    std::vector<fg::tensor<float>> kept;
    auto g = fg::jit(
        [&kept](const fg::tensor<float>& a) {
          kept.push_back(fg::exp(a));
          return a * 2.0f;
        },
        {.trace_once = true});
    CHECK_THROWS_WITH_AS(
        g(x), doctest::Contains("kept a tensor of shape [6] that its trace computed alive outside its result"),
        fg::error);
  }
  SUBCASE("an argument trace_once cannot put in a signature") {
    auto f = fg::jit([](const fg::tensor<float>& a, const std::string&) { return a * 2.0f; }, {.trace_once = true});
    CHECK_THROWS_WITH_AS(f(x, std::string("s")), doctest::Contains("jitted with trace_once=true, which takes tensors"),
                         fg::error);
  }
  SUBCASE("after a refusal the function still works without the refused code") {
    bool read = true;
    auto f = fg::jit(
        [&read](const fg::tensor<float>& a) {
          auto b = a * 2.0f;
          if (read) (void)b.item();
          return b;
        },
        {.trace_once = true});
    CHECK_THROWS_AS(f(fg::ones<float>({})), fg::error);
    read = false;
    CHECK(same_bits(f(x), x * 2.0f));
  }
}

TEST_CASE("trace_once: an argument returned unchanged, and containers of results") {
  int calls = 0;
  auto f = fg::jit(
      [&calls](const std::map<std::string, fg::tensor<double>>& in) {
        ++calls;
        const auto& a = in.at("a");
        const auto& b = in.at("b");
        return std::tuple{std::vector<fg::tensor<double>>{a * b, fg::exp(a)}, a,
                          std::map<std::string, fg::tensor<double>>{{"s", a + b}}};
      },
      {.trace_once = true});
  const auto a = fg::randn<double>({5}, 1), b = fg::randn<double>({5}, 2);
  for (int round = 0; round < 3; ++round) {
    auto [v, same, m] = f({{"a", a}, {"b", b}});
    REQUIRE(v.size() == 2);
    CHECK(same_bits(v[0], a * b));
    CHECK(same_bits(v[1], fg::exp(a)));
    CHECK(same.is_same(a));  // the argument itself, as the default mode returns it
    CHECK(same_bits(m.at("s"), a + b));
  }
  CHECK(calls == 1);
  (void)f({{"a", a}, {"b", b}, {"c", b}});  // other keys: another signature
  CHECK(calls == 2);
}

TEST_CASE("trace_once: dynamic shapes retrace per size but compile a shape-generic program once") {
  counted fn;
  auto f = fg::jit(fn, {.trace_once = true});
  for (fg::index_t n : {10, 8, 6, 12, 8, 10}) {
    CAPTURE(n);
    const auto x = fg::randn<double>({n}, 1).requires_grad(true), y = fg::randn<double>({n}, 2);
    const auto xe = x.detach().requires_grad(true);
    const auto o = f(x, y);
    const auto e = fn(xe, y);
    CHECK(same_bits(o, e));
    fg::sum(o).backward();
    fg::sum(e).backward();
    CHECK(same_bits(x.grad(), xe.grad()));
  }
  CHECK(*fn.calls == 4 + 6);  // 4 sizes traced, plus the 6 eager calls above
  CHECK(f.compiles() == 2);   // 10, then one shape-generic entry for the others
}

TEST_CASE(
    "trace_once: past the recompile limit a signature's graph runs eagerly and the function is called each time") {
  counted fn;
  auto f = fg::jit(fn, {.recompile_limit = 1, .trace_once = true});
  fg::reset_counters();
  const auto x = fg::randn<float>({4, 3}, 1), y = fg::randn<float>({4, 3}, 2);
  const auto u = fg::randn<float>({3, 4, 3}, 3), v = fg::randn<float>({3, 4, 3}, 4);  // a new rank: a miss
  CHECK(same_bits(f(x, y), fn(x, y)));
  CHECK(same_bits(f(u, v), fn(u, v)));
  CHECK(same_bits(f(u, v), fn(u, v)));
  CHECK(*fn.calls == 2 + 2 + 2);  // each line: the jitted call, then the eager reference
  CHECK(fg::counters().fallbacks == 2);
  CHECK(f.compiles() == 1);
}

TEST_CASE("trace_once: captured numbers are constants of the trace") {
  float scale = 2.0f;
  auto f = fg::jit([&scale](const fg::tensor<float>& x) { return x * scale; }, {.trace_once = true});
  auto every = fg::jit([&scale](const fg::tensor<float>& x) { return x * scale; });
  const auto x = fg::randn<float>({7}, 1);
  CHECK(same_bits(f(x), x * 2.0f));
  scale = 3.0f;
  CHECK(same_bits(f(x), x * 2.0f));      // replayed: the trace's 2
  CHECK(same_bits(every(x), x * 3.0f));  // the default mode runs the function each call
  CHECK(same_bits(f(fg::randn<float>({2}, 2)), fg::randn<float>({2}, 2) * 3.0f));  // a new signature traces anew
}

TEST_CASE("trace_once: two threads calling at once") {
  counted fn;
  auto f = fg::jit(fn, {.trace_once = true});
  const auto x = fg::randn<float>({64}, 1), y = fg::randn<float>({64}, 2);
  const auto want = fn(x, y);
  std::atomic<int> wrong{0};
  auto work = [&] {
    for (int i = 0; i < 200; ++i) {
      fg::tensor<float> xi = x.detach().requires_grad(true);
      const auto o = f(xi, y);
      fg::sum(o).backward();
      if (!same_bits(o, want) || !xi.grad().defined()) ++wrong;
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  CHECK(wrong == 0);
  CHECK(*fn.calls <= 1 + 2);  // the eager reference, then one trace per thread at most
}

TEST_CASE("trace_once: a hit reuses the thread's buffers, never a result, and checks every part of the signature") {
  // A replay's signature, inputs and results live in buffers the thread keeps between calls:
  // results of earlier replays keep their values, and each part of the signature still tells
  // calls apart (its parts are one array: sizes that would run together into another split).
  int calls = 0;
  auto body = [&](const std::vector<fg::tensor<float>>& v, const fg::tensor<float>& z) {
    ++calls;
    fg::tensor<float> r = z * 2.0f;
    for (const auto& t : v) r = r + fg::sum(t);
    return r;
  };
  auto f = fg::jit(body, {.recompile_limit = 64, .trace_once = true});  // every signature compiled
  const auto z = fg::randn<float>({3}, 1);
  const auto a23 = fg::randn<float>({2, 3}, 2), a32 = fg::randn<float>({3, 2}, 3), a6 = fg::randn<float>({6}, 4);
  auto check = [&](const std::vector<fg::tensor<float>>& v, const fg::tensor<float>& zz, int traced) {
    const int before = calls;
    const fg::tensor<float> r = f(v, zz);
    CHECK(calls - before == traced);
    const int after = calls;
    CHECK(same_bits(r, body(v, zz)));
    calls = after;
    return r;
  };
  check({a23}, z, 1);
  check({a23}, z, 0);
  check({a32}, z, 1);  // the sizes of a rank's dims, swapped
  check({a6}, z, 1);   // the same elements in another rank
  check({a6, a6}, z, 1);
  check({a6, a6.detach()}, z, 1);  // the same tensor, then another of one storage
  check({a6, fg::randn<float>({6}, 5)}, z, 1);
  check({a6}, z.detach().requires_grad(true), 1);
  {
    fg::no_grad ng;
    check({a6}, z.detach().requires_grad(true), 1);
  }
  check({fg::randn<float>({1, 6}, 6)}, z, 1);  // a dim of size 1 added
  // Results of earlier replays keep their values while later replays run.
  const fg::tensor<float> r1 = check({a23}, z, 0);
  const fg::tensor<float> r2 = check({fg::randn<float>({2, 3}, 7)}, fg::randn<float>({3}, 8), 0);
  CHECK(same_bits(r1, body({a23}, z)));
  CHECK(r1.data_ptr() != r2.data_ptr());

  // x * y + z replayed in a loop (the benchmark's case), each result against eager's, the
  // earlier ones kept alive.
  auto xyz = fg::jit(
      [](const fg::tensor<float>& x, const fg::tensor<float>& y, const fg::tensor<float>& w) { return x * y + w; },
      {.trace_once = true});
  std::vector<fg::tensor<float>> outs, ins;
  for (int i = 0; i < 6; ++i) {
    ins.push_back(fg::randn<float>({1024}, 10 + i));
    outs.push_back(xyz(ins[static_cast<std::size_t>(i)], ins[0], ins[static_cast<std::size_t>(i / 2)]));
  }
  for (std::size_t i = 0; i < outs.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(outs[i], ins[i] * ins[0] + ins[i / 2]));
  }
  // A replay called from a default-mode jitted function, twice in one graph.
  auto outer = fg::jit([&](const fg::tensor<float>& x) { return xyz(x, x, x) + xyz(x * 2.0f, x, x); });
  const auto x = fg::randn<float>({1024}, 30);
  CHECK(same_bits(outer(x), (x * x + x) + ((x * 2.0f) * x + x)));
  CHECK(same_bits(outer(x), (x * x + x) + ((x * 2.0f) * x + x)));
  // Called with three values the outer trace has not computed yet, as its arguments in order,
  // and returning the loop's one output: the replay runs the loop straight into the result.
  auto outer3 = fg::jit([&](const fg::tensor<float>& u) { return xyz(u * 2.0f, u + 1.0f, u * 3.0f) * u; });
  for (int round = 0; round < 3; ++round) CHECK(same_bits(outer3(x), ((x * 2.0f) * (x + 1.0f) + x * 3.0f) * x));
  {
    fg::no_grad ng;
    CHECK(same_bits(outer3(x), ((x * 2.0f) * (x + 1.0f) + x * 3.0f) * x));
  }
}

TEST_CASE("trace_once: a call whose signature extends or cuts short the last replay's is told apart from it") {
  // A hit compares the call with the thread's last record as its words come, without writing
  // them first: each call below follows one whose signature is a prefix of its own, or the
  // other way round (an undefined tensor against a defined one, a rank added or dropped, a
  // tensor more or fewer), and must trace or replay its own.
  int calls = 0;
  auto body = [&](const fg::tensor<float>& w, const std::vector<fg::tensor<float>>& v, const fg::tensor<float>& z) {
    ++calls;
    fg::tensor<float> r = w * 2.0f;
    for (const auto& t : v) r = r + fg::sum(t);
    return z.defined() ? r * fg::sum(z) : r;
  };
  auto f = fg::jit(body, {.recompile_limit = 64, .trace_once = true});
  const auto a3 = fg::randn<float>({3}, 1), a13 = fg::randn<float>({1, 3}, 2), a31 = fg::randn<float>({3, 1}, 3);
  const auto z = fg::randn<float>({2}, 4);
  const fg::tensor<float> none;
  struct call {
    std::vector<fg::tensor<float>> v;
    fg::tensor<float> z;
  };
  const std::vector<call> sigs = {{{a3}, none},  {{a3}, z}, {{a13}, z},       {{a31}, z},
                                  {{a3, a3}, z}, {{}, z},   {{a3, a13}, none}};
  const auto w = fg::randn<float>({1}, 5);
  auto run = [&](const call& c) {
    const int before = calls;
    const fg::tensor<float> r = f(w, c.v, c.z);
    const int traced = calls - before;
    CHECK(same_bits(r, body(w, c.v, c.z)));
    return traced;
  };
  for (const call& c : sigs) CHECK(run(c) == 1);  // each a new signature
  // Every ordered pair in turn: the second of each is a hit, whatever the thread replayed last.
  for (std::size_t i = 0; i < sigs.size(); ++i)
    for (std::size_t j = 0; j < sigs.size(); ++j) {
      CAPTURE(i);
      CAPTURE(j);
      CHECK(run(sigs[i]) == 0);
      CHECK(run(sigs[j]) == 0);
    }
}

TEST_CASE("trace_once: a hit on a view of the traced sizes, a long signature, and arguments the function moves from") {
  // The signature holds sizes, not strides: a strided view of the traced sizes hits, and the
  // replay reads it as a view (its program's loops read it made contiguous).
  int xyz_calls = 0;
  auto xyz = fg::jit(
      [&xyz_calls](const fg::tensor<float>& x, const fg::tensor<float>& y, const fg::tensor<float>& w) {
        ++xyz_calls;
        return x * y + w;
      },
      {.trace_once = true});
  const auto x = fg::randn<float>({2, 3}, 1), y = fg::randn<float>({2, 3}, 2), w = fg::randn<float>({2, 3}, 4);
  const auto t = fg::randn<float>({3, 2}, 3).transpose(0, 1);  // sizes {2, 3}, not contiguous
  REQUIRE(!t.is_contiguous());
  CHECK(same_bits(xyz(x, y, w), x * y + w));
  CHECK(same_bits(xyz(t, y, w), t * y + w));
  CHECK(same_bits(xyz(x, y, t), x * y + t));
  CHECK(xyz_calls == 1);  // the views hit

  // A signature longer than the buffer a call keeps on its stack: each part still tells calls
  // apart, the last tensor's sizes included.
  int calls = 0;
  auto total = fg::jit(
      [&calls](const std::vector<fg::tensor<double>>& v) {
        ++calls;
        fg::tensor<double> r = v[0];
        for (std::size_t i = 1; i < v.size(); ++i) r = r + v[i];
        return r;
      },
      {.trace_once = true});
  std::vector<fg::tensor<double>> v;
  for (int i = 0; i < 24; ++i) v.push_back(fg::randn<double>({2, 2}, 40 + i));
  fg::tensor<double> want = v[0];
  for (std::size_t i = 1; i < v.size(); ++i) want = want + v[i];
  CHECK(same_bits(total(v), want));
  CHECK(same_bits(total(v), want));
  CHECK(calls == 1);
  v.back() = fg::randn<double>({1, 2}, 70);  // broadcast: the last tensor's sizes alone differ
  (void)total(v);
  CHECK(calls == 2);
  v.back() = v.front();  // the same tensor twice: aliasing alone differs
  (void)total(v);
  CHECK(calls == 3);

  // A function that takes its argument by value and moves from it: the record is still made
  // from the argument it was called with.
  int moved_calls = 0;
  auto twice = fg::jit(
      [&moved_calls](fg::tensor<float> a) {
        ++moved_calls;
        const fg::tensor<float> own = std::move(a);
        return own * 2.0f;
      },
      {.trace_once = true});
  const auto z = fg::randn<float>({5}, 9);
  CHECK(same_bits(twice(z.detach().clone()), z * 2.0f));
  CHECK(same_bits(twice(z.detach().clone()), z * 2.0f));
  CHECK(moved_calls == 1);
}

TEST_CASE("trace_once: a thread's last replay belongs to the function called") {
  // A thread keeps the record it replayed last: two functions of one signature called in turn,
  // and functions made one after another (where a destroyed one's state was, perhaps), each
  // replay their own trace.
  const auto x = fg::randn<float>({16}, 1), y = fg::randn<float>({16}, 2);
  auto add =
      fg::jit([](const fg::tensor<float>& a, const fg::tensor<float>& b) { return a + b; }, {.trace_once = true});
  auto mul =
      fg::jit([](const fg::tensor<float>& a, const fg::tensor<float>& b) { return a * b; }, {.trace_once = true});
  for (int i = 0; i < 3; ++i) {
    CHECK(same_bits(add(x, y), x + y));
    CHECK(same_bits(mul(x, y), x * y));
  }
  using fn_t = std::function<fg::tensor<float>(const fg::tensor<float>&, const fg::tensor<float>&)>;
  for (int i = 1; i <= 3; ++i) {
    CAPTURE(i);
    const auto s = static_cast<float>(i);
    auto f = fg::jit(fn_t([s](const fg::tensor<float>& a, const fg::tensor<float>& b) { return a * b * s; }),
                     {.trace_once = true});
    CHECK(same_bits(f(x, y), x * y * s));
    CHECK(same_bits(f(x, y), x * y * s));
  }
}

TEST_CASE("trace_once: a single-loop program bound once runs with the general run's bits, and only where it can") {
  namespace J = fg::detail::jit;
  using prog = J::program<float>;
  const fg::index_t n = 1000;
  fg::ir::graph<float> g;
  const fg::ir::value<float> x{&g, g.add_input({n})}, y{&g, g.add_input({n})}, z{&g, g.add_input({n})};
  const auto a = x * y;                 // stored (an output), then read again by the loop
  const auto b = fg::cos(a) * z + x;    // temporaries in tile registers
  const prog p(g, {a.id, b.id, a.id});  // an output repeated
  REQUIRE(p.num_steps() == 1);
  const std::optional<prog::single_loop_run> bound = p.bind_single_loop(nullptr);
  REQUIRE(bound.has_value());
  const auto big = fg::randn<float>({2 * n}, 1);
  const auto X = fg::randn<float>({n}, 2), Y = fg::randn<float>({n}, 3);
  const auto Z = big.slice(0, n, 2 * n);  // contiguous, at an offset in its storage
  REQUIRE(Z.is_contiguous());
  const auto run_both = [&](std::vector<const fg::tensor<float>*> in, fg::index_t grain) {
    const fg::index_t grain_before = fg::detail::set_parallel_grain(grain);
    std::vector<fg::tensor<float>> got, want;
    const bool ran = p.run_single_loop(*bound, in, got);
    p.run_into(in, want, nullptr, nullptr, prog::input_check::guarded);
    fg::detail::set_parallel_grain(grain_before);
    if (!ran) return false;
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(same_bits(got[i], want[i]));
    }
    CHECK(got[0].is_same(got[2]) == want[0].is_same(want[2]));  // a repeated output, as the general run gives it
    return true;
  };
  CHECK(run_both({&X, &Y, &Z}, fg::detail::parallel_grain()));
  CHECK(run_both({&X, &Y, &Z}, 256));  // in blocks on all threads
  CHECK(run_both({&Z, &X, &Z}, fg::detail::parallel_grain()));
  // A view of the bound sizes that is not contiguous: nothing runs (the general run copies it).
  const auto strided = big.slice(0, 0, 2 * n, 2);
  REQUIRE(!strided.is_contiguous());
  CHECK(!run_both({&X, &strided, &Z}, fg::detail::parallel_grain()));
  const auto spread = fg::randn<float>({1}, 4).expand({n});
  CHECK(!run_both({&X, &Y, &spread}, fg::detail::parallel_grain()));

  // Not one loop whose stored values are all outputs: left to the general run.
  const auto refused = [](auto build) {
    fg::ir::graph<float> h;
    const fg::ir::value<float> u{&h, h.add_input({64})}, v{&h, h.add_input({64})};
    // The outputs first: the program copies the graph, and the compiler picks the order in
    // which a call's arguments are evaluated.
    std::vector<int> outputs = build(u, v);
    return !prog(h, std::move(outputs)).bind_single_loop(nullptr).has_value();
  };
  CHECK(refused([](auto u, auto v) { return std::vector<int>{fg::sum(u * v).id}; }));        // a reduction
  CHECK(refused([](auto u, auto v) { return std::vector<int>{(u * fg::mean(v)).id}; }));     // two loops
  CHECK(refused([](auto u, auto) { return std::vector<int>{u.id}; }));                       // an input handed out
  CHECK(!refused([](auto u, auto v) { return std::vector<int>{(u * v).id, (u + v).id}; }));  // two outputs: bound

  // A one-element input splatted into the loop: bound, its value filled in on each run as the
  // general run fills it; a mean's averaged expand of one is left to the general run.
  fg::ir::graph<float> h;
  const fg::ir::value<float> u{&h, h.add_input({n})}, s{&h, h.add_input({})};
  const prog q(h, {(u * s + u).id});
  REQUIRE(q.steps()[0].splats == 1);
  const std::optional<prog::single_loop_run> with_splat = q.bind_single_loop(nullptr);
  REQUIRE(with_splat.has_value());
  for (const float sv : {0.5f, -3.25f}) {
    CAPTURE(sv);
    const auto S = fg::full<float>({}, sv);
    const std::vector<const fg::tensor<float>*> in{&X, &S};
    std::vector<fg::tensor<float>> got, want;
    REQUIRE(q.run_single_loop(*with_splat, in, got));
    q.run_into(in, want, nullptr, nullptr, prog::input_check::guarded);
    CHECK(same_bits(got[0], want[0]));
  }
  const fg::ir::value<float> averaged{&h, h.add_expand(s.id, u.id, fg::ir::graph<float>::all_dims, true)};
  CHECK(!prog(h, {(u * averaged).id}).bind_single_loop(nullptr).has_value());
}

TEST_CASE("trace_once: a record's bound loop serves its own shapes, any contiguous inputs, and no other layout") {
  // Each signature (sizes) has its record and its loop bound for those sizes; a strided or
  // spread view of the same sizes hits the record but runs the general way, which copies it.
  int calls = 0;
  auto body = [&calls](const fg::tensor<float>& x, const fg::tensor<float>& y, const fg::tensor<float>& z) {
    ++calls;
    const fg::tensor<float> a = x * y;
    return std::pair{a, fg::cos(a) * z + x};
  };
  auto f = fg::jit(body, {.trace_once = true});
  const auto check = [&](const fg::tensor<float>& x, const fg::tensor<float>& y, const fg::tensor<float>& z) {
    const int before = calls;
    const auto [a, b] = f(x, y, z);
    const int after = calls;
    const auto [ea, eb] = body(x, y, z);
    calls = after;
    CHECK(same_bits(a, ea));
    CHECK(same_bits(b, eb));
    return after - before;
  };
  int traced = 0;
  for (int round = 0; round < 2; ++round) {
    for (const fg::index_t n : {1000, 24, 70000, 1}) {
      CAPTURE(round);
      CAPTURE(n);
      const auto big = fg::randn<float>({2 * n}, 1 + round);
      const auto x = fg::randn<float>({n}, 3), y = fg::randn<float>({n}, 4 + round);
      const auto at_offset = big.slice(0, n, 2 * n), strided = big.slice(0, 0, 2 * n, 2);
      traced += check(x, y, at_offset);
      CHECK(check(strided, y, x) == 0);
      CHECK(check(x, fg::randn<float>({1}, 5).expand({n}), at_offset) == 0);
      CHECK(check(y, x, at_offset) == 0);
      {
        fg::no_grad ng;  // another grad mode: its own record, bound too
        traced += check(x, y, at_offset);
        CHECK(check(x, strided, y) == 0);
      }
    }
  }
  CHECK(traced == 8);  // per size, one record per grad mode
  const auto none = fg::randn<float>({0}, 6);
  CHECK(check(none, none.clone(), none.clone()) == 1);  // no elements: nothing to run, bound all the same
  CHECK(check(none.clone(), none, none.clone()) == 0);
  CHECK(calls == 9);
}
