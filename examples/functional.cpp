// The functional transforms (docs/functional.md): gradients of scalar functions and of
// functions of ranges, forward mode, Hessian-vector products, and Newton's method on the
// 16-dimensional Rosenbrock function with fg::grad and fg::hessian; maximum likelihood with
// fg::normal_lpdf; a Jacobian of an output built with fg::concat; and on eager tensors, a
// gradient-penalty step with fg::autograd::grad(..., {.create_graph = true}). Run by the
// suite (example_functional): it fails unless Newton converges to (1, ..., 1) and the
// penalty's gradient matches finite differences.
#include <array>
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include <fusegrad/fusegrad.hpp>
#include <fusegrad/functional.hpp>

namespace fg = fusegrad;

// [functional-rosenbrock]
// sum over i of 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2, written once, for any n
auto rosenbrock = [](const auto& x) {
  const auto n = fg::size(x);
  const auto a = fg::slice(x, 0, n - 1), b = fg::slice(x, 1, n - 1);  // x[i], x[i+1]
  return fg::sum(100.0 * fg::pow(b - a * a, 2) + fg::pow(1.0 - a, 2));
};
// [functional-rosenbrock]

namespace {

/// Solves (H + lambda I) d = g by Cholesky; false if the matrix is not positive definite.
template <std::size_t N>
bool solve(std::array<std::array<double, N>, N> h, double lambda, const std::array<double, N>& g,
           std::array<double, N>& d) {
  for (std::size_t i = 0; i < N; ++i) h[i][i] += lambda;
  for (std::size_t j = 0; j < N; ++j) {
    double s = h[j][j];
    for (std::size_t k = 0; k < j; ++k) s -= h[j][k] * h[j][k];
    if (s <= 0) return false;
    h[j][j] = std::sqrt(s);
    for (std::size_t i = j + 1; i < N; ++i) {
      double t = h[i][j];
      for (std::size_t k = 0; k < j; ++k) t -= h[i][k] * h[j][k];
      h[i][j] = t / h[j][j];
    }
  }
  std::array<double, N> y{};
  for (std::size_t i = 0; i < N; ++i) {
    double t = g[i];
    for (std::size_t k = 0; k < i; ++k) t -= h[i][k] * y[k];
    y[i] = t / h[i][i];
  }
  for (std::size_t i = N; i-- > 0;) {
    double t = y[i];
    for (std::size_t k = i + 1; k < N; ++k) t -= h[k][i] * d[k];
    d[i] = t / h[i][i];
  }
  return true;
}

}  // namespace

int main() {
  {
    // [functional-scalar]
    constexpr auto poly = [](auto x) { return x * x * x - 2.0 * x; };
    static_assert(fg::grad(poly)(2.0) == 10.0);            // 3x^2 - 2, at compile time
    static_assert(fg::grad(fg::grad(poly))(2.0) == 12.0);  // 6x: the backward differentiated again

    auto f = [](auto x, auto y) { return fg::sin(x) * y + x * x; };
    auto [value, grads] = fg::value_and_grad(f, fg::argnums<0, 1>)(0.5, 2.0);
    auto [dfdx, dfdy] = grads;                                              // 2 cos(0.5) + 1, sin(0.5)
    auto [y, dy] = fg::jvp(f, std::tuple{0.5, 2.0}, std::tuple{1.0, 0.0});  // forward mode: dy == dfdx
    // [functional-scalar]
    std::printf("f = %.6f, df/dx = %.6f, df/dy = %.6f, jvp = %.6f\n", value, dfdx, dfdy, dy);
    if (std::abs(dfdx - (2 * std::cos(0.5) + 1)) > 1e-15 || std::abs(dy - dfdx) > 1e-15 || y != value) return 1;
  }
  {
    // [functional-spans]
    auto f = [](const auto& x, const auto& y) { return fg::sum(fg::cos(fg::cos(x)) * y); };
    std::vector<float> x(1000, 0.5f), y(1000, 2.0f), gx(1000), gy(1000);
    auto step = fg::value_and_grad(f, fg::argnums<0, 1>).into(std::span<float>(gx), std::span<float>(gy));
    float v = step(x, y);  // one pass over the elements; writes gx, gy; allocates nothing
    // [functional-spans]
    std::printf("sum(cos(cos(x)) * y) = %.3f, gx[0] = %.6f, gy[0] = %.6f\n", v, gx[0], gy[0]);
    if (std::abs(gy[0] - std::cos(std::cos(0.5f))) > 1e-6f) return 1;
  }
  {
    // [functional-newton]
    constexpr std::size_t n = 16;
    std::array<double, n> x{};
    for (std::size_t i = 0; i < n; ++i) x[i] = -1.2 + 0.1 * double(i % 3);  // far from the minimum
    int it = 0;
    for (; it < 100; ++it) {
      const auto [fx, g] = fg::value_and_grad(rosenbrock)(x);
      double gnorm = 0;
      for (double gi : g) gnorm = std::max(gnorm, std::abs(gi));
      if (gnorm < 1e-10) break;
      const auto h = fg::hessian(rosenbrock)(x);  // 16 Hessian-vector products
      // damped Newton: (H + lambda I) d = g, lambda grows until the step decreases f
      for (double lambda = 0; lambda < 1e12; lambda = lambda ? 10 * lambda : 1e-3) {
        std::array<double, n> d{}, trial{};
        if (!solve(h, lambda, g, d)) continue;
        for (std::size_t i = 0; i < n; ++i) trial[i] = x[i] - d[i];
        if (fg::value_and_grad(rosenbrock)(trial).first < fx) {
          x = trial;
          break;
        }
      }
    }
    // [functional-newton]
    double err = 0;
    for (double xi : x) err = std::max(err, std::abs(xi - 1.0));
    std::printf("Newton on the 16-D Rosenbrock function: %d iterations, max |x - 1| = %.2e\n", it, err);
    if (err > 1e-8) return 1;
  }
  {
    // [functional-hvp]
    std::array<double, 16> x{}, v{}, hv{};
    x.fill(0.5), v.fill(1.0);
    fg::hvp(rosenbrock).into(hv)(x, v);  // H(x) v by forward over reverse, one pass
    // [functional-hvp]
    std::printf("(H v)[0] = %.3f\n", hv[0]);
    if (std::abs(hv[0] - (1200 * 0.25 - 400 * 0.5 + 2 - 400 * 0.5)) > 1e-9) return 1;
  }
  {
    // [functional-jacobian]
    // f: R^3 -> R^4, f(x) = [x0 x1, x1 x2, sin(x2), x0 + x1 + x2]: x[i] is one element (a
    // scalar), fg::concat builds the output from parts of any lengths
    auto f = [](const auto& x) { return fg::concat(x[0] * x[1], x[1] * x[2], fg::sin(x[2]), fg::sum(x)); };
    const std::vector<double> x{0.5, -1.25, 2.0};
    const std::vector<double> j = fg::jacobian(f)(x);  // 4 x 3, row-major: one jvp per column
    // [functional-jacobian]
    std::printf("Jacobian row 0: %.6f %.6f %.6f\n", j[0], j[1], j[2]);
    const double expect[12] = {x[1], x[0], 0, 0, x[2], x[1], 0, 0, std::cos(x[2]), 1, 1, 1};
    for (int k = 0; k < 12; ++k)
      if (j.size() != 12 || std::abs(j[k] - expect[k]) > 1e-15) return 1;
    // [functional-broadcast]
    // x[0] broadcast over x: sum(x0 x) + x2 x3, its gradient summed into element 0
    auto g = fg::grad([](const auto& x) { return fg::sum(x[0] * x) + x[2] * x[3]; })(std::array{1.0, 2.0, 3.0, 4.0});
    // g = {sum(x) + x0, x0 + 0, x0 + x3, x0 + x2} = {11, 1, 5, 4}
    // [functional-broadcast]
    if (g != std::array{11.0, 1.0, 5.0, 4.0}) return 1;
  }
  {
    std::vector<double> data(10000);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = 3.0 + 0.5 * std::sin(0.7 * double(i)) + 0.1 * double(i % 7);
    // [functional-normal-lpdf]
    // Maximum likelihood for a normal sample: the log-density of the data in (mu, log sigma).
    // Each gradient is one pass over the data (the sums of x - mu and of its square); the
    // Fisher-scaled ascent lands on the sample's mean and standard deviation.
    auto loglik = [](const auto& x, auto mu, auto log_sigma) { return fg::normal_lpdf(x, mu, fg::exp(log_sigma)); };
    double mu = 0, log_sigma = 0, g_mu = 0, g_log_sigma = 0;
    auto step = fg::value_and_grad(loglik, fg::argnums<1, 2>).into(g_mu, g_log_sigma);
    const double n = double(data.size());
    for (int it = 0; it < 100; ++it) {
      step(std::span<const double>(data), mu, log_sigma);
      mu += std::exp(2 * log_sigma) * g_mu / n;  // the inverse Fisher information: sigma^2 / n
      log_sigma += g_log_sigma / (2 * n);        // and 1 / (2 n)
    }
    // [functional-normal-lpdf]
    double mean = 0, var = 0;
    for (double v : data) mean += v / n;
    for (double v : data) var += (v - mean) * (v - mean) / n;
    std::printf("normal MLE: mu = %.6f (sample mean %.6f), sigma = %.6f (sample std %.6f)\n", mu, mean,
                std::exp(log_sigma), std::sqrt(var));
    if (std::abs(mu - mean) > 1e-9 || std::abs(std::exp(log_sigma) - std::sqrt(var)) > 1e-9) return 1;
  }
  {
    // [functional-gradient-penalty]
    // A critic D(x) = sum(tanh(x W) v) and the penalty E[(|dD/dx| - 1)^2] of WGAN-GP: the
    // gradient in x is taken with create_graph, so the penalty differentiates through it.
    fg::tensor<double> w = fg::randn<double>({4, 8}, 3).requires_grad(true);
    fg::tensor<double> v = fg::randn<double>({8, 1}, 4).requires_grad(true);
    const fg::tensor<double> x = fg::randn<double>({16, 4}, 5).requires_grad(true);  // a batch
    auto penalty = [&] {
      const auto d = fg::sum(fg::mm(fg::tanh(fg::mm(x, w)), v));
      const auto gx = fg::autograd::grad(d, x, {.create_graph = true});  // [16, 4], on the tape
      const auto norm = fg::sqrt(fg::sum(gx * gx, 1));                   // per sample
      return fg::mean((norm - 1.0) * (norm - 1.0));
    };
    fg::nn::sgd<double> opt({w, v}, 0.05);
    const double before = penalty().item();
    for (int step = 0; step < 50; ++step) {
      w.zero_grad(), v.zero_grad();
      penalty().backward();  // into w.grad() and v.grad(), through dD/dx
      opt.step();
    }
    const double after = penalty().item();
    // [functional-gradient-penalty]
    std::printf("gradient penalty: %.4f -> %.4f after 50 steps\n", before, after);
    if (!(after < 0.5 * before)) return 1;
    // The penalty's gradient in w against central differences.
    w.zero_grad();
    penalty().backward();
    const double analytic = w.grad().at({1, 2});
    double* p = w.data();
    const double orig = p[1 * 8 + 2], eps = 1e-6;
    p[1 * 8 + 2] = orig + eps;
    const double up = penalty().item();
    p[1 * 8 + 2] = orig - eps;
    const double down = penalty().item();
    p[1 * 8 + 2] = orig;
    const double numeric = (up - down) / (2 * eps);
    std::printf("d penalty / d w[1, 2]: %.9f (central differences %.9f)\n", analytic, numeric);
    if (std::abs(analytic - numeric) > 1e-6 * (1 + std::abs(numeric))) return 1;
  }
  return 0;
}
