// A classifier: a 2-layer MLP trained with cross_entropy and Adam on two interleaved spirals
// (generated here, deterministic), under fg::jit with compiled autograd on. Fails (exit 1)
// below 95% training accuracy.
#include <cstdio>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "spirals.hpp"

namespace fg = fusegrad;

int main() {
  const auto [x, labels] = make_spirals(200);

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
