// fg::compile needs a generic function: it calls it on symbolic inputs.
// expect: generic lambda
#include <fusegrad/fusegrad.hpp>
int main() {
  auto f = fusegrad::compile([](const fusegrad::tensor<float>& x) { return fusegrad::cos(x); });
  auto x = fusegrad::ones<float>({3});
  auto out = f(x);
  (void)out;
}
