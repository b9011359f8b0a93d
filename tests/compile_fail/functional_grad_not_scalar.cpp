// fg::grad needs a function with one scalar output; an element-wise result must be reduced.
// expect: fusegrad::grad: the function must return one scalar
#include <fusegrad/functional.hpp>
#include <vector>
int main() {
  std::vector<double> x(4, 1.0);
  auto g = fusegrad::grad([](const auto& v) { return fusegrad::cos(v); })(x);
  (void)g;
}
