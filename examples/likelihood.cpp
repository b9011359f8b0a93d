// Maximum likelihood of a Student-t regression, y = a + b x + s ε with ε ~ t(ν), fitted with
// the tape and Adam on data simulated from known parameters; the negative log-likelihood uses
// lgamma and log1p:
//   -log p(y) = lgamma(ν/2) - lgamma((ν+1)/2) + ½ log(νπ) + log s + (ν+1)/2 log1p(r²/ν),
//   r = (y - a - b x) / s.
// Checked against the known answer: the fit recovers the true parameters (within their
// sampling error for 4,000 points), its gradient vanishes, and it is at least as likely as
// the true parameters. Fails (exit 1) otherwise.
#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;
using td = fg::tensor<double>;

int main() {
  const double a0 = 1.5, b0 = -2.0, s0 = 0.5, nu0 = 4.0;
  constexpr fg::index_t n = 4000;
  // t(4) noise: z / sqrt(χ²₄ / 4), χ²₄ the sum of four squared normals.
  const auto z = fg::randn<double>({n}, 11).to_vector(), c = fg::randn<double>({n, 4}, 12).to_vector();
  const auto xs = fg::rand<double>({n}, 13, -2.0, 2.0).to_vector();
  std::vector<double> ys(n);
  for (std::size_t i = 0; i < ys.size(); ++i) {
    double chi2 = 0;
    for (std::size_t k = 0; k < 4; ++k) chi2 += c[4 * i + k] * c[4 * i + k];
    ys[i] = a0 + b0 * xs[i] + s0 * z[i] / std::sqrt(chi2 / nu0);
  }
  const td x = fg::from_vector<double>(xs), y = fg::from_vector<double>(ys);

  // [likelihood]
  auto nll = [&](const td& a, const td& b, const td& log_s, const td& log_nu) {
    const td s = fg::exp(log_s), nu = fg::exp(log_nu);
    const td r = (y - (a + b * x)) / s;
    const td per_point = fg::lgamma(nu * 0.5) - fg::lgamma((nu + 1.0) * 0.5) + fg::log(nu * std::numbers::pi) * 0.5 +
                         log_s + (nu + 1.0) * 0.5 * fg::log1p(r * r / nu);
    return fg::mean(per_point);
  };
  td a = fg::scalar_tensor(0.0).requires_grad(true), b = fg::scalar_tensor(0.0).requires_grad(true);
  td log_s = fg::scalar_tensor(0.0).requires_grad(true), log_nu = fg::scalar_tensor(std::log(10.0)).requires_grad(true);
  fg::nn::adam<double> opt({a, b, log_s, log_nu}, {.lr = 0.05});
  for (int step = 0; step < 3000; ++step) {
    opt.zero_grad();
    nll(a, b, log_s, log_nu).backward();
    opt.step();
  }
  // [likelihood]

  opt.zero_grad();
  const td fit = nll(a, b, log_s, log_nu);
  fit.backward();
  double grad_norm = 0;
  for (const td& p : {a, b, log_s, log_nu}) grad_norm = std::max(grad_norm, std::abs(p.grad().item()));
  const double at_truth = nll(fg::scalar_tensor(a0), fg::scalar_tensor(b0), fg::scalar_tensor(std::log(s0)),
                              fg::scalar_tensor(std::log(nu0)))
                              .item();
  const double s = std::exp(log_s.item()), nu = std::exp(log_nu.item());
  std::printf("a = %.4f (true %.1f), b = %.4f (true %.1f), s = %.4f (true %.1f), nu = %.3f (true %.1f)\n", a.item(), a0,
              b.item(), b0, s, s0, nu, nu0);
  std::printf("nll %.6f at the fit, %.6f at the truth; largest |gradient| %.2e\n", fit.item(), at_truth, grad_norm);
  const bool ok = std::abs(a.item() - a0) < 0.05 && std::abs(b.item() - b0) < 0.05 && std::abs(s / s0 - 1) < 0.1 &&
                  std::abs(nu / nu0 - 1) < 0.35 && grad_norm < 1e-4 && fit.item() <= at_truth;
  if (!ok) std::printf("the fit does not match the known answer\n");
  return ok ? 0 : 1;
}
