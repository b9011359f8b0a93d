// The README's first snippet: compile a function, run it, backpropagate through it.
#include <cstdio>

#include <fusegrad/compile.hpp>

namespace fg = fusegrad;

int main() {
  fg::tensor<float> x = fg::randn<float>({1000}, 0).requires_grad(true);
  fg::tensor<float> y = fg::randn<float>({1000}, 1).requires_grad(true);
  // [quickstart]
  auto f = fg::compile([](auto x, auto y) { return fg::cos(fg::cos(x)) * y; });
  fg::tensor<float> out = f(x, y);  // one fused forward loop; grad_fn: CompiledFunctionBackward
  fg::sum(out).backward();          // one fused backward loop; x.grad(), y.grad() filled
  // [quickstart]
  std::printf("%s, x.grad() has %lld elements\n", out.grad_fn_name().c_str(), static_cast<long long>(x.grad().numel()));
  return out.grad_fn_name() == "CompiledFunctionBackward" && x.grad().numel() == 1000 ? 0 : 1;
}
