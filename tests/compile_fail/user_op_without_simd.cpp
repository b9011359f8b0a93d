// A user's element-wise op whose value() works on scalars only cannot be applied: fusegrad
// kernels need the SIMD form too.
// expect: UnaryOp
#include <cmath>
#include <fusegrad/fusegrad.hpp>
struct scalar_only {
  static constexpr std::string_view name = "scalar_only";
  float value(float x) const { return std::exp(x); }
};
int main() {
  auto a = fusegrad::ones<float>({3});
  auto c = fusegrad::apply_op(scalar_only{}, a);
  (void)c;
}
