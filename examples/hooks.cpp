// Tensor hooks, as in the compiled-autograd seed: `x.register_hook(lambda grad: grad + 10)`.
#include <cstdio>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

int main() {
  // [hook-grad-plus-10]
  fg::tensor<float> x = fg::ones<float>({3}).requires_grad(true);
  x.register_hook([](const fg::tensor<float>& grad) { return grad + 10.0f; });
  fg::sum(x * 2.0f).backward();
  // d/dx sum(2x) = 2, and the hook adds 10 before it reaches x.grad():
  std::vector<float> g = x.grad().to_vector();  // {12, 12, 12}
  // [hook-grad-plus-10]
  for (float v : g) std::printf("%g ", v);
  std::printf("\n");
  for (float v : g)
    if (v != 12.0f) return 1;

  // [hook-observe]
  fg::tensor<double> a = fg::randn<double>({4}, 1).requires_grad(true);
  fg::tensor<double> h = fg::sin(a);  // a non-leaf: its hook sees the gradient flowing into sin
  int calls = 0;
  h.register_hook([&calls](const fg::tensor<double>&) { ++calls; });  // returns nothing: observe only
  fg::sum(h * h).backward();
  // [hook-observe]
  std::printf("hook calls: %d\n", calls);
  return calls == 1 ? 0 : 1;
}
