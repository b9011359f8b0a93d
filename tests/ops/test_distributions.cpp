// fg::normal_lpdf: the general form on every path (eager tensors against closed forms and
// finite differences, fg::compile and fg::jit against eager), and the functional transforms'
// form on a range's statistics (ops::normal_lpdf_rule) against the general form, closed
// forms, finite differences, inside larger functions, and with bad scales.
#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

namespace {

std::vector<double> sample(int n, double shift = 0.3) {
  std::vector<double> x(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = std::sin(0.37 * i) * 2.1 + shift - 0.01 * (i % 5);
  return x;
}

/// The density and its gradients in mu and sigma by the definitions, in long double.
struct closed {
  long double v = 0, gm = 0, gs = 0;
  closed(const std::vector<double>& x, long double mu, long double sigma) {
    const long double c = 0.918938533204672741780329736406L;
    for (double xi : x) {
      const long double z = (xi - mu) / sigma;
      v += -0.5L * z * z - std::log(sigma) - c;
      gm += z / sigma;
      gs += z * z / sigma - 1 / sigma;
    }
  }
};

bool near(double a, long double b, double rel = 1e-12) {
  return std::abs(static_cast<long double>(a) - b) <= rel * (1 + std::abs(b));
}

}  // namespace

TEST_CASE("normal_lpdf, eager: value against the definition; gradcheck in x, mu and sigma") {
  const auto xs = sample(37);
  const closed want(xs, 0.4L, 1.9L);
  auto x = fg::from_vector<double>(xs);
  auto mu = fg::full<double>({}, 0.4), sigma = fg::full<double>({}, 1.9);
  x.requires_grad(true), mu.requires_grad(true), sigma.requires_grad(true);
  auto y = fg::normal_lpdf(x, mu, sigma);
  CHECK(y.shape().empty());
  CHECK(near(y.item(), want.v));
  y.backward();
  CHECK(near(mu.grad().item(), want.gm));
  CHECK(near(sigma.grad().item(), want.gs));
  const auto r = fg::gradcheck([](const auto& a, const auto& m, const auto& s) { return fg::normal_lpdf(a, m, s); },
                               x.detach(), mu.detach(), sigma.detach());
  CHECK(r.ok);
  // numbers for the parameters; a bad one is refused
  CHECK(near(fg::normal_lpdf(fg::from_vector<double>(xs), 0.4, 1.9).item(), want.v));
  CHECK_THROWS_WITH_AS(fg::normal_lpdf(fg::from_vector<double>(xs), 0.4, 0.0), doctest::Contains("normal_lpdf"),
                       fg::error);
}

TEST_CASE("normal_lpdf, fg::compile and fg::jit: equal eager") {
  const auto xs = sample(300);
  auto f = [](const auto& x, const auto& m, const auto& s) { return fg::normal_lpdf(x, m, s); };
  auto run = [&](auto&& g) {
    auto x = fg::from_vector<double>(xs);
    auto m = fg::full<double>({}, -0.2), s = fg::full<double>({}, 0.7);
    x.requires_grad(true), m.requires_grad(true), s.requires_grad(true);
    auto y = g(x, m, s);
    y.backward();
    return std::vector<double>{y.item(), m.grad().item(), s.grad().item(), x.grad().data()[7]};
  };
  const auto want = run(f);
  auto compiled = fg::compile(f);
  auto jitted = fg::jit(f);
  for (const auto& got : {run(compiled), run(jitted), run(jitted)})
    for (std::size_t k = 0; k < want.size(); ++k) CHECK(got[k] == doctest::Approx(want[k]).epsilon(1e-12));
}

TEST_CASE("normal_lpdf of a range in the functional transforms: against eager and the definition, all lengths") {
  auto f = [](const auto& x, auto mu, auto sigma) { return fg::normal_lpdf(x, mu, sigma); };
  for (int n : {0, 1, 2, 3, 4, 5, 7, 15, 16, 17, 33, 255, 256, 257, 300, 1000, 4103}) {
    CAPTURE(n);
    const auto xs = sample(n);
    std::vector<double> gx(xs.size(), 99.0);
    double gm = 0, gs = 0;
    const double v = fg::value_and_grad(f, fg::argnums<0, 1, 2>)
                         .into(std::span<double>(gx), gm, gs)(std::span<const double>(xs), 0.4, 1.9);
    const closed want(xs, 0.4L, 1.9L);
    CHECK(near(v, want.v));
    CHECK(near(gm, want.gm));
    CHECK(near(gs, want.gs));
    auto x = fg::from_vector<double>(xs);
    auto m = fg::full<double>({}, 0.4), s = fg::full<double>({}, 1.9);
    x.requires_grad(true), m.requires_grad(true), s.requires_grad(true);
    auto y = fg::normal_lpdf(x, m, s);
    CHECK(v == doctest::Approx(y.item()).epsilon(1e-13));
    if (n == 0) continue;
    y.backward();
    for (int i = 0; i < n; ++i)
      CHECK(gx[static_cast<std::size_t>(i)] == doctest::Approx(x.grad().data()[i]).epsilon(1e-13));
  }
}

TEST_CASE("normal_lpdf of a range: float, and the gradients against central differences") {
  auto f = [](const auto& x, auto mu, auto sigma) { return fg::normal_lpdf(x, mu, sigma); };
  const auto xd = sample(1001);
  std::vector<float> xf(xd.begin(), xd.end());
  const auto [vf, gmf, gsf] = [&] {
    float gm = 0, gs = 0;
    const float v = fg::value_and_grad(f, fg::argnums<1, 2>).into(gm, gs)(std::span<const float>(xf), 0.4f, 1.9f);
    return std::tuple{v, gm, gs};
  }();
  const closed want(std::vector<double>(xf.begin(), xf.end()), 0.4L, 1.9L);
  CHECK(near(vf, want.v, 1e-5));
  CHECK(near(gmf, want.gm, 1e-4));
  CHECK(near(gsf, want.gs, 1e-5));
  const double h = 1e-6;
  auto val = [&](double m, double s) {
    return fg::value_and_grad(f, fg::argnums<1>)(std::span<const double>(xd), m, s).first;
  };
  const auto [gm, gs] = fg::grad(f, fg::argnums<1, 2>)(std::span<const double>(xd), 0.4, 1.9);
  CHECK(gm == doctest::Approx((val(0.4 + h, 1.9) - val(0.4 - h, 1.9)) / (2 * h)).epsilon(1e-6));
  CHECK(gs == doctest::Approx((val(0.4, 1.9 + h) - val(0.4, 1.9 - h)) / (2 * h)).epsilon(1e-6));
}

// Statistics of ranges inside larger functions: parameters that are expressions of scalars, two
// ranges, a slice, a prior on mu (a scalar x: the general form), the range also read by an
// element-wise part (its gradient added to), and one inside an element-wise part (hoisted).
TEST_CASE("normal_lpdf of ranges inside larger functions: against eager") {
  auto f = [](const auto& x, const auto& y, auto mu, auto log_sigma) {
    const auto sigma = fg::exp(log_sigma);
    return fg::normal_lpdf(x, mu, sigma) + 0.5 * fg::normal_lpdf(fg::slice(y, 1, fg::size(y) - 1), mu * 2.0, 1.5) +
           fg::normal_lpdf(mu, 0.0, 10.0) - fg::sum(x * x) * 0.01 + fg::sum(y * fg::normal_lpdf(x, 0.1, sigma)) * 1e-3;
  };
  for (int n : {1, 9, 300}) {
    CAPTURE(n);
    const auto xs = sample(n), ys = sample(n + 1, -0.5);
    std::vector<double> gx(xs.size()), gy(ys.size());
    double gm = 0, gl = 0;
    const double v = fg::value_and_grad(f, fg::argnums<0, 1, 2, 3>)
                         .into(std::span<double>(gx), std::span<double>(gy), gm, gl)(xs, ys, 0.3, 0.2);
    auto x = fg::from_vector<double>(xs), y = fg::from_vector<double>(ys);
    auto m = fg::full<double>({}, 0.3), l = fg::full<double>({}, 0.2);
    x.requires_grad(true), y.requires_grad(true), m.requires_grad(true), l.requires_grad(true);
    const auto sigma = fg::exp(l);
    auto out = fg::normal_lpdf(x, m, sigma) + 0.5 * fg::normal_lpdf(y.slice(0, 1, n + 1), m * 2.0, 1.5) +
               fg::normal_lpdf(m, 0.0, 10.0) - fg::sum(x * x) * 0.01 +
               fg::sum(y * fg::normal_lpdf(x, 0.1, sigma)) * 1e-3;
    out.backward();
    CHECK(v == doctest::Approx(out.item()).epsilon(1e-12));
    CHECK(gm == doctest::Approx(m.grad().item()).epsilon(1e-11));
    CHECK(gl == doctest::Approx(l.grad().item()).epsilon(1e-11));
    for (int i = 0; i < n; ++i)
      CHECK(gx[static_cast<std::size_t>(i)] == doctest::Approx(x.grad().data()[i]).epsilon(1e-11));
    for (int i = 0; i <= n; ++i)
      CHECK(gy[static_cast<std::size_t>(i)] == doctest::Approx(y.grad().data()[i]).epsilon(1e-11));
  }
}

TEST_CASE("normal_lpdf of a range: a scale that is not positive is an error naming the op") {
  auto f = [](const auto& x, auto mu, auto sigma) { return fg::normal_lpdf(x, mu, sigma); };
  const auto xs = sample(10);
  for (double s : {0.0, -1.0, std::nan("")})
    CHECK_THROWS_WITH_AS(fg::grad(f, fg::argnums<1>)(std::span<const double>(xs), 0.0, s),
                         doctest::Contains("normal_lpdf: sigma = "), fg::error);
  auto g = [](const auto& x) { return fg::normal_lpdf(x, 0.0, -2.0); };
  CHECK_THROWS_WITH_AS(fg::grad(g)(std::span<const double>(xs)), doctest::Contains("expected a positive scale"),
                       fg::error);
}
