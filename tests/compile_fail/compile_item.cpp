// item() needs a concrete value, which a compiled (symbolic) function never has.
// expect: item() needs a concrete value
#include <fusegrad/fusegrad.hpp>
int main() {
  auto f = fusegrad::compile([](auto x) {
    float m = fusegrad::mean(x).item();
    return x * m;
  });
  auto x = fusegrad::ones<float>({3});
  auto out = f(x);
  (void)out;
}
