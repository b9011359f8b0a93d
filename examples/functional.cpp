// The functional transforms (docs/functional.md): gradients of scalar functions and of
// functions of ranges, forward mode, Hessian-vector products, and Newton's method on the
// 16-dimensional Rosenbrock function with fg::grad and fg::hessian. Run by the suite
// (example_functional): it fails unless Newton converges to (1, ..., 1).
#include <array>
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

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
    static_assert(fg::grad(poly)(2.0) == 10.0);           // 3x^2 - 2, at compile time
    static_assert(fg::grad(fg::grad(poly))(2.0) == 12.0);  // 6x: the backward differentiated again

    auto f = [](auto x, auto y) { return fg::sin(x) * y + x * x; };
    auto [value, grads] = fg::value_and_grad(f, fg::argnums<0, 1>)(0.5, 2.0);
    auto [dfdx, dfdy] = grads;                                   // 2 cos(0.5) + 1, sin(0.5)
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
  return 0;
}
