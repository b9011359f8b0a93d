// A range captured by a transformed function, used with its arguments without fg::data.
// expect: a range captured by a transformed function is data: wrap it, fg::data(z)
// expect-first: a range captured by a transformed function is data
#include <fusegrad/functional.hpp>

#include <vector>

int main() {
  std::vector<double> z(10, 1.0);
  auto g = fusegrad::grad([&z](auto s) { return fusegrad::sum(s * z); })(2.0);
  (void)g;
}
