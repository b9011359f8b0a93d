// A backend must model fusegrad::Backend (name and runs_graph).
// expect: Backend
#include <fusegrad/fusegrad.hpp>
struct my_backend {};
int main() {
  auto f = fusegrad::compile<my_backend>([](auto x) { return fusegrad::cos(x); });
  (void)f;
}
