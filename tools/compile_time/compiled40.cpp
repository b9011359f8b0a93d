// The 40-node function through fg::compile (fused backend) in double, forward and backward.
#include "forty.hpp"
int main() {
  const auto f = fg::compile(forty);
  auto x = fg::randn<double>({7}, 1).requires_grad(true);
  const fg::tensor<double> v = f(x, x, x);
  v.backward();
  return static_cast<int>(x.grad().to_vector()[0]);
}
