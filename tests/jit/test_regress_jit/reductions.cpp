// test_regress_jit: reductions over nothing, over size-1 dims or with keepdim through fg::jit
// (static and dynamic shapes) and compiled autograd, against eager and gradcheck.
#include "helpers.hpp"

namespace {

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
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(dims[i]);  // (appended: GCC 12 warns falsely on `"," + std::to_string(...)`)
    }
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
