// fg::normal_lpdf of a range runs on the range's statistics in reverse mode only; forward mode
// (fg::hvp, fg::jvp, fg::hessian) asks for the density written out, with a sentence.
// expect: under fg::jvp, fg::hvp and fg::hessian write the density out
#include <fusegrad/functional.hpp>
#include <vector>
int main() {
  std::vector<double> x(4, 1.0), v(4, 1.0);
  auto h = fusegrad::hvp([](const auto& t) { return fusegrad::normal_lpdf(t, 0.0, 1.0); })(x, v);
  (void)h;
}
