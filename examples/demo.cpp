// The main demo: the compiled-autograd seed's model, `Linear(10, 10)`, trained for a few
// SGD steps on `loss = model(x).sum()`, printing the loss as it falls.
#include <cstdio>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

// [demo-model]
struct Model {
  fg::nn::linear<float> linear{10, 10};
  fg::tensor<float> operator()(const fg::tensor<float>& x) const { return linear(x); }
};
// [demo-model]

int main() {
  // [demo-train]
  Model model;
  const fg::tensor<float> x = fg::randn<float>({10}, /*seed=*/0);
  fg::nn::sgd<float> opt(model.linear.parameters(), /*lr=*/0.01f);

  float first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    fg::tensor<float> loss = fg::sum(model(x));
    loss.backward();
    opt.step();
    std::printf("step %d  loss %.4f  (grad_fn %s)\n", step, loss.item(), loss.grad_fn_name().c_str());
    (step == 0 ? first : last) = loss.item();
  }
  // [demo-train]
  if (!(last < first)) {
    std::printf("loss did not fall: %.4f -> %.4f\n", first, last);
    return 1;
  }
  std::printf("loss fell from %.4f to %.4f\n", first, last);
  return 0;
}
