// The 40-node function on eager tensors in double, forward and backward.
#include "forty.hpp"
int main() {
  auto x = fg::randn<double>({7}, 1).requires_grad(true);
  const fg::tensor<double> v = forty(x, x, x);
  v.backward();
  return static_cast<int>(x.grad().to_vector()[0]);
}
