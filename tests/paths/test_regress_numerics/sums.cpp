// test_regress_numerics: sums do not drift, do not depend on how their values are handed
// over, and give the same bits on every path whatever the layout.
#include "helpers.hpp"

namespace {

/// Sums of every path: eager, fg::jit, and (a sum over all dims or the last one) fg::compile
/// with both backends.
template <class F>
std::vector<tf> sum_paths(F f, const tf& x, bool compiles = true) {
  if (!compiles) return {f(x), fg::jit(f)(x)};
  return {f(x), fg::jit(f)(x), fg::compile<fg::backend::fused>(f)(x), fg::compile<fg::backend::aot_eager>(f)(x)};
}

/// `n` copies of `v` summed exactly, rounded to float.
float exact(float v, double n) { return static_cast<float>(static_cast<double>(v) * n); }

/// Within `ulps` units in the last place of `want`.
bool near(float got, float want, int ulps) {
  const double ulp = std::nextafter(std::abs(want), f_inf) - std::abs(want);
  return std::abs(static_cast<double>(got) - want) <= ulps * ulp;
}

}  // namespace

TEST_CASE("regression: float sums do not drift, on every path") {
  SUBCASE("2^28 ones sum to 2^28 (a broadcast view: no memory)") {
    CHECK(fg::sum(fg::ones<float>({1}).expand({index_t{1} << 28})).item() == 268435456.0f);
  }
  SUBCASE("the mean of 2^24 values 0.1f is 0.1f to 2 ulps") {
    const tf x = fg::full<float>({index_t{1} << 24}, 0.1f);
    for (const tf& m : sum_paths([](auto a) { return fg::mean(a); }, x)) CHECK(near(m.item(), 0.1f, 2));
  }
  SUBCASE("sums over dims, both layouts, and the gradient of a broadcast operand") {
    const index_t n = index_t{1} << 21;
    const float want = exact(0.1f, static_cast<double>(n));
    // Over the outer dim (outputs side by side) and over the inner one (outputs along rows).
    for (const tf& s : sum_paths([](auto a) { return fg::sum(a, 0); }, fg::full<float>({n, 3}, 0.1f), false))
      for (const float v : s.to_vector()) CHECK(near(v, want, 4));
    for (const tf& s : sum_paths([](auto a) { return fg::sum(a, -1); }, fg::full<float>({3, n}, 0.1f)))
      for (const float v : s.to_vector()) CHECK(near(v, want, 4));
    // b's gradient sums x over the rows it was broadcast along (sum_to).
    auto f = [](auto a, auto b) { return a * b; };
    const tf x = fg::full<float>({n, 3}, 0.1f);
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      tf b = fg::ones<float>({3}).requires_grad(true);
      const tf y = path == 0 ? f(x, b) : path == 1 ? fg::compile<fg::backend::fused>(f)(x, b) : fg::jit(f)(x, b);
      fg::sum(y).backward();
      for (const float v : b.grad().to_vector()) CHECK(near(v, want, 4));
    }
  }
}

TEST_CASE("regression: a sum does not depend on how its values are handed over") {
  // The same values fed whole, in tile-sized pieces, in odd pieces, one by one: the same bits.
  const auto v = fg::randn<float>({10007}, 3).to_vector();
  auto fed = [&](index_t piece) {
    fg::detail::running_sum<float> s;
    for (index_t i = 0; i < static_cast<index_t>(v.size()); i += piece)
      s.add(v.data() + i, std::min<index_t>(piece, static_cast<index_t>(v.size()) - i));
    return s.total();
  };
  const float whole = fed(static_cast<index_t>(v.size()));
  for (const index_t piece : {1, 3, 7, 31, 256, 1000}) CHECK(same(fed(piece), whole));
  double ref = 0;
  for (const float e : v) ref += e;
  CHECK(std::abs(whole - ref) < 1e-4);
}

TEST_CASE("regression: sums give the same bits on every path, whatever the layout") {
  // Full sums, sums over the last dim, means, and gradients of operands broadcast along
  // various dims (sum_to in eager mode, reductions inside fused loops, IR programs): every
  // path agrees bit for bit with eager mode.
  const tf x = fg::randn<float>({37, 5, 301}, 4);
  auto check = [&](const std::string& what, auto f) {
    CAPTURE(what);
    const auto r = sum_paths(f, x);
    for (std::size_t p = 1; p < r.size(); ++p) {
      CAPTURE(p);
      CHECK(first_difference(r[0], r[p]) == -1);
    }
  };
  check("sum", [](auto a) { return fg::sum(a); });
  check("mean", [](auto a) { return fg::mean(a); });
  check("sum over the last dim", [](auto a) { return fg::sum(a, -1); });
  check("mean over the last dim", [](auto a) { return fg::mean(a, -1, true); });
  check("sum of a product", [](auto a) { return fg::sum(a * a); });
  auto grads = [&](const std::string& what, const fg::shape& bs) {
    CAPTURE(what);
    auto f = [](auto a, auto b) { return fg::sin(a * b); };
    std::vector<tf> g;
    for (int path = 0; path < 4; ++path) {
      tf b = fg::randn<float>(bs, 5).requires_grad(true);
      const tf y = path == 0   ? f(x, b)
                   : path == 1 ? fg::compile<fg::backend::fused>(f)(x, b)
                   : path == 2 ? fg::compile<fg::backend::aot_eager>(f)(x, b)
                               : fg::jit(f)(x, b);
      fg::sum(y).backward();
      g.push_back(b.grad());
    }
    for (std::size_t p = 1; p < g.size(); ++p) {
      CAPTURE(p);
      CHECK(first_difference(g[0], g[p]) == -1);
    }
  };
  grads("b [301]: outputs side by side", {301});
  grads("b [5, 1]: outputs along rows, interleaved", {5, 1});
  grads("b [37, 1, 1]: each output a run of rows", {37, 1, 1});
  grads("b [5, 301]", {5, 301});
  grads("b [37, 1, 301]", {37, 1, 301});
  grads("b [1]: everything", {1});
}
