// The arguments of a transformed function share one element type.
// expect: must share one element type
#include <fusegrad/functional.hpp>
int main() {
  auto g = fusegrad::grad([](auto x, auto y) { return x * y; })(2.0, 3.0f);
  (void)g;
}
