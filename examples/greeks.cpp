// Monte Carlo Greeks of a European call under Black-Scholes (docs/functional.md, "Data: Monte
// Carlo Greeks"): 200,000 standard normal draws, captured by the pricing function as data
// (fg::data: read element-wise, not differentiated); fg::value_and_grad gives the price and
// its pathwise derivatives in the spot, the volatility, the rate and the maturity (delta, vega,
// rho and minus theta) in one pass over the draws; fg::jvp with argnums gives each path's
// derivative, for the standard errors. Run by the suite (example_greeks): it fails unless each
// estimate is within 4 standard errors of the closed-form Black-Scholes value.
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <tuple>
#include <vector>

#include <fusegrad/functional.hpp>

namespace fg = fusegrad;

namespace {

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi); }

/// The mean of `v` and its standard error.
std::pair<double, double> mean_and_error(const std::vector<double>& v) {
  double s = 0, s2 = 0;
  for (double x : v) s += x, s2 += x * x;
  const double n = double(v.size()), m = s / n;
  return {m, std::sqrt((s2 / n - m * m) / (n - 1))};
}

}  // namespace

int main() {
  const double s0 = 100, sigma = 0.2, r = 0.05, t = 1.0;
  // [greeks-price]
  std::vector<double> z(200'000);  // the draws: standard normals from a fixed seed
  std::mt19937_64 gen(2024);
  std::normal_distribution<double> normal;
  for (double& zi : z) zi = normal(gen);
  const double strike = 100;  // a number the function captures: a constant of its expression

  // Each path's discounted payoff, exp(-r T) max(S_T - K, 0) with
  // S_T = S0 exp((r - sigma^2 / 2) T + sigma sqrt(T) z): the draws enter as data.
  auto payoff = [&](auto s0, auto sigma, auto r, auto t) {
    const auto st = s0 * fg::exp((r - 0.5 * sigma * sigma) * t + sigma * fg::sqrt(t) * fg::data(z));
    return fg::exp(-r * t) * fg::relu(st - strike);
  };
  auto price = [&](auto s0, auto sigma, auto r, auto t) { return fg::mean(payoff(s0, sigma, r, t)); };

  // the price and its four pathwise derivatives, one pass over the draws
  const auto [value, grads] = fg::value_and_grad(price, fg::argnums<0, 1, 2, 3>)(s0, sigma, r, t);
  const auto [delta, vega, rho, dv_dt] = grads;  // theta = -dv_dt
  // [greeks-price]

  // [greeks-per-path]
  // Each path's derivative in one parameter (forward mode: a tangent for it alone; the other
  // parameters and the draws need none), for the standard errors of the means above.
  const std::tuple params{s0, sigma, r, t};
  const auto [paths, d_sigma] = fg::jvp(payoff, fg::argnums<1>, params, std::tuple{1.0});
  // [greeks-per-path]
  const std::vector<double> per_path[5] = {paths, fg::jvp(payoff, fg::argnums<0>, params, std::tuple{1.0}).second,
                                           d_sigma, fg::jvp(payoff, fg::argnums<2>, params, std::tuple{1.0}).second,
                                           fg::jvp(payoff, fg::argnums<3>, params, std::tuple{1.0}).second};

  // Black-Scholes in closed form
  const double sq = std::sqrt(t), d1 = (std::log(s0 / strike) + (r + 0.5 * sigma * sigma) * t) / (sigma * sq),
               d2 = d1 - sigma * sq, disc = std::exp(-r * t);
  const double exact[5] = {s0 * normal_cdf(d1) - strike * disc * normal_cdf(d2),                          // price
                           normal_cdf(d1),                                                                // delta
                           s0 * normal_pdf(d1) * sq,                                                      // vega
                           strike * t * disc * normal_cdf(d2),                                            // rho
                           s0 * normal_pdf(d1) * sigma / (2 * sq) + r * strike * disc * normal_cdf(d2)};  // -theta
  const double estimate[5] = {value, delta, vega, rho, dv_dt};
  const char* names[5] = {"price", "delta", "vega", "rho", "-theta"};

  int failures = 0;
  std::printf("%-7s %12s %12s %12s %8s\n", "", "Monte Carlo", "closed form", "std error", "z-score");
  for (int k = 0; k < 5; ++k) {
    const auto [m, se] = mean_and_error(per_path[k]);
    const double zs = (estimate[k] - exact[k]) / se;
    std::printf("%-7s %12.6f %12.6f %12.6f %8.2f\n", names[k], estimate[k], exact[k], se, zs);
    // the transforms' mean is the per-path values' mean (up to the order of the sums)
    if (std::abs(m - estimate[k]) > 1e-9 * (1 + std::abs(m))) {
      std::printf("  %s: the mean of the per-path values (%.12f) differs from value_and_grad's\n", names[k], m);
      ++failures;
    }
    if (!(std::abs(zs) < 4)) {
      std::printf("  %s: more than 4 standard errors from the closed form\n", names[k]);
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}
