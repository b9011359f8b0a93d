// Regressions in fg::jit and compiled autograd.
//  - Reductions over nothing, over size-1 dims or with keepdim (0-d, [1], [1,1],
//    [1,3], [3,1] inputs; sum, mean, max; full and over dims) through fg::jit with static and
//    dynamic shapes, and through compiled autograd, against the eager path and gradcheck.
//  - Tensor hooks and retain_grad on intermediates of a jitted function behave as in
//    eager mode (generic and not, replacing the gradient or not, removed between calls).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_normwise;
using D = fg::tensor<double>;

namespace {

struct ca_off {  // compiled autograd off before and after a test
  ca_off() { fg::config().compiled_autograd = false; }
  ~ca_off() { fg::config().compiled_autograd = false; }
};

enum class red_kind { sum, mean, max };

/// One reduction: its kind, full (no dims) or over `dims`, keepdim or not.
struct reduction {
  red_kind kind = red_kind::sum;
  bool full = true;
  std::vector<fg::index_t> dims;
  bool keepdim = false;

  [[nodiscard]] D operator()(const D& x) const {
    if (full) return kind == red_kind::sum ? fg::sum(x) : kind == red_kind::mean ? fg::mean(x) : fg::max(x);
    if (kind == red_kind::sum) return fg::sum(x, dims, keepdim);
    if (kind == red_kind::mean) return fg::mean(x, dims, keepdim);
    return fg::max(x, dims, keepdim);
  }
  [[nodiscard]] std::string str() const {
    std::string s = kind == red_kind::sum ? "sum" : kind == red_kind::mean ? "mean" : "max";
    if (full) return s + "(x)";
    s += "(x, {";
    for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
    return s + "}" + (keepdim ? ", keepdim)" : ")");
  }
};

/// Every reduction of a rank-`rank` input: full, over each single dim (and -1), over all dims
/// listed, each with and without keepdim.
std::vector<reduction> reductions_for(std::size_t rank) {
  std::vector<std::vector<fg::index_t>> dim_sets{{0}, {-1}};
  if (rank == 2) dim_sets.push_back({1}), dim_sets.push_back({0, 1});
  std::vector<reduction> r;
  for (red_kind k : {red_kind::sum, red_kind::mean, red_kind::max}) {
    r.push_back({k, true, {}, false});
    for (const auto& ds : dim_sets)
      for (bool keep : {false, true}) r.push_back({k, false, ds, keep});
  }
  return r;
}

/// Functions of (x, y), y shaped like x, around one reduction: the forms that failed and forms
/// where the reduced value is broadcast back against x.
std::vector<std::pair<std::string, std::function<D(const D&, const D&, const reduction&)>>> forms() {
  return {
      {"2 - (y + R(x))", [](const D& x, const D& y, const reduction& R) { return 2.0 - (y + R(x)); }},
      {"sin(R(x)) * 2", [](const D& x, const D&, const reduction& R) { return fg::sin(R(x)) * 2.0; }},
      {"x * R(x * y)", [](const D& x, const D& y, const reduction& R) { return x * R(x * y); }},
      {"R(exp(x)) * 3 + R(y)", [](const D& x, const D& y, const reduction& R) { return R(fg::exp(x)) * 3.0 + R(y); }},
  };
}

/// Distinct values (max has no ties), the same for a given seed and shape.
D input(const fg::shape& s, std::uint64_t seed) { return fg::rand<double>(s, seed, -2.0, 2.0); }

/// The shape sequence a test runs: `s` three times, or with each size 3 replaced by 3, 5, 7
/// (the second call recompiles shape-generic, the third hits the dynamic entry).
std::vector<fg::shape> shape_run(const fg::shape& s) {
  std::vector<fg::shape> r;
  for (fg::index_t n : {3, 5, 7}) {
    fg::shape t = s;
    for (auto& d : t)
      if (d == 3) d = n;
    r.push_back(t);
  }
  return r;
}

/// Both gradients undefined (no path), or equal.
void check_same_grad(const D& expected, const D& got) {
  REQUIRE(expected.defined() == got.defined());
  if (expected.defined()) CHECK(max_normwise(expected, got) < 1e-12);
}

/// The jitted call of `fn` and its compiled-autograd backward equal eager mode (`ge`, `gy`, `out_e`).
template <class JF, class F>
void check_jit_and_ca(const JF& jf, const F& fn, const D& x0, const D& y0, const D& w, const D& ge, const D& gy,
                      const D& out_e) {
  D xj = x0.clone().requires_grad(true), yj = y0.clone().requires_grad(true);
  const D out_j = jf(xj, yj);
  fg::sum(out_j * w).backward();
  CHECK(max_normwise(out_e.detach(), out_j.detach()) < 1e-12);
  check_same_grad(ge, xj.grad());
  check_same_grad(gy, yj.grad());
  // Compiled autograd over an eager forward.
  D xc = x0.clone().requires_grad(true), yc = y0.clone().requires_grad(true);
  const D out_c = fn(xc, yc);
  fg::compiled_autograd::reset();  // a fresh capture each time (not the recompile limit's eager fallback)
  const auto fallbacks = fg::counters().fallbacks;
  {
    fg::compiled_autograd::enable on;
    fg::sum(out_c * w).backward();
  }
  CHECK(fg::counters().fallbacks == fallbacks);
  check_same_grad(ge, xc.grad());
  check_same_grad(gy, yc.grad());
}

/// `fn(x, y)`: eagerly, through `jf` (jitted), and eagerly under compiled autograd; values and
/// gradients (seeded with a fixed random weight) must agree. False if eager mode throws (the
/// jitted call must then throw too).
template <class JF, class F>
bool check_paths(const JF& jf, const F& fn, const fg::shape& s, std::uint64_t seed) {
  const D x0 = input(s, seed), y0 = input(s, seed + 1);
  D xe = x0.clone().requires_grad(true), ye = y0.clone().requires_grad(true);
  D out_e;
  try {
    out_e = fn(xe, ye);
  } catch (const fg::error&) {
    D xj = x0.clone().requires_grad(true), yj = y0.clone().requires_grad(true);
    CHECK_THROWS_AS((void)jf(xj, yj), fg::error);
    return false;
  }
  const D w = input(out_e.shape(), seed + 2);
  fg::sum(out_e * w).backward();
  try {
    check_jit_and_ca(jf, fn, x0, y0, w, xe.grad(), ye.grad(), out_e);
  } catch (const std::exception& e) { FAIL_CHECK(e.what()); }
  return true;
}

}  // namespace

TEST_CASE(
    "reductions of size-1 and 0-d inputs: the reproducers (0-d mean, 0-d sum, keepdim sum over [1], compiled autograd "
    "of sin(max))") {
  ca_off guard;
  {
    auto f = fg::jit([](const D& x0, const D& x1) { return 2.0 - (x1 + fg::mean(x0)); });
    D a = fg::full<double>({}, 0.3).requires_grad(true), b = fg::full<double>({}, 0.7).requires_grad(true);
    (f(a, b) * 3.0).backward();
    D ae = fg::full<double>({}, 0.3).requires_grad(true), be = fg::full<double>({}, 0.7).requires_grad(true);
    ((2.0 - (be + fg::mean(ae))) * 3.0).backward();
    CHECK(a.grad().item() == ae.grad().item());
    CHECK(b.grad().item() == be.grad().item());
  }
  {
    auto f = fg::jit([](const D& x) { return fg::sum(x) * 2.0; });
    D a = fg::full<double>({}, 0.3).requires_grad(true);
    f(a).backward();
    REQUIRE(a.grad().defined());
    CHECK(a.grad().item() == 2.0);
  }
  {
    auto f = fg::jit([](const D& x) { return fg::sum(x, {0}, true) * 2.0; });
    D a = fg::full<double>({1}, 0.3).requires_grad(true);
    fg::sum(f(a)).backward();
    REQUIRE(a.grad().defined());
    CHECK(a.grad().to_vector() == std::vector<double>{2.0});
  }
  {
    D a = fg::full<double>({}, 0.3).requires_grad(true);
    const D out = fg::sin(fg::max(a));
    {
      fg::compiled_autograd::enable on;
      out.backward();
    }
    REQUIRE(a.grad().defined());
    CHECK(a.grad().item() == doctest::Approx(std::cos(0.3)).epsilon(1e-14));
  }
}

TEST_CASE(
    "reductions of size-1 and 0-d inputs: every reduction of 0-d, [1], [1,1], [1,3], [3,1] inputs: jit (static, "
    "dynamic) and compiled autograd equal eager") {
  ca_off guard;
  const std::vector<fg::shape> shapes{{}, {1}, {1, 1}, {1, 3}, {3, 1}, {3}};
  int checked = 0;
  for (const auto& s : shapes)
    for (const auto& R : reductions_for(s.size()))
      for (const auto& named : forms()) {  // (no structured bindings: clang 14 cannot capture them)
        const std::string& name = named.first;
        const auto& form = named.second;
        CAPTURE(fg::to_string(s));
        CAPTURE(R.str());
        CAPTURE(name);
        auto fn = [R, form](const D& x, const D& y) { return form(x, y, R); };
        auto jf = fg::jit(fn);
        std::uint64_t seed = 100;
        for (const auto& sh : shape_run(s)) {
          CAPTURE(fg::to_string(sh));
          checked += check_paths(jf, fn, sh, seed += 10) ? 1 : 0;
        }
        if (std::find(s.begin(), s.end(), 3) != s.end() && jf.compiles() > 0) {
          bool dynamic = false;  // the [..5..] call compiled a shape-generic entry, which [..7..] hit
          for (const auto& e : jf.entries()) dynamic = dynamic || e.dynamic;
          CHECK(dynamic);
          CHECK(jf.compiles() == 2);
        }
      }
  CHECK(checked > 600);
}

TEST_CASE("reductions of size-1 and 0-d inputs: jitted reductions over size-1 and 0-d inputs pass gradcheck") {
  ca_off guard;
  const std::vector<fg::shape> shapes{{}, {1}, {1, 1}, {1, 3}, {3, 1}};
  for (const auto& s : shapes)
    for (const auto& R : reductions_for(s.size()))
      for (const auto& named : forms()) {  // (no structured bindings: clang 14 cannot capture them)
        const std::string& name = named.first;
        const auto& form = named.second;
        CAPTURE(fg::to_string(s));
        CAPTURE(R.str());
        CAPTURE(name);
        auto jf = fg::jit([R, form](const D& x, const D& y) { return form(x, y, R); });
        const D x = input(s, 7), y = input(s, 8);
        bool eager_ok = true;
        try {
          (void)form(x, y, R);
        } catch (const fg::error&) { eager_ok = false; }
        if (!eager_ok) continue;
        try {
          const auto r = fg::gradcheck([&](const D& a, const D& b) { return jf(a, b); }, x, y);
          CHECK_MESSAGE(r.ok, r.message);
        } catch (const std::exception& e) { FAIL_CHECK(e.what()); }
      }
}

TEST_CASE(
    "reductions of size-1 and 0-d inputs: one gradient feeding both sum's and mean's backward (shared one-element "
    "operand)") {
  ca_off guard;
  const std::vector<fg::shape> shapes{{}, {1}, {3}, {1, 3}, {3, 1}, {4, 5}};
  auto fn = [](const D& x, const D& y) { return fg::sum(x) + fg::mean(x) + fg::max(y) * fg::mean(y); };
  auto jf = fg::jit(fn);
  std::uint64_t seed = 300;
  for (const auto& s : shapes) {
    CAPTURE(fg::to_string(s));
    CHECK(check_paths(jf, fn, s, seed += 10));
  }
}

// --- hooks and retain_grad on intermediates of jitted functions -------------------------------

namespace {

/// What a test function's hooks saw, in order (each a gradient's values).
using seen_t = std::vector<std::vector<double>>;

/// Runs `fn(x, seen)` (returning a scalar loss) eagerly and jitted (`jf`, which wraps the same
/// function) on copies of `x0`, backward from each; the gradients of x and what the hooks saw
/// must be equal. Returns the jitted x.grad().
template <class JF, class F>
D same_hooks_as_eager(const JF& jf, const F& fn, const D& x0) {
  seen_t seen_e, seen_j;
  D xe = x0.clone().requires_grad(true), xj = x0.clone().requires_grad(true);
  fn(xe, seen_e).backward();
  D out_j = jf(xj, seen_j);
  REQUIRE(!out_j.is_lazy());
  out_j.backward();
  REQUIRE(xe.grad().defined() == xj.grad().defined());
  if (xe.grad().defined()) CHECK(max_normwise(xe.grad(), xj.grad()) < 1e-12);
  REQUIRE(seen_e.size() == seen_j.size());
  for (std::size_t i = 0; i < seen_e.size(); ++i) {
    CAPTURE(i);
    REQUIRE(seen_e[i].size() == seen_j[i].size());
    for (std::size_t k = 0; k < seen_e[i].size(); ++k)
      CHECK(seen_j[i][k] == doctest::Approx(seen_e[i][k]).epsilon(1e-12));
  }
  return xj.grad();
}

}  // namespace

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
