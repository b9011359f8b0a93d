// Custom differentiable ops, the counterpart of the walk-through seed's `Cosine`
// (torch.autograd.Function with forward / setup_context / backward).
#include <cmath>
#include <cstdio>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

// [custom-cosine]
struct Cosine {
  static constexpr std::string_view name = "CosineBackward";
  static inline int saved_count = 0;

  static auto forward(const auto& x0) { return fg::cos(x0); }
  static auto setup_context(const auto& x, const auto& /*output*/) {
    std::printf("saving tensor of size %s\n", fg::to_string(x.shape()).c_str());
    ++saved_count;
    return fg::save_for_backward(x);
  }
  static auto backward(const auto& saved, const auto& grad_output) {
    const auto& [x] = saved;
    return -fg::sin(x) * grad_output;
  }
};

template <class T>
fg::tensor<T> naive_two_cosine(const fg::tensor<T>& x0) {
  return fg::function<Cosine>::apply(fg::function<Cosine>::apply(x0));
}
// [custom-cosine]

int main() {
  // [custom-check]
  fg::tensor<float> input = fg::randn<float>({5, 5, 5}, 0).requires_grad(true);
  fg::tensor<float> grad_output = fg::randn<float>({5, 5, 5}, 1);

  fg::sum(fg::cos(fg::cos(input)) * grad_output).backward();  // built-in ops
  fg::tensor<float> grad_input1 = input.grad();
  input.zero_grad();
  fg::sum(naive_two_cosine(input) * grad_output).backward();  // prints "saving tensor" twice
  fg::tensor<float> grad_input2 = input.grad();
  // [custom-check]
  const auto g1 = grad_input1.to_vector(), g2 = grad_input2.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < g1.size(); ++i) worst = std::max(worst, double(std::abs(g1[i] - g2[i])));
  std::printf("saved %d tensors; max |grad difference| = %g\n", Cosine::saved_count, worst);

  // [custom-gradcheck]
  auto r = fg::gradcheck([](const auto& x) { return fg::function<Cosine>::apply(x); }, fg::randn<double>({3, 2}, 7));
  std::printf("%s\n", r.message.c_str());
  // [custom-gradcheck]
  return (Cosine::saved_count == 3 && worst < 1e-6 && r) ? 0 : 1;
}
