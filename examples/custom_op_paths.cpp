// A custom differentiable op written once and used on every path of one program: eagerly, in
// two fg::compile functions, in two fg::jit functions, and under gradcheck. Each path's value
// and gradient are checked against the op's closed form. (This is also the user TU of the
// compile-time budget: tools/compile_ratios.sh, docs/performance.md "Compile time and the build".)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <fusegrad/compile.hpp>
#include <fusegrad/jit.hpp>

namespace fg = fusegrad;

// softclip(x) = x / (1 + |x|), a smooth clip to (-1, 1); its derivative is 1 / (1 + |x|)^2.
struct Softclip {
  static constexpr std::string_view name = "SoftclipBackward";
  static auto forward(const auto& x) { return x / (fg::abs(x) + 1.0); }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [x] = saved;
    const auto d = fg::abs(x) + 1.0;
    return grad / (d * d);
  }
};
auto softclip(const auto& x) { return fg::function<Softclip>::apply(x); }

namespace {
double softclip_of(double x) { return x / (1 + std::abs(x)); }
double softclip_grad(double x) { return 1 / ((1 + std::abs(x)) * (1 + std::abs(x))); }

// The largest error of one path: out against softclip(x) * w (or its square for the second
// function), x's gradient against the closed form.
double check(const fg::tensor<double>& x, const fg::tensor<double>& w, const fg::tensor<double>& out, bool squared) {
  const auto xs = x.to_vector(), ws = w.to_vector(), os = out.to_vector(), gs = x.grad().to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double s = softclip_of(xs[i]);
    const double value = squared ? s * s * ws[i] : s * ws[i];
    const double grad = (squared ? 2 * s * ws[i] : ws[i]) * softclip_grad(xs[i]);
    worst = std::max({worst, std::abs(os[i] - value), std::abs(gs[i] - grad)});
  }
  return worst;
}
}  // namespace

int main() {
  auto scaled = [](auto x, auto w) { return softclip(x) * w; };
  auto squared = [](auto x, auto w) { return softclip(x) * softclip(x) * w; };
  const auto compiled_scaled = fg::compile(scaled);
  const auto compiled_squared = fg::compile(squared);
  const auto jitted_scaled =
      fg::jit([&](const fg::tensor<double>& x, const fg::tensor<double>& w) { return scaled(x, w); });
  const auto jitted_squared =
      fg::jit([&](const fg::tensor<double>& x, const fg::tensor<double>& w) { return squared(x, w); });

  double worst = 0;
  auto run = [&](const char* path, auto&& f, bool sq) {
    const fg::tensor<double> x = (fg::randn<double>({257}, 1) * 3.0).requires_grad(true);
    const fg::tensor<double> w = fg::randn<double>({257}, 2);
    const fg::tensor<double> out = f(x, w);
    fg::sum(out).backward();
    const double e = check(x, w, out, sq);
    std::printf("%-24s largest error %.3g\n", path, e);
    worst = std::max(worst, e);
  };
  run("eager", scaled, false);
  run("eager, squared", squared, true);
  run("fg::compile", compiled_scaled, false);
  run("fg::compile, squared", compiled_squared, true);
  run("fg::jit", jitted_scaled, false);
  run("fg::jit, squared", jitted_squared, true);

  const auto r = fg::gradcheck([](const auto& x) { return softclip(x); }, fg::randn<double>({4, 3}, 7));
  std::printf("gradcheck: %s\n", r.message.c_str());
  return worst < 1e-12 && r ? 0 : 1;
}
