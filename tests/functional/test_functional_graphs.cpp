// The functional transforms on composite functions: the suite's 40-node function and
// cos(cos(x)) * y against eager; closed forms (normal log-density, log-sum-exp, Rosenbrock in
// 2 and 16 dimensions, a quadratic form); custom ops; slices; errors; and the allocation count
// of the caller-provided-output forms.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <span>
#include <type_traits>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "functional_ops.hpp"

namespace fg = fusegrad;

namespace {
std::atomic<long> allocations{0};
}  // namespace

// The replaced global operators pair malloc with free; GCC 12 warns about the free where it
// inlines the standard allocator's new into a caller (a false positive: both sides are these).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

using fusegrad_test::close;
using fusegrad_test::leaf;
using fusegrad_test::sample;

// The 40-node function of tests/compile/test_compile_40.cpp.
auto forty = [](auto x, auto y, auto z) {
  auto a = fg::sin(x) * y + z;
  auto b = fg::exp(-a * 0.5) + fg::cos(y);
  auto c = fg::tanh(a * b) - x / (fg::abs(z) + 1.0);
  auto d = fg::sigmoid(c) * fg::log(b + 2.0);
  auto e = fg::sqrt(fg::relu(d) + 1.0) * a;
  auto f = fg::maximum(e, c) + fg::pow(b, 2.0);
  auto g = fg::sin(f * y) + fg::cos(e - z);
  auto h = g * d + f / (b + 3.0);
  return fg::sum((h * x + fg::tanh(g) * 0.25) / 2.0);
};

auto rosenbrock = [](const auto& x) {
  const auto n = fg::size(x);
  const auto a = fg::slice(x, 0, n - 1), b = fg::slice(x, 1, n - 1);
  return fg::sum(100.0 * fg::pow(b - a * a, 2) + fg::pow(1.0 - a, 2));
};

struct cosine {  // a custom op: cos with its own backward
  static constexpr std::string_view name = "CosineBackward";
  static auto forward(const auto& x) { return fg::cos(x); }
  static auto setup_context(const auto& x, const auto&) { return fg::save_for_backward(x); }
  static auto backward(const auto& saved, const auto& g) {
    const auto& [x] = saved;
    return -fg::sin(x) * g;
  }
};

}  // namespace

TEST_CASE("the 40-node function: scalars and spans against eager") {
  const auto xs = sample(-1, 1, 53), ys = sample(-1, 1, 53, 0.3), zs = sample(-1, 1, 53, 0.6);
  const auto [v, g] = fg::value_and_grad(forty, fg::argnums<0, 1, 2>)(xs, ys, zs);
  auto tx = leaf(xs), ty = leaf(ys), tz = leaf(zs);
  auto y = forty(tx, ty, tz);
  y.backward();
  CHECK(close(v, y.item(), 1e-12));
  const auto gx = tx.grad().to_vector(), gy = ty.grad().to_vector(), gz = tz.grad().to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(close(std::get<0>(g)[i], gx[i], 1e-11));
    CHECK(close(std::get<1>(g)[i], gy[i], 1e-11));
    CHECK(close(std::get<2>(g)[i], gz[i], 1e-11));
    // the scalar form (a sum of one scalar is that scalar) at each element
    const auto gs = fg::grad(forty, fg::argnums<0, 1, 2>)(xs[i], ys[i], zs[i]);
    CHECK(close(std::get<0>(gs), gx[i], 1e-11));
    CHECK(close(std::get<2>(gs), gz[i], 1e-11));
  }
}

TEST_CASE("cos(cos(x)) * y in float: value_and_grad against eager, all lengths 0..70") {
  auto f = [](const auto& x, const auto& y) { return fg::sum(fg::cos(fg::cos(x)) * y); };
  for (int n = 0; n <= 70; ++n) {
    std::vector<float> xs(static_cast<std::size_t>(n)), ys(xs.size());
    for (int i = 0; i < n; ++i)
      xs[static_cast<std::size_t>(i)] = 0.37f * static_cast<float>(i) - 3.0f,
      ys[static_cast<std::size_t>(i)] = 1.0f + 0.01f * static_cast<float>(i);
    std::vector<float> gx(xs.size()), gy(xs.size());
    const float v = fg::value_and_grad(f, fg::argnums<0, 1>).into(std::span<float>(gx), std::span<float>(gy))(xs, ys);
    auto tx = fg::from_vector<float>(xs), ty = fg::from_vector<float>(ys);
    tx.requires_grad(true), ty.requires_grad(true);
    auto y = f(tx, ty);
    y.backward();
    CHECK(v == y.item());  // the same sum, bit for bit
    const auto ex = n ? tx.grad().to_vector() : std::vector<float>{},
               ey = n ? ty.grad().to_vector() : std::vector<float>{};
    for (int i = 0; i < n; ++i) {
      CHECK(gx[static_cast<std::size_t>(i)] == doctest::Approx(ex[static_cast<std::size_t>(i)]).epsilon(1e-6));
      CHECK(gy[static_cast<std::size_t>(i)] == ey[static_cast<std::size_t>(i)]);
    }
  }
}

// A slow op whose operand holds a slow op (cos(cos(x))) has that operand computed a tile ahead
// (functional/stages.hpp): which subexpressions are staged, and, over lengths on both sides of
// the tiles' and batches' boundaries, the same values and gradients as eager: every staged
// tree read back at its own batch.
namespace staging {
using x_t = fg::span_arg<0, float>;
using y_t = fg::span_arg<1, float>;
template <class E>
constexpr auto stages_of() {
  return fg::detail::fn::unique_stages<E>(fg::detail::fn::part_stages<0, E>());
}
using cc = decltype(fg::sum(fg::cos(fg::cos(x_t{})) * y_t{}));
using inner = decltype(fg::cos(x_t{}));
static_assert(std::is_same_v<decltype(stages_of<cc>()), fg::detail::type_list<fg::detail::fn::stage<1, inner, 0>>>,
              "cos(cos(x)) * y: the inner cos is computed a tile ahead");
using scs = decltype(fg::sum(fg::sin(fg::cos(fg::sin(x_t{})))));
static_assert(std::is_same_v<decltype(stages_of<scs>()),
                             fg::detail::type_list<fg::detail::fn::stage<1, decltype(fg::sin(x_t{})), 0>>>,
              "a chain of three slow ops: the innermost operand staged, no stage inside another");
using flat = decltype(fg::sum(fg::cos(x_t{}) * fg::sin(y_t{}) + fg::exp(x_t{} * 2.0f)));
static_assert(std::is_same_v<decltype(stages_of<flat>()), fg::detail::type_list<>>,
              "no slow op reads another: nothing staged");
using twice = decltype(fg::sum(fg::cos(fg::cos(x_t{})) * fg::cos(x_t{})));
static_assert(std::is_same_v<decltype(stages_of<twice>()), fg::detail::type_list<>>,
              "a subexpression whose type occurs twice is not staged (found by its type)");
}  // namespace staging

TEST_CASE_TEMPLATE("staged chains of slow ops: values and gradients equal eager across tiles", T, float, double) {
  auto chain2 = [](const auto& x, const auto& y) { return fg::sum(fg::cos(fg::cos(x)) * y); };
  auto chain3 = [](const auto& x, const auto& y) { return fg::sum(fg::sin(fg::cos(fg::sin(x))) * y + y); };
  // two reductions over different lengths: each runs a pass of its own (the stage of one is
  // skipped in the other's pass)
  auto part = [](const auto& v, fg::index_t start) {  // the elements from `start` to the last but one
    if constexpr (requires { v.numel(); }) return fg::narrow(v, 0, start, v.numel() - 1);
    else return fg::slice(v, start, fg::size(v) - 1);
  };
  auto two = [&](const auto& x, const auto& y) {
    return fg::sum(fg::cos(fg::cos(x)) * y) + fg::sum(fg::tanh(part(y, 1)) * part(x, 0));
  };
  const T tol = std::is_same_v<T, float> ? T(2e-6) : T(1e-14);
  auto check = [&](auto f, int n) {
    CAPTURE(n);
    const auto un = static_cast<std::size_t>(n);
    std::vector<T> xs(un), ys(un), gx(un, T(-9)), gy(un, T(-9));
    for (int i = 0; i < n; ++i)
      xs[static_cast<std::size_t>(i)] = T(0.37) * T(i % 97) - T(17.0),
      ys[static_cast<std::size_t>(i)] = T(1) + T(0.01) * T(i % 13);
    const T v = fg::value_and_grad(f, fg::argnums<0, 1>).into(std::span<T>(gx), std::span<T>(gy))(xs, ys);
    auto tx = fg::from_vector<T>(xs), ty = fg::from_vector<T>(ys);
    tx.requires_grad(true), ty.requires_grad(true);
    auto out = f(tx, ty);
    out.backward();
    CHECK(v == out.item());  // the same elements' values, the same sum: bit for bit
    for (int i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      CHECK(std::abs(gx[u] - tx.grad().data()[i]) <= tol * (1 + std::abs(tx.grad().data()[i])));
      CHECK(std::abs(gy[u] - ty.grad().data()[i]) <= tol * (1 + std::abs(ty.grad().data()[i])));
    }
  };
  for (int n : {2, 3, 7, 8, 9, 17, 255, 256, 257, 300, 511, 513, 1000}) {
    check(chain2, n);
    check(chain3, n);
    check(two, n);
  }
}

TEST_CASE("staged chains under forward mode: the jacobian of cos(cos(x)) against its closed form") {
  for (int n : {5, 300}) {
    const auto xs = sample(-3, 3, n);
    const auto j = fg::jacobian([](const auto& x) { return fg::cos(fg::cos(x)); })(xs);
    const auto un = static_cast<std::size_t>(n);
    REQUIRE(j.size() == un * un);
    for (std::size_t r = 0; r < un; r += 7) CHECK(close(j[r * un + r], std::sin(std::cos(xs[r])) * std::sin(xs[r])));
  }
}

// Calls of whole tiles sum two quantities at a time (`running_sum::add_each`: the chunks of two
// sums interleaved); every sum must keep the bits of its own running_sum, hence of eager's sum.
TEST_CASE("long calls: the value and two scalars' gradients equal eager bit for bit, double, several chunks") {
  auto f = [](const auto& x, auto s, auto t) { return fg::sum(fg::sin(x) * s + x * x * t); };
  for (int n : {255, 256, 257, 512, 1000, 4099}) {
    std::vector<double> xs(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) xs[static_cast<std::size_t>(i)] = std::sin(0.37 * i) * 9.0 - 0.1 * (i % 7);
    double gs = 0, gt = 0;
    const double v = fg::value_and_grad(f, fg::argnums<1, 2>).into(gs, gt)(std::span<const double>(xs), 1.7, -0.3);
    auto tx = fg::from_vector<double>(xs);
    auto ts = fg::full<double>({}, 1.7);
    auto tt = fg::full<double>({}, -0.3);
    ts.requires_grad(true);
    tt.requires_grad(true);
    auto y = fg::sum(fg::sin(tx) * ts + tx * tx * tt);
    y.backward();
    CAPTURE(n);
    CHECK(v == y.item());
    CHECK(gs == ts.grad().item());
    CHECK(gt == tt.grad().item());
  }
}

// Sums of short calls (at most `running_sum::lanes` elements: 16 doubles, 32 floats) are taken
// in registers (functional/engine.hpp): the same bits as eager's sum on either side of the
// boundary, for the value and for a scalar's gradient (itself a sum over the elements).
TEST_CASE("short and long calls: sums and scalar gradients equal eager bit for bit, double, lengths 0..40") {
  auto f = [](const auto& x, auto s) { return fg::sum(fg::sin(x) * s + x * x); };
  for (int n = 0; n <= 40; ++n) {
    std::vector<double> xs(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) xs[static_cast<std::size_t>(i)] = 0.731 * i - 7.3;
    std::vector<double> gx(xs.size());
    double gs = 0;
    const double v = fg::value_and_grad(f, fg::argnums<0, 1>).into(std::span<double>(gx), gs)(xs, 1.7);
    auto tx = fg::from_vector<double>(xs);
    auto ts = fg::full<double>({}, 1.7);
    ts.requires_grad(true);
    auto y = fg::sum(fg::sin(tx) * ts + tx * tx);
    y.backward();
    CAPTURE(n);
    CHECK(v == y.item());
    CHECK(gs == ts.grad().item());
  }
}

// The last, partial batch is read and written with masked loads and stores: nothing past a
// range's end is written (the gradients go to the front of a longer buffer of sentinels, the
// arguments sit at its end), and the values equal eager's.
TEST_CASE_TEMPLATE("a partial last batch writes only its lanes: gradients into the front of a longer buffer", T, float,
                   double) {
  auto f = [](const auto& x, const auto& y) { return fg::sum(fg::cos(x) * y + x * x); };
  for (int n = 1; n <= 21; ++n) {
    const auto un = static_cast<std::size_t>(n);
    std::vector<T> mem(2 * un + 16, T(7));  // x and y at the very end of the allocation
    std::span<T> x(mem.data() + mem.size() - 2 * un, un), y(mem.data() + mem.size() - un, un);
    for (int i = 0; i < n; ++i)
      x[static_cast<std::size_t>(i)] = T(0.3) * T(i) - T(2), y[static_cast<std::size_t>(i)] = T(1) + T(0.01) * T(i);
    std::vector<T> gx(un + 9, T(-5)), gy(un + 9, T(-5));
    const T v = fg::value_and_grad(f, fg::argnums<0, 1>)
                    .into(std::span<T>(gx.data(), un), std::span<T>(gy.data(), un))(std::span<const T>(x),
                                                                                    std::span<const T>(y));
    auto tx = fg::from_vector<T>(std::vector<T>(x.begin(), x.end())),
         ty = fg::from_vector<T>(std::vector<T>(y.begin(), y.end()));
    tx.requires_grad(true);
    ty.requires_grad(true);
    auto out = f(tx, ty);
    out.backward();
    CAPTURE(n);
    CHECK(v == out.item());
    for (int i = 0; i < n; ++i) {
      CHECK(gx[static_cast<std::size_t>(i)] == tx.grad().data()[i]);
      CHECK(gy[static_cast<std::size_t>(i)] == ty.grad().data()[i]);
    }
    for (std::size_t i = un; i < gx.size(); ++i) CHECK((gx[i] == T(-5) && gy[i] == T(-5)));
  }
}

// A scalar that only hoisted subexpressions read (`1 / sigma`, `log(sigma)`) gets its gradient
// through theirs, with no sum over the elements of its own; a scalar read both ways (`mu` in
// `(x - mu) * (1 / mu)`) gets both shares. Against eager, bit for bit, over several chunks.
TEST_CASE("scalars read inside and outside hoisted subexpressions: gradients equal eager bit for bit") {
  auto f = [](const auto& x, auto mu, auto sigma) {
    const auto d = x - mu;
    return -0.5 * fg::sum(d * d * (1.0 / sigma) * (1.0 / sigma)) - fg::log(sigma) + fg::sum(d * (1.0 / mu));
  };
  for (int n : {0, 1, 7, 255, 256, 1001, 4099}) {
    std::vector<double> xs(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) xs[static_cast<std::size_t>(i)] = std::sin(0.37 * i) * 3.1 + 0.2;
    double gm = 0, gsig = 0;
    const double v = fg::value_and_grad(f, fg::argnums<1, 2>).into(gm, gsig)(xs, 0.7, 1.9);
    auto tx = fg::from_vector<double>(xs);
    auto tm = fg::full<double>({}, 0.7), ts = fg::full<double>({}, 1.9);
    tm.requires_grad(true);
    ts.requires_grad(true);
    auto y = f(tx, tm, ts);
    y.backward();
    CAPTURE(n);
    CHECK(v == y.item());
    CHECK(gm == tm.grad().item());
    CHECK(gsig == ts.grad().item());
  }
}

// A cheap body with at most two summed quantities (the value and one scalar's gradient) sums
// whole chunks in registers, batch b into accumulator b % 4 (functional/engine.hpp): the same
// bits as eager's sum, on either side of chunk boundaries (256 doubles, 512 floats), for a
// sum, a mean, range gradients and a jvp's primal.
TEST_CASE_TEMPLATE("cheap bodies summed in registers: values and gradients equal eager bit for bit", T, float, double) {
  auto f = [](const auto& x, auto mu) { return fg::sum((x - mu) * (x - mu)); };
  auto g = [](const auto& x, auto mu) { return fg::mean(x * x - mu); };
  for (int n : {1, 255, 256, 257, 511, 512, 513, 1024, 1500, 2048, 4103}) {
    const auto un = static_cast<std::size_t>(n);
    std::vector<T> xs(un), ts(un);
    for (int i = 0; i < n; ++i)
      xs[static_cast<std::size_t>(i)] = T(std::sin(0.37 * i) * 3.1 + 0.2),
      ts[static_cast<std::size_t>(i)] = T(std::cos(0.11 * i));
    const T mu = T(0.7);
    std::vector<T> gx(un), gx2(un);
    T gm = 0, gm2 = 0;
    const T v = fg::value_and_grad(f, fg::argnums<0, 1>).into(std::span<T>(gx), gm)(std::span<const T>(xs), mu);
    const T v2 = fg::value_and_grad(g, fg::argnums<0, 1>).into(std::span<T>(gx2), gm2)(std::span<const T>(xs), mu);
    const auto [jv, jt] =
        fg::jvp([](const auto& x) { return fg::sum(x * x * x); }, std::span<const T>(xs), std::span<const T>(ts));
    auto run = [&](auto fn, const auto& tx, const auto& tm) {
      auto y = fn(tx, tm);
      y.backward();
      return y.item();
    };
    auto tx = fg::from_vector<T>(xs), tm = fg::full<T>({}, mu);
    tx.requires_grad(true), tm.requires_grad(true);
    CAPTURE(n);
    CHECK(v == run(f, tx, tm));
    CHECK(gm == tm.grad().item());
    for (std::size_t i = 0; i < un; ++i) CHECK(gx[i] == tx.grad().data()[i]);
    auto tx2 = fg::from_vector<T>(xs), tm2 = fg::full<T>({}, mu);
    tx2.requires_grad(true), tm2.requires_grad(true);
    CHECK(v2 == run(g, tx2, tm2));
    CHECK(gm2 == tm2.grad().item());
    for (std::size_t i = 0; i < un; ++i) CHECK(gx2[i] == tx2.grad().data()[i]);
    const auto ex = fg::from_vector<T>(xs);
    CHECK(jv == fg::sum(ex * ex * ex).item());
    T dot = 0;
    for (std::size_t i = 0; i < un; ++i) dot += T(3) * xs[i] * xs[i] * ts[i];
    CHECK(jt == doctest::Approx(dot).epsilon(std::is_same_v<T, float> ? 1e-4 : 1e-11));
  }
}

TEST_CASE("closed forms: normal log-density in mu and sigma; log-sum-exp (two passes); mean") {
  const auto xs = sample(-3, 5, 1001);
  auto logpdf = [](const auto& x, auto mu, auto sigma) {
    const auto z = (x - mu) / sigma;
    return -0.5 * fg::sum(z * z) - double(fg::size(x)) * (fg::log(sigma) + 0.9189385332046727);
  };
  const double mu = 0.7, sigma = 1.9;
  const auto [v, g] = fg::value_and_grad(logpdf, fg::argnums<1, 2>)(xs, mu, sigma);
  double s1 = 0, s2 = 0;
  for (double x : xs) s1 += x - mu, s2 += (x - mu) * (x - mu);
  const double n = double(xs.size());
  CHECK(close(v, -0.5 * s2 / (sigma * sigma) - n * (std::log(sigma) + 0.9189385332046727), 1e-12));
  CHECK(close(std::get<0>(g), s1 / (sigma * sigma), 1e-10));
  CHECK(close(std::get<1>(g), s2 / (sigma * sigma * sigma) - n / sigma, 1e-12));
  // second derivatives in a scalar beside a range: d2/dmu2 = -n / sigma^2, d2/dsigma2 = n/s^2 - 3 s2/s^4
  auto in_mu = [&](auto m, const auto& x, auto s) { return logpdf(x, m, s); };
  auto in_sigma = [&](auto s, const auto& x, auto m) { return logpdf(x, m, s); };
  CHECK(close(fg::hessian(in_mu)(mu, xs, sigma), -n / (sigma * sigma), 1e-12));
  CHECK(close(fg::hessian(in_sigma)(sigma, xs, mu), n / (sigma * sigma) - 3 * s2 / std::pow(sigma, 4), 1e-12));

  auto lse = [](const auto& x) { return fg::log(fg::sum(fg::exp(x))); };
  const auto [lv, lg] = fg::value_and_grad(lse)(xs);
  double se = 0;
  for (double x : xs) se += std::exp(x);
  CHECK(close(lv, std::log(se)));
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(close(lg[i], std::exp(xs[i]) / se, 1e-12));

  auto m = [](const auto& x) { return fg::mean(x * x); };
  const auto [mv, mg] = fg::value_and_grad(m)(xs);
  double sq = 0;
  for (double x : xs) sq += x * x;
  CHECK(close(mv, sq / n));
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(close(mg[i], 2 * xs[i] / n));
}

TEST_CASE("Rosenbrock in 2 and 16 dimensions, and a quadratic form: gradients and Hessians against closed forms") {
  auto rosen2 = [](auto x, auto y) { return (1.0 - x) * (1.0 - x) + 100.0 * (y - x * x) * (y - x * x); };
  const double x = -1.2, y = 1.1;
  const auto [gx, gy] = fg::grad(rosen2, fg::argnums<0, 1>)(x, y);
  CHECK(close(gx, -2 * (1 - x) - 400 * x * (y - x * x)));
  CHECK(close(gy, 200 * (y - x * x)));
  CHECK(close(fg::hessian(rosen2)(x, y), 2 - 400 * (y - x * x) + 800 * x * x));
  CHECK(close(fg::jvp(fg::grad(rosen2), std::tuple{x, y}, std::tuple{0.0, 1.0}).second, -400 * x));

  std::array<double, 16> p{};
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.3 * std::sin(1.7 * double(i)) + 0.5;
  const auto g = fg::grad(rosenbrock)(p);
  const auto H = fg::hessian(rosenbrock)(p);
  constexpr std::size_t n = 16;
  for (std::size_t i = 0; i < n; ++i) {
    double gi = 0, hii = 0;
    if (i + 1 < n)
      gi += -400 * p[i] * (p[i + 1] - p[i] * p[i]) - 2 * (1 - p[i]), hii += 1200 * p[i] * p[i] - 400 * p[i + 1] + 2;
    if (i > 0) gi += 200 * (p[i] - p[i - 1] * p[i - 1]), hii += 200;
    CHECK(close(g[i], gi));
    for (std::size_t j = 0; j < n; ++j) {
      const double hij = i == j ? hii : (j == i + 1 ? -400 * p[i] : (i == j + 1 ? -400 * p[j] : 0.0));
      CHECK(close(H[i][j], hij));
    }
    // and against differences of the gradient
    auto pp = p, pm = p;
    pp[i] += 1e-6, pm[i] -= 1e-6;
    const auto gp = fg::grad(rosenbrock)(pp), gm = fg::grad(rosenbrock)(pm);
    for (std::size_t j = 0; j < n; ++j)
      CHECK(std::abs(H[j][i] - (gp[j] - gm[j]) / 2e-6) <= 1e-4 * (1 + std::abs(H[j][i])));
  }
  const auto v = fg::hvp(rosenbrock)(p, g);
  for (std::size_t i = 0; i < n; ++i) {
    double r = 0;
    for (std::size_t j = 0; j < n; ++j) r += H[i][j] * g[j];
    CHECK(close(v[i], r, 1e-11));
  }

  // 1/2 x'Ax with A tridiagonal (diagonal d, off-diagonal o): two reductions of different lengths
  auto quad = [](const auto& x, const auto& d, const auto& o) {
    const auto m = fg::size(x) - 1;
    return 0.5 * fg::sum(d * x * x) + fg::sum(o * fg::slice(x, 0, m) * fg::slice(x, 1, m));
  };
  const auto d = sample(1, 3, 9), o = sample(-1, 1, 8, 0.4), xs = sample(-1, 1, 9, 0.8);
  const auto hq = fg::hessian(quad)(xs, d, o);
  const auto gq = fg::grad(quad)(xs, d, o);
  for (std::size_t i = 0; i < 9; ++i) {
    double r = d[i] * xs[i] + (i < 8 ? o[i] * xs[i + 1] : 0.0) + (i > 0 ? o[i - 1] * xs[i - 1] : 0.0);
    CHECK(close(gq[i], r));
    for (std::size_t j = 0; j < 9; ++j)
      CHECK(hq[i * 9 + j] == (i == j ? d[i] : (j == i + 1 ? o[i] : (i == j + 1 ? o[j] : 0.0))));
  }
}

TEST_CASE("custom ops (fg::function) under every transform") {
  auto f = [](const auto& x) { return fg::function<cosine>::apply(x) * x; };
  auto fs = [f](const auto& x) { return fg::sum(f(x)); };
  const double x = 0.8;
  CHECK(close(fg::grad(f)(x), std::cos(x) - x * std::sin(x)));
  CHECK(close(fg::jvp(f, x, 2.0).second, 2 * (std::cos(x) - x * std::sin(x))));
  CHECK(close(fg::hessian(f)(x), -2 * std::sin(x) - x * std::cos(x)));
  CHECK(close(fg::grad(fg::grad(f))(x), -2 * std::sin(x) - x * std::cos(x)));
  const auto xs = sample(-2, 2, 19);
  const auto g = fg::grad(fs)(xs);
  const auto hv = fg::hvp(fs)(xs, xs);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(close(g[i], std::cos(xs[i]) - xs[i] * std::sin(xs[i])));
    CHECK(close(hv[i], (-2 * std::sin(xs[i]) - xs[i] * std::cos(xs[i])) * xs[i]));
  }
}

TEST_CASE("errors: ranges of different lengths, slices out of range, outputs of the wrong size") {
  auto f = [](const auto& x, const auto& y) { return fg::sum(x * y); };
  std::vector<double> a(5, 1.0), b(6, 1.0), out(4);
  CHECK_THROWS_WITH_AS(fg::grad(f)(a, b), doctest::Contains("ranges of 5 and 6 elements"), fg::error);
  CHECK_THROWS_WITH_AS(fg::grad([](const auto& x) { return fg::sum(fg::slice(x, 2, 4)); })(a),
                       doctest::Contains("elements [2, 6) of an argument of 5 elements"), fg::error);
  CHECK_THROWS_WITH_AS(fg::grad(f).into(std::span<double>(out))(a, a), doctest::Contains("an output of 4 elements"),
                       fg::error);
}

TEST_CASE("the caller-provided-output forms allocate nothing") {
  auto f = [](const auto& x, const auto& y) { return fg::sum(fg::cos(fg::cos(x)) * y); };
  std::vector<float> x(1000, 0.5f), y(1000, 2.0f), gx(1000), gy(1000);
  std::vector<double> p(16, 0.5), hv(16), dir(16, 1.0);
  auto vg = fg::value_and_grad(f, fg::argnums<0, 1>).into(std::span<float>(gx), std::span<float>(gy));
  auto h = fg::hvp(rosenbrock);
  // data (fg::data) with scalar arguments only, and an element x[i]: the span engine, into a
  // caller's outputs
  double gs = 0, gr = 0;
  auto vd = fg::value_and_grad([&y](auto s, auto r) { return fg::exp(-r) * fg::mean(fg::relu(s * fg::data(y) - 1.0)); },
                               fg::argnums<0, 1>)
                .into(gs, gr);
  std::vector<double> gp(16);
  auto ve = fg::value_and_grad([](const auto& x) { return fg::sum(x[0] * x); }).into(std::span<double>(gp));
  float v = vg(x, y);  // warm-up
  const long before = allocations.load();
  for (int r = 0; r < 10; ++r) {
    v += vg(std::span<const float>(x), std::span<const float>(y));
    v += vd(0.75f, 0.05f) + ve(p) * 0;
    h.into(hv)(p, dir);
    v += static_cast<float>(fg::grad([](auto a, auto b) { return a * fg::exp(b); }, fg::argnums<1>)(1.5, 0.5));
  }
  CHECK(allocations.load() == before);
  CHECK(std::isfinite(v));
}

// The eager fixed cost: recording an element-wise op that saves nothing (add, sub, neg, a
// scalar op) makes no heap allocation: the node, its edges, the output and its buffer come
// from the thread's pools, and the node holds no list of saved tensors and no input shapes
// (it sums each gradient to its input's shape from its edges). Failed before (one allocation
// per op: the list of three undefined saved tensors).
TEST_CASE("recording an element-wise op that saves nothing allocates nothing") {
  auto a = fg::full<float>({10}, 1.5f).requires_grad(true);
  auto b = fg::full<float>({10}, 0.5f).requires_grad(true);
  auto bias = fg::full<float>({1, 10}, 2.0f).requires_grad(true);
  auto m = fg::full<float>({3, 10}, 1.0f);
  float v = (a + b - a).data()[0] + (-(a * 2.0f + 1.0f)).data()[0] + (m + bias).data()[0];  // warm-up
  const long before = allocations.load();
  for (int r = 0; r < 10; ++r) {
    v += (a + b - a).data()[0];
    v += (-(a * 2.0f + 1.0f)).data()[0];
    v += (m + bias).data()[0];  // broadcasting: the node holds no shapes either
  }
  CHECK(allocations.load() == before);
  CHECK(v == doctest::Approx(11 * (0.5f - 4.0f + 3.0f)));
  // The gradients, summed to each input's shape (the bias over the broadcast rows).
  fg::sum((m + bias) * (a + b - a)).backward();
  for (float g : bias.grad().to_vector()) CHECK(g == 3 * 0.5f);
  for (float g : b.grad().to_vector()) CHECK(g == 3 * 3.0f);
  for (float g : a.grad().to_vector()) CHECK(g == 0.0f);
}

TEST_CASE("fg::tensor arguments: gradients as tensors, nothing on the tape, under no_grad too") {
  auto f = [](const auto& x, const auto& y) { return fg::sum(fg::cos(fg::cos(x)) * y); };
  const auto xs = sample(-2, 2, 12), ys = sample(-1, 1, 12, 0.5);
  auto x = fg::from_vector<double>(xs).reshape({3, 4}), y = fg::from_vector<double>(ys).reshape({3, 4});
  auto [v, g] = fg::value_and_grad(f, fg::argnums<0, 1>)(x, y);
  const auto& [gx, gy] = g;
  CHECK(gx.shape() == fg::shape{3, 4});
  CHECK(!gx.requires_grad());
  auto tx = leaf(xs), ty = leaf(ys);
  auto ye = f(tx, ty);
  ye.backward();
  CHECK(close(v, ye.item()));
  const auto ex = tx.grad().to_vector(), ey = ty.grad().to_vector(), fx = gx.to_vector(), fy = gy.to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(close(fx[i], ex[i]));
    CHECK(close(fy[i], ey[i]));
  }
  {
    fg::no_grad ng;
    auto r = leaf(xs);
    const auto gr = fg::grad([](const auto& a) { return fg::sum(a * a); })(r);
    CHECK(!r.grad().defined());  // nothing accumulated, nothing recorded
    CHECK(close(gr.to_vector()[3], 2 * xs[3]));
  }
  auto t = fg::from_vector<double>(xs).reshape({3, 4}).transpose(0, 1);
  CHECK_THROWS_AS(fg::grad([](const auto& a) { return fg::sum(a); })(t), fg::error);  // not contiguous
}

TEST_CASE("jacobian (element-wise and scalar outputs) and jvp of a reduction, against closed forms") {
  const auto xs = sample(-1, 1, 7);
  const auto j = fg::jacobian([](const auto& x) { return fg::exp(x) * fg::sin(x); })(xs);
  REQUIRE(j.size() == 49);
  for (std::size_t r = 0; r < 7; ++r)
    for (std::size_t c = 0; c < 7; ++c)
      CHECK(close(j[r * 7 + c], r == c ? std::exp(xs[r]) * (std::sin(xs[r]) + std::cos(xs[r])) : 0.0));
  auto s = [](const auto& x) { return fg::sum(x * x * x); };
  const auto js = fg::jacobian(s)(xs);  // 1 x 7: the gradient
  const auto ts = sample(-1, 1, 7, 0.5);
  double dot = 0;
  for (std::size_t c = 0; c < 7; ++c) {
    CHECK(close(js[c], 3 * xs[c] * xs[c]));
    dot += 3 * xs[c] * xs[c] * ts[c];
  }
  const auto [v, t] = fg::jvp(s, std::span<const double>(xs), std::span<const double>(ts));
  CHECK(close(t, dot));
  double v3 = 0;
  for (double x : xs) v3 += x * x * x;
  CHECK(close(v, v3));
}

TEST_CASE("regression: a pullback keeps scalar primals by value (it held references to temporaries)") {
  auto f = [](auto x, auto y) { return fg::cos(x) * y; };
  auto [y, pb] = fg::vjp(f, 0.5, 2.0);
  volatile double clobber[64];
  for (auto& c : clobber) c = -1.0;
  const auto [gx, gy] = pb(1.0);
  CHECK(close(y, std::cos(0.5) * 2.0));
  CHECK(close(gx, -std::sin(0.5) * 2.0));
  CHECK(close(gy, std::cos(0.5)));
}

// The scalar form keeps its adjoints in place (functional/call.hpp, `array_sink`): the first
// contribution is assigned, later ones added, and an argument nothing reaches gets +0, as
// when the adjoints were a tuple that grew: the signs of zero tell the difference.
TEST_CASE("scalar gradients: first contributions assigned, unreached arguments +0, duals and expressions alike") {
  auto only_x = [](auto x, auto) { return x * x; };
  const auto [gx, gy] = fg::grad(only_x, fg::argnums<0, 1>)(3.0, 5.0);
  CHECK(gx == 6.0);
  CHECK(gy == 0.0);
  CHECK_FALSE(std::signbit(gy));  // +0: no contribution
  auto times_neg_zero = [](auto x) { return x * -0.0; };
  const double g0 = fg::grad(times_neg_zero)(2.0);
  CHECK(g0 == 0.0);
  CHECK(std::signbit(g0));  // -0, assigned: an accumulator started at +0 would give +0
  auto two_paths = [](auto x) { return x * -0.0 + x * -0.0; };
  CHECK(std::signbit(fg::grad(two_paths)(2.0)));  // -0 + -0
  // second order through duals (hvp of a scalar function) and through expressions (grad of grad)
  auto cube = [](auto x) { return x * x * x; };
  CHECK(fg::hessian(cube)(2.0) == 12.0);
  CHECK(fg::grad(fg::grad(cube))(2.0) == 12.0);
  static_assert(fg::grad(fg::grad([](auto x) { return x * x * x - 2.0 * x; }))(2.0) == 12.0);
}
