// A custom op with two inputs whose backward returns a single gradient.
// expect: one gradient per input
#include <fusegrad/fusegrad.hpp>
struct bad_mul {
  static constexpr std::string_view name = "BadMulBackward";
  static auto forward(const auto& a, const auto& b) { return a * b; }
  static auto backward(const auto& saved, const auto& g) { return g; }
};
int main() {
  auto a = fusegrad::ones<float>({3}).requires_grad(true);
  auto b = fusegrad::ones<float>({3});
  auto c = fusegrad::function<bad_mul>::apply(a, b);
  (void)c;
}
