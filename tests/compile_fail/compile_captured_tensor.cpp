// A tensor captured by the compiled function cannot mix with symbolic inputs.
// expect: pass it as an argument
#include <fusegrad/fusegrad.hpp>
int main() {
  auto w = fusegrad::ones<float>({3});
  auto f = fusegrad::compile([w](auto x) { return x * w; });
  auto x = fusegrad::ones<float>({3});
  auto out = f(x);
  (void)out;
}
