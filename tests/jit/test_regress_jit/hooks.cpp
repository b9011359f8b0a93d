// test_regress_jit: tensor hooks and retain_grad on intermediates and outputs of a jitted
// function behave as in eager mode.
#include "helpers.hpp"

TEST_CASE("hooks on jitted values: the reproducer: a hook g * 10 on an intermediate of a jitted function runs") {
  ca_off guard;
  auto fn = [](const D& x) {
    D y = fg::sin(x) * 2.0;
    y.register_hook([](const D& g) { return g * 10.0; });
    return fg::sum(y * y);
  };
  auto jf = fg::jit(fn);
  const D x0 = fg::full<double>({}, 0.7);
  D xe = x0.clone().requires_grad(true), xj = x0.clone().requires_grad(true);
  fn(xe).backward();
  jf(xj).backward();
  CHECK(xe.grad().item() == doctest::Approx(10 * 8 * std::sin(0.7) * std::cos(0.7)).epsilon(1e-14));
  CHECK(xj.grad().item() == doctest::Approx(xe.grad().item()).epsilon(1e-14));
}

TEST_CASE("hooks on jitted values: hooks on jitted intermediates: generic or not, replacing the gradient or not") {
  ca_off guard;
  const D x0 = input({4, 3}, 11);
  using hook_fn = std::function<D(const D&, seen_t&)>;
  const std::vector<std::pair<std::string, hook_fn>> cases{
      {"opaque hook replacing the gradient",
       [](const D& x, seen_t&) {
         D y = fg::sin(x) * 2.0;
         y.register_hook([](const D& g) { return g * 10.0; });
         return fg::sum(y * y);
       }},
      {"generic hook replacing the gradient",
       [](const D& x, seen_t&) {
         D y = fg::exp(x * 0.5);
         y.register_hook([](auto g) { return g * 10.0 - 1.0; });
         return fg::sum(fg::cos(y) * x);
       }},
      {"opaque hook reading the gradient",
       [](const D& x, seen_t& seen) {
         D y = fg::tanh(x) + x;
         y.register_hook([&seen](const D& g) { seen.push_back(g.to_vector()); });
         return fg::sum(y * y * x);
       }},
      {"generic hook reading the gradient",
       [](const D& x, seen_t& seen) {
         D y = fg::tanh(x) * fg::sum(x, {1}, true);
         y.register_hook([&seen](auto g) { seen.push_back(g.to_vector()); });
         return fg::sum(fg::sigmoid(y));
       }},
      {"two hooks on one tensor run in order",
       [](const D& x, seen_t& seen) {
         D y = fg::sin(x);
         y.register_hook([](const D& g) { return g * 2.0; });
         y.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g + 1.0;
         });
         return fg::sum(y * x);
       }},
      {"hooks on a chain of intermediates",
       [](const D& x, seen_t& seen) {
         D a = fg::sin(x);
         a.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g * 3.0;
         });
         D b = a * a + x;
         b.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g - 0.5;
         });
         return fg::mean(b * b);
       }},
      {"a hooked temporary (its handle is reassigned)",
       [](const D& x, seen_t& seen) {
         D y = fg::cos(x);
         y.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g * 4.0;
         });
         y = y * y + 1.0;
         return fg::sum(y);
       }},
      {"a hooked value also used by another value alive at a graph break (the hook sees the whole gradient)",
       [](const D& x, seen_t& seen) {
         D y = fg::sin(x);
         y.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g * 2.0;
         });
         D w = y * 3.0;
         fg::graph_break();  // y and w are both outputs of the first graph
         return fg::sum(w * y + y);
       }},
      {"a hook registered after a graph break (on a computed value)",
       [](const D& x, seen_t& seen) {
         D y = fg::sin(x);
         fg::graph_break();
         y.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g * 2.0;
         });
         return fg::sum(y * y);
       }},
      {"a hook on the returned value",
       [](const D& x, seen_t& seen) {
         D y = fg::sum(fg::sin(x) * x);
         y.register_hook([&seen](const D& g) {
           seen.push_back(g.to_vector());
           return g * 3.0;
         });
         return y;
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
      // Dynamic shapes: the second size compiles shape-generic, the third hits it.
      for (fg::index_t n : {5, 7, 9}) (void)same_hooks_as_eager(jf, fn, input({4, n}, 12));
    }
    auto strict = fg::jit(fn, {.fullgraph = true});  // a hook is no graph break
    if (name.find("graph break") == std::string::npos) (void)same_hooks_as_eager(strict, fn, x0);
  }
}

TEST_CASE("hooks on jitted values: retain_grad on jitted intermediates and outputs") {
  ca_off guard;
  const D x0 = input({3, 4}, 21);
  auto fn = [](const D& x, D& mid, D& out) {
    mid = fg::sin(x) * x;
    mid.retain_grad();
    D u = mid * mid + fg::mean(mid, {0}, true);
    u.retain_grad();
    out = fg::sum(fg::exp(u * 0.1));
    out.retain_grad();
    return out;
  };
  auto jf = fg::jit(fn);
  for (int call = 0; call < 3; ++call) {
    CAPTURE(call);
    D xe = x0.clone().requires_grad(true), xj = x0.clone().requires_grad(true);
    D mid_e, out_e, mid_j, out_j;
    fn(xe, mid_e, out_e).backward();
    jf(xj, mid_j, out_j).backward();
    REQUIRE(mid_e.grad().defined());
    REQUIRE(mid_j.grad().defined());
    CHECK(max_normwise(mid_e.grad(), mid_j.grad()) < 1e-12);
    REQUIRE(out_j.grad().defined());
    CHECK(out_j.grad().item() == 1.0);
    CHECK(max_normwise(xe.grad(), xj.grad()) < 1e-12);
  }
  // A second backward through a retained graph accumulates into the retained gradient.
  D xj = x0.clone().requires_grad(true), mid_j, out_j;
  D xe = x0.clone().requires_grad(true), mid_e, out_e;
  jf(xj, mid_j, out_j).backward({.retain_graph = true});
  out_j.backward();
  fn(xe, mid_e, out_e).backward({.retain_graph = true});
  out_e.backward();
  CHECK(max_normwise(mid_e.grad(), mid_j.grad()) < 1e-12);
}

TEST_CASE("hooks on jitted values: a hook removed between calls is not replayed; each call runs its own hook") {
  ca_off guard;
  bool use_hook = true;
  double scale = 10.0;
  bool removed = false;
  auto fn = [&](const D& x, seen_t&) {
    D y = fg::sin(x) * 2.0;
    const auto id = y.register_hook([s = scale](const D& g) { return g * s; });
    if (!use_hook) removed = y.remove_hook(id);
    return fg::sum(y * y);
  };
  auto jf = fg::jit(fn);
  const D x0 = input({5}, 31);
  const D with10 = same_hooks_as_eager(jf, fn, x0);
  use_hook = false;
  const D without = same_hooks_as_eager(jf, fn, x0);
  CHECK(removed);
  CHECK(max_normwise(with10, without * 10.0) < 1e-12);
  use_hook = true;
  scale = 5.0;
  const D with5 = same_hooks_as_eager(jf, fn, x0);  // the first entry, with this call's hook
  CHECK(max_normwise(with5, without * 5.0) < 1e-12);
  CHECK(jf.compiles() == 2);
}

TEST_CASE(
    "hooks on jitted values: hooks of a jitted forward under compiled autograd, and in a backward inside the jitted "
    "call") {
  ca_off guard;
  const D x0 = input({4, 3}, 41);
  auto fn = [](const D& x, seen_t& seen) {
    D y = fg::exp(x * 0.3);
    y.register_hook([&seen](const D& g) {
      seen.push_back(g.to_vector());
      return g * 2.0;
    });
    D z = fg::sin(y) * x;
    z.register_hook([](auto g) { return g + 1.0; });
    return fg::sum(z * z);
  };
  auto jf = fg::jit(fn);
  for (int call = 0; call < 3; ++call) {
    seen_t seen_e, seen_j;
    D xe = x0.clone().requires_grad(true), xj = x0.clone().requires_grad(true);
    fn(xe, seen_e).backward();
    const D out = jf(xj, seen_j);
    fg::compiled_autograd::reset();
    const auto fallbacks = fg::counters().fallbacks;
    {
      fg::compiled_autograd::enable on;
      out.backward();
    }
    CHECK(fg::counters().fallbacks == fallbacks);
    CHECK(max_normwise(xe.grad(), xj.grad()) < 1e-12);
    REQUIRE(seen_j.size() == 1);
    CHECK(max_normwise(fg::from_vector<double>(seen_e[0], {12}), fg::from_vector<double>(seen_j[0], {12})) < 1e-12);
  }
  // The backward run inside the jitted call (traced into its next graph).
  auto inside = fg::jit([&fn](const D& x, seen_t& seen) {
    D loss = fn(x, seen);
    loss.backward();
    return x.grad() * 1.0;
  });
  seen_t seen_e, seen_j;
  D xe = x0.clone().requires_grad(true), xj = x0.clone().requires_grad(true);
  fn(xe, seen_e).backward();
  const D gj = inside(xj, seen_j);
  CHECK(max_normwise(xe.grad(), gj) < 1e-12);
  REQUIRE(seen_j.size() == 1);
  CHECK(max_normwise(fg::from_vector<double>(seen_e[0], {12}), fg::from_vector<double>(seen_j[0], {12})) < 1e-12);
}

// --- Fuzzer findings F1 and F2 --------------------------------------------------------------
//  - F1: results of ops without a derivative (comparisons, step, sign) do not require grad
//    inside or after fg::jit, as in eager mode (backward and register_hook on them throw).
//  - F2: an output of a flushed graph (alive at a graph break) that the loss does not use
//    contributes nothing to the backward: its local derivative (NaN/inf here) is never
//    multiplied by a zero.
