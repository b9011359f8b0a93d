// A user's first program: the README's quick start, built from an installed fusegrad with the
// defaults (all cores, the precompiled runtime), then checked.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include <fusegrad/compile.hpp>

namespace fg = fusegrad;

int main() {
  fg::tensor<float> x = fg::randn<float>({1000}, 0).requires_grad(true);
  fg::tensor<float> y = fg::randn<float>({1000}, 1).requires_grad(true);
  auto f = fg::compile([](auto x, auto y) { return fg::cos(fg::cos(x)) * y; });
  fg::tensor<float> out = f(x, y);
  fg::sum(out).backward();
  const auto xs = x.to_vector(), ys = y.to_vector(), gx = x.grad().to_vector();
  double worst = 0;  // d/dx cos(cos(x)) y = sin(cos(x)) sin(x) y
  for (std::size_t i = 0; i < xs.size(); ++i)
    worst =
        std::max(worst, std::abs(double(gx[i]) - std::sin(std::cos(double(xs[i]))) * std::sin(double(xs[i])) * ys[i]));
  const unsigned cores = std::thread::hardware_concurrency();
  const int threads = fg::get_num_threads();
  std::printf("%s; largest gradient error %g; %d threads on %u cores\n", out.grad_fn_name().c_str(), worst, threads,
              cores);
  if (out.grad_fn_name() != "CompiledFunctionBackward" || worst > 1e-5) return 1;
  if (CONSUMER_EXPECT_PARALLEL && cores > 1 && threads <= 1) {
    std::printf("expected fusegrad to use every core by default\n");
    return 1;
  }
  return 0;
}
