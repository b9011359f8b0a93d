// A custom op must name its backward node.
// expect: CustomFunction
#include <fusegrad/fusegrad.hpp>
struct nameless {
  static auto forward(const auto& a) { return a; }
  static auto backward(const auto&, const auto& g) { return g; }
};
int main() {
  auto a = fusegrad::ones<float>({3}).requires_grad(true);
  auto c = fusegrad::function<nameless>::apply(a);
  (void)c;
}
