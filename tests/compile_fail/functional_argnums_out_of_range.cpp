// argnums names an argument the function does not have.
// expect: argnums names an argument the function is not called with
// expect-first: argnums names an argument the function is not called with
#include <fusegrad/functional.hpp>
int main() {
  auto g = fusegrad::grad([](auto x) { return x * x; }, fusegrad::argnums<1>)(2.0);
  (void)g;
}
