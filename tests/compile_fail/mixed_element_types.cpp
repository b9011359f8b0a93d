// Adding a float tensor to a double tensor: fusegrad never promotes implicitly.
// expect: same element type
#include <fusegrad/fusegrad.hpp>
int main() {
  fusegrad::tensor<float> a = fusegrad::ones<float>({3});
  fusegrad::tensor<double> b = fusegrad::ones<double>({3});
  auto c = a + b;
  (void)c;
}
