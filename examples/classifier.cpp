// A classifier: a 2-layer MLP trained with cross_entropy and Adam on two interleaved spirals
// (generated here, deterministic), under fg::jit with compiled autograd on. Fails (exit 1)
// below 95% training accuracy.
#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

int main() {
  // Two spirals of 200 points each, r = t, angle = t + π k, with a little deterministic jitter.
  constexpr int per_class = 200;
  std::vector<float> xy;
  std::vector<fg::index_t> labels;
  const auto jitter = fg::randn<float>({2 * per_class, 2}, 3).to_vector();
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < per_class; ++i) {
      const double t = 0.5 + 3.5 * std::numbers::pi * i / per_class;
      const auto j = static_cast<std::size_t>(2 * (k * per_class + i));
      xy.push_back(static_cast<float>(t * std::cos(t + std::numbers::pi * k) / 6 + 0.02 * jitter[j]));
      xy.push_back(static_cast<float>(t * std::sin(t + std::numbers::pi * k) / 6 + 0.02 * jitter[j + 1]));
      labels.push_back(k);
    }
  const fg::tensor<float> x = fg::from_vector<float>(xy, {2 * per_class, 2});

  // [classifier]
  fg::nn::linear<float> l1(2, 64, true, /*seed=*/1), l2(64, 2, true, /*seed=*/2);
  std::vector<fg::tensor<float>> params = l1.parameters();
  for (const auto& p : l2.parameters()) params.push_back(p);
  fg::nn::adam<float> opt(params, {.lr = 0.02});
  auto logits = fg::jit([&](const fg::tensor<float>& in) { return l2(fg::tanh(l1(in))); });
  fg::compiled_autograd::enable compiled_backward;  // backward() captures and compiles the whole backward

  float loss_value = 0;
  for (int step = 0; step < 600; ++step) {
    opt.zero_grad();
    fg::tensor<float> loss = fg::nn::cross_entropy(logits(x), labels);
    loss.backward();
    opt.step();
    loss_value = loss.item();
  }
  // [classifier]

  fg::no_grad ng;
  const auto out = logits(x).to_vector();
  int correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) correct += (out[2 * i + 1] > out[2 * i]) == (labels[i] == 1);
  const double accuracy = static_cast<double>(correct) / static_cast<double>(labels.size());
  std::printf("final loss %.4f, training accuracy %.1f%% (%d of %zu), jit compiles %d\n", loss_value, 100 * accuracy,
              correct, labels.size(), logits.compiles());
  if (accuracy < 0.95) {
    std::printf("accuracy below 95%%\n");
    return 1;
  }
  return 0;
}
