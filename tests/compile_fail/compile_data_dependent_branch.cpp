// examples/walkthrough.cpp's data-dependent branch (`if (fg::mean(x).item() > 0.5f)`) inside
// fg::compile: a symbolic value has no bool, so data-dependent control flow is a compile error
// that points to the tracer.
// expect: data-dependent control flow
#include <fusegrad/fusegrad.hpp>
int main() {
  auto f = fusegrad::compile([](auto x) {
    auto y = fusegrad::cos(fusegrad::cos(x));
    const bool big = fusegrad::mean(y) > 0.5;
    return y * (big ? 1.0 / 1.1 : 1.0);
  });
  auto x = fusegrad::ones<float>({3});
  auto out = f(x);
  (void)out;
}
