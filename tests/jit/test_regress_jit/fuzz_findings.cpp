// test_regress_jit: what the differential fuzzer found: gradients of non-differentiable
// results, outputs alive at a graph break that the loss does not use, the order of hooks.
#include "helpers.hpp"

namespace {

/// Equal values, NaN where the other has NaN, infinities of the same sign.
bool same_values(const D& a, const D& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.shape() != b.shape()) return false;
  const auto u = a.to_vector(), v = b.to_vector();
  for (std::size_t i = 0; i < u.size(); ++i) {
    if (std::isnan(u[i]) || std::isnan(v[i])) {
      if (std::isnan(u[i]) != std::isnan(v[i])) return false;
      continue;
    }
    if (std::isinf(u[i]) || std::isinf(v[i])) {
      if (u[i] != v[i]) return false;
      continue;
    }
    if (std::abs(u[i] - v[i]) > 1e-12 * (1.0 + std::abs(u[i]))) return false;
  }
  return true;
}

using nondiff_fn = std::function<D(const D&)>;
std::vector<std::pair<std::string, nondiff_fn>> nondiff_ops() {
  return {
      {"gt", [](const D& x) { return fg::gt(x, x * 0.5); }},  {"ge", [](const D& x) { return fg::ge(x, x * 0.5); }},
      {"lt", [](const D& x) { return fg::lt(x, x * 0.5); }},  {"le", [](const D& x) { return fg::le(x, x * 0.5); }},
      {"eq", [](const D& x) { return fg::eq(x, x * 0.5); }},  {"ne", [](const D& x) { return fg::ne(x, x * 0.5); }},
      {"step", [](const D& x) { return fg::step(x * 2.0); }}, {"sign", [](const D& x) { return fg::sign(x * 2.0); }},
  };
}

}  // namespace

TEST_CASE("fuzz F1: results of comparisons, step and sign do not require grad inside or after fg::jit") {
  ca_off guard;
  const D x0 = fg::randn<double>({3}, 3);
  for (const auto& named_op : nondiff_ops()) {
    const std::string name = named_op.first;
    const auto op = named_op.second;  // a copy: clang 14 does not capture structured bindings
    CAPTURE(name);
    D xe = x0.clone().requires_grad(true);
    const bool eager_rg = op(xe).requires_grad();
    const bool eager_mixed = (op(xe) * xe).requires_grad();
    for (auto backend : {fg::jit_backend::fused, fg::jit_backend::eager}) {
      CAPTURE(static_cast<int>(backend));
      bool inside = true, inside_mixed = false;
      auto jf = fg::jit(
          [&](const D& x) {
            D m = op(x);
            inside = m.requires_grad();
            inside_mixed = (m * x).requires_grad();
            return m;
          },
          {.backend = backend});
      D x = x0.clone().requires_grad(true);
      const D out = jf(x);
      CHECK(inside == eager_rg);
      CHECK(inside_mixed == eager_mixed);
      CHECK(out.requires_grad() == eager_rg);
      CHECK_FALSE(out.requires_grad());
      // As in eager mode: no backward, no hook on such a value.
      CHECK_THROWS_AS(fg::sum(out).backward(), fg::error);
      CHECK_THROWS_AS(fg::sum(op(xe)).backward(), fg::error);
      auto hooked = fg::jit(
          [&](const D& x) {
            D m = op(x);
            CHECK_THROWS_AS(m.register_hook([](const D& g) { return g; }), fg::error);
            return m * x;
          },
          {.backend = backend});
      D xh = x0.clone().requires_grad(true);
      const D outh = hooked(xh);
      CHECK(outh.requires_grad());
      fg::sum(outh).backward();  // d/dx (m * x) = m: the mask, through the multiplication only
      D xm = x0.clone().requires_grad(true);
      fg::sum(op(xm) * xm).backward();
      CHECK(same_values(xm.grad(), xh.grad()));
    }
  }
}

TEST_CASE("fuzz F1: jitted outputs of inputs without requires_grad, and under no_grad, do not require grad") {
  ca_off guard;
  auto jf = fg::jit([](const D& x, const D& y) { return fg::sin(x) * y + fg::sum(x); });
  const D x0 = fg::randn<double>({4}, 5), y0 = fg::randn<double>({4}, 6);
  CHECK_FALSE(jf(x0, y0).requires_grad());
  D xr = x0.clone().requires_grad(true);
  CHECK(jf(xr, y0).requires_grad());
  {
    fg::no_grad ng;
    CHECK_FALSE(jf(xr, y0).requires_grad());
    CHECK_FALSE(jf(x0, y0).requires_grad());
  }
  CHECK(jf(xr, y0).requires_grad());
}

TEST_CASE("fuzz F2: the reproducer: an output alive at a graph break that the loss does not use gives no NaN") {
  ca_off guard;
  auto fn = [](const D& x) {
    D a = fg::sqrt(x);  // alive at the break, never used for the result
    D b = x * 2.0;
    fg::graph_break();
    return b;
  };
  for (auto backend : {fg::jit_backend::fused, fg::jit_backend::eager}) {
    CAPTURE(static_cast<int>(backend));
    auto f = fg::jit(fn, {.backend = backend});
    for (int call = 0; call < 2; ++call) {
      D x = fg::from_vector<double>({-1.0, 2.0}).requires_grad(true);
      fg::sum(f(x)).backward();
      const auto g = x.grad().to_vector();
      CHECK(g[0] == 2.0);
      CHECK(g[1] == 2.0);
    }
  }
}

namespace {
/// Returns (a, b); `a`'s derivative is NaN or inf for x <= 0 (sqrt, 1/x, log), b is finite.
/// Both are outputs of one graph (the break flushes them together); the losses below use b,
/// a, or both, so the backward of that graph sees gradients for one or both, call by call.
std::vector<D> two_outputs(const D& x, const D& y) {
  D a = fg::sqrt(x) + 1.0 / x + fg::log(x) * y;
  D b = fg::sin(x) * y;
  D s = fg::sum(fg::exp(x));  // feeds item(): alive at the flush, unused by any loss
  if (s.item() > 0) b = b * 3.0;
  return {a, b};
}
}  // namespace

TEST_CASE("fuzz F2: gradients of flushed outputs used or not, call by call, static and dynamic shapes, both backends") {
  ca_off guard;
  for (auto backend : {fg::jit_backend::fused, fg::jit_backend::eager}) {
    CAPTURE(static_cast<int>(backend));
    auto jf = fg::jit(two_outputs, {.backend = backend});
    int call = 0;
    for (fg::index_t n : {3, 5, 7, 9}) {   // the second size recompiles shape-generic
      for (int use = 0; use < 3; ++use) {  // b only, a only, both: the backward's gradients change
        CAPTURE(n);
        CAPTURE(use);
        ++call;
        // x has a 0 and a negative element where b alone is used (a's derivative: inf, NaN).
        D x0 = fg::rand<double>({n}, 100 + static_cast<std::uint64_t>(call), 0.5, 2.0);
        if (use == 0) {
          auto v = x0.to_vector();
          v[0] = 0.0;
          v[1] = -1.0;
          x0 = fg::from_vector<double>(v, {n});
        }
        const D y0 = fg::randn<double>({n}, 200 + static_cast<std::uint64_t>(call));
        auto loss = [use](const std::vector<D>& r) {
          return use == 0 ? fg::sum(r[1]) : use == 1 ? fg::sum(r[0] * 2.0) : fg::sum(r[0]) + fg::sum(r[1] * r[1]);
        };
        D xe = x0.clone().requires_grad(true), ye = y0.clone().requires_grad(true);
        loss(two_outputs(xe, ye)).backward();
        D xj = x0.clone().requires_grad(true), yj = y0.clone().requires_grad(true);
        loss(jf(xj, yj)).backward();
        CHECK(same_values(xe.grad(), xj.grad()));
        CHECK(same_values(ye.grad(), yj.grad()));
        if (use == 0) {
          for (double g : xj.grad().to_vector()) CHECK(std::isfinite(g));
        }
      }
    }
  }
}

TEST_CASE("fuzz F2: a hook on a flushed output the loss does not use does not run (as in eager mode)") {
  ca_off guard;
  auto fn = [](const D& x, int& calls) {
    D a = fg::sqrt(x);
    a.register_hook([&calls](const D& g) {
      ++calls;
      return g;
    });
    D b = x * 2.0;
    fg::graph_break();
    return std::vector<D>{a, b * 1.0};
  };
  for (auto backend : {fg::jit_backend::fused, fg::jit_backend::eager}) {
    CAPTURE(static_cast<int>(backend));
    auto jf = fg::jit(fn, {.backend = backend});
    int calls_e = 0, calls_j = 0;
    D xe = fg::from_vector<double>({-1.0, 2.0}).requires_grad(true), xj = xe.detach().clone().requires_grad(true);
    fg::sum(fn(xe, calls_e)[1]).backward();
    fg::sum(jf(xj, calls_j)[1]).backward();
    CHECK(calls_e == 0);
    CHECK(calls_j == calls_e);
    CHECK(same_values(xe.grad(), xj.grad()));
    // Used: the hook runs once, as in eager mode.
    D xe2 = fg::from_vector<double>({1.0, 2.0}).requires_grad(true), xj2 = xe2.detach().clone().requires_grad(true);
    auto re = fn(xe2, calls_e), rj = jf(xj2, calls_j);
    (fg::sum(re[0]) + fg::sum(re[1])).backward();
    (fg::sum(rj[0]) + fg::sum(rj[1])).backward();
    CHECK(calls_e == 1);
    CHECK(calls_j == 1);
    CHECK(same_values(xe2.grad(), xj2.grad()));
  }
}

TEST_CASE("fuzz F2: compiled autograd over jitted forwards with unused flushed outputs gives no NaN") {
  ca_off guard;
  auto jf = fg::jit(two_outputs);
  for (int use = 0; use < 3; ++use) {
    CAPTURE(use);
    D x0 = fg::rand<double>({4}, 300 + static_cast<std::uint64_t>(use), 0.5, 2.0);
    if (use == 0) x0 = fg::from_vector<double>({0.0, -1.0, 0.7, 1.5}, {4});
    const D y0 = fg::randn<double>({4}, 310 + static_cast<std::uint64_t>(use));
    auto loss = [use](const std::vector<D>& r) {
      return use == 0 ? fg::sum(r[1]) : use == 1 ? fg::sum(r[0] * 2.0) : fg::sum(r[0]) + fg::sum(r[1] * r[1]);
    };
    D xe = x0.clone().requires_grad(true), ye = y0.clone().requires_grad(true);
    loss(two_outputs(xe, ye)).backward();
    // An eager forward around the jitted call, its whole backward captured.
    D xc = x0.clone().requires_grad(true), yc = y0.clone().requires_grad(true);
    const D l = loss(jf(xc, yc));
    fg::compiled_autograd::reset();
    {
      fg::compiled_autograd::enable on;
      l.backward();
    }
    CHECK(same_values(xe.grad(), xc.grad()));
    CHECK(same_values(ye.grad(), yc.grad()));
  }
}

TEST_CASE_TEMPLATE(
    "fuzz F2: fg::compile with several outputs, one unused: no NaN from its derivative (and under compiled autograd)",
    B, fg::backend::aot_eager, fg::backend::fused) {
  ca_off guard;
  auto fn = [](auto x, auto y) { return std::tuple{fg::sqrt(x) + 1.0 / x + y * y, fg::sin(x) * y, x * y}; };
  auto cf = fg::compile<B>(fn);
  for (int use = 0; use < 4; ++use) {  // second only, first only, first and third, all
    for (bool ca : {false, true}) {
      CAPTURE(use);
      CAPTURE(ca);
      D x0 = fg::rand<double>({2, 3}, 400 + static_cast<std::uint64_t>(use), 0.5, 2.0);
      if (use == 0) x0 = fg::from_vector<double>({0.0, -1.0, 0.7, 1.5, 0.2, 3.0}, {2, 3});
      const D y0 = fg::randn<double>({3}, 410 + static_cast<std::uint64_t>(use));
      auto loss = [use](const D& a, const D& b, const D& c) {
        return use == 0   ? fg::sum(b)
               : use == 1 ? fg::sum(a * 2.0)
               : use == 2 ? fg::sum(a) + fg::sum(c * c)
                          : fg::sum(a) + fg::sum(b * c);
      };
      D xe = x0.clone().requires_grad(true), ye = y0.clone().requires_grad(true);
      {
        auto [a, b, c] = fn(xe, ye);
        loss(a, b, c).backward();
      }
      D xc = x0.clone().requires_grad(true), yc = y0.clone().requires_grad(true);
      auto [a, b, c] = cf(xc, yc);
      const D l = loss(a, b, c);
      if (ca) {
        fg::compiled_autograd::reset();
        fg::compiled_autograd::enable on;
        l.backward();
      } else {
        l.backward();
      }
      CHECK(same_values(xe.grad(), xc.grad()));
      CHECK(same_values(ye.grad(), yc.grad()));
      if (use == 0) {
        for (double g : xc.grad().to_vector()) CHECK(std::isfinite(g));
      }
    }
  }
}

// --- fuzzer, `--seed 6`: hooks registered on outputs of an fg::jit graph after it ran --------
// A hook (or retain_grad) registered after a graph break on a value the broken-off graph also
// used inside itself must see that value's whole gradient (the part from inside the graph
// too), and run in registration order with the graph's own hooks on it, as in eager mode.

TEST_CASE("a fuzzer reproducer: hooks registered after a graph break on an output also used inside its graph") {
  ca_off guard;
  const D x0 = input({3, 4}, 61);
  using hook_fn = std::function<D(const D&, seen_t&)>;
  const std::vector<std::pair<std::string, hook_fn>> cases{
      {"graph 55: a replacing hook after an implicit break (reshape), the value only used inside",
       [](const D& x, seen_t& seen) {
         D y = fg::abs(x);
         D w = y + 0.1;
         D r = w.reshape({-1});  // a sync point: y and w are outputs of the first graph
         y.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g * 0.5;
         });
         return fg::sum(r * r);
       }},
      {"graph 660: an observing hook on a value that gets gradient only from inside its graph",
       [](const D& x, seen_t& seen) {
         D y = x + 0.1;
         D w = y + 0.1;
         fg::graph_break();
         y.register_hook([&seen](const D& g) { seen.push_back(g.to_vector()); });
         return fg::sum(w * w);
       }},
      {"a hook after the break on a value used inside and outside its graph",
       [](const D& x, seen_t& seen) {
         D y = fg::sin(x);
         D w = y * 3.0;
         fg::graph_break();
         y.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g * 2.0;
         });
         return fg::sum(w * y + y);
       }},
      {"graph 591: a hook inside the graph, then one after the break on the same value, run in that order",
       [](const D& x, seen_t& seen) {
         D y = fg::mean(x, {1}, true);
         D s = fg::sum(y);
         s.register_hook([&seen](const D& g) { seen.push_back(g.to_vector()); });
         fg::graph_break();
         s.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g * 2.0;
         });
         return fg::sum(y / s);
       }},
  };
  for (const auto& named : cases) {
    const std::string& name = named.first;
    const hook_fn& fn = named.second;
    CAPTURE(name);
    for (auto backend : {fg::jit_backend::fused, fg::jit_backend::eager}) {
      CAPTURE(static_cast<int>(backend));
      auto jf = fg::jit(fn, {.backend = backend});
      for (int call = 0; call < 3; ++call) {  // a compile, then cache hits
        CAPTURE(call);
        (void)same_hooks_as_eager(jf, fn, x0);
      }
      for (fg::index_t n : {5, 7, 9}) (void)same_hooks_as_eager(jf, fn, input({3, n}, 62));  // dynamic shapes
    }
  }
}

TEST_CASE("fuzz seed 6 (graph 195): retain_grad's hook runs after the tensor's other hooks, as in PyTorch") {
  ca_off guard;
  const D x0 = input({2, 3}, 63);
  const D c = input({2, 3}, 64);  // d loss / d y
  const std::vector<double> want = (c * 10.0).to_vector();
  // retain_grad before or after the hook, with or without a graph break between them.
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    auto fn = [variant, c](const D& x, D& y) {
      y = fg::sigmoid(x) * 1.0;
      if (variant < 2) y.retain_grad();
      if (variant % 2 == 1) fg::graph_break();
      y.register_hook([](const D& g) { return g * 10.0; });
      if (variant >= 2) y.retain_grad();
      return fg::sum(y * c);
    };
    D xe = x0.clone().requires_grad(true), ye;
    fn(xe, ye).backward();
    REQUIRE(ye.grad().defined());
    const std::vector<double> got_e = ye.grad().to_vector();
    for (std::size_t k = 0; k < want.size(); ++k) CHECK(got_e[k] == doctest::Approx(want[k]).epsilon(1e-14));
    for (auto backend : {fg::jit_backend::fused, fg::jit_backend::eager}) {
      CAPTURE(static_cast<int>(backend));
      auto jf = fg::jit(fn, {.backend = backend});
      for (int call = 0; call < 2; ++call) {
        D xj = x0.clone().requires_grad(true), yj;
        jf(xj, yj).backward();
        REQUIRE(yj.grad().defined());
        CHECK(max_normwise(ye.grad(), yj.grad()) < 1e-12);
        CHECK(max_normwise(xe.grad(), xj.grad()) < 1e-12);
      }
    }
  }
}
