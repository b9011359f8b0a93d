// Eager tensors: factories, broadcasting, views that share storage, reductions, autograd.
#include <cstdio>
#include <iostream>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

int main() {
  // [eager-factories]
  fg::tensor<float> a = fg::arange<float>(6).reshape({2, 3});  // [[0 1 2] [3 4 5]]
  fg::tensor<float> b = fg::from_vector<float>({10, 20, 30}, {3});
  fg::tensor<float> c = a + b;  // broadcasts [3] over [2, 3]
  std::cout << c << '\n';       // tensor([[10, 21, 32], [13, 24, 35]])
  // [eager-factories]

  // [eager-views]
  fg::tensor<float> row = c.select(0, 1);     // a view of row 1: no copy
  fg::tensor<float> col = c.transpose(0, 1);  // a strided view
  std::vector<float> user = {1, 2, 3, 4};
  fg::tensor<float> u = fg::view_of(user.data(), {2, 2});  // zero-copy view of user memory
  u.data()[0] = 42;                                        // writes land in `user`
  // [eager-views]
  std::cout << row << ' ' << col << ' ' << user[0] << '\n';

  // [eager-autograd]
  fg::tensor<double> x = fg::randn<double>({4, 3}, /*seed=*/1).requires_grad(true);
  fg::tensor<double> w = fg::randn<double>({3}, /*seed=*/2).requires_grad(true);
  fg::tensor<double> loss = fg::mean(fg::tanh(x * w));
  loss.backward();
  std::cout << loss.grad_fn_name() << ' ' << x.grad().shape().size() << ' ' << w.grad() << '\n';
  {
    fg::no_grad guard;  // nothing inside is recorded
    fg::tensor<double> y = x * 2.0;
    std::cout << std::boolalpha << y.requires_grad() << '\n';  // false
  }
  // [eager-autograd]
  return user[0] == 42 && row.at({0}) == 13 && col.at({2, 1}) == 35 ? 0 : 1;
}
