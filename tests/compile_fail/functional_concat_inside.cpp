// fg::concat builds an output; a reduction of it is not one.
// expect: fusegrad::concat builds a transformed function's output
// expect-first: fusegrad::concat builds a transformed function's output
#include <fusegrad/functional.hpp>

#include <vector>

int main() {
  std::vector<double> x(4, 1.0);
  auto g = fusegrad::grad([](const auto& x) { return fusegrad::sum(fusegrad::concat(x, x[0])); })(x);
  (void)g;
}
