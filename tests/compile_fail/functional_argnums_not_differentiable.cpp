// argnums may select only float/double scalars, ranges of them and tensors, not an int.
// expect: argnums selects an argument that cannot be differentiated
// expect-first: argnums selects an argument that cannot be differentiated
#include <fusegrad/functional.hpp>
int main() {
  auto f = [](auto x, int n) { return x * double(n); };
  auto g = fusegrad::grad(f, fusegrad::argnums<1>)(2.0, 3);
  (void)g;
}
