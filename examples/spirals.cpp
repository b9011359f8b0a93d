// A classifier end to end with fg::nn: two interleaved spirals (spirals.hpp), an MLP built with
// nn::sequential, Adam on cross-entropy, the model saved with its state dict and loaded into a
// fresh one that must predict the same bits. docs/nn.md shows its parts.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fusegrad/nn.hpp>

#include "spirals.hpp"

namespace fg = fusegrad;

namespace {
// [nn-model]
auto make_model(std::uint64_t seed) {
  auto tanh = [](const auto& x) { return fg::tanh(x); };
  return fg::nn::sequential(fg::nn::linear<float>(2, 32, true, seed), tanh,
                            fg::nn::linear<float>(32, 32, true, seed + 1), tanh,
                            fg::nn::linear<float>(32, 2, true, seed + 2));
}
// [nn-model]

double accuracy(const fg::tensor<float>& logits, const std::vector<fg::index_t>& label) {
  const std::vector<float> predicted = fg::argmax(logits, 1).to_vector();
  int right = 0;
  for (std::size_t i = 0; i < label.size(); ++i) right += static_cast<fg::index_t>(predicted[i]) == label[i];
  return static_cast<double>(right) / static_cast<double>(label.size());
}
}  // namespace

int main() {
  const spirals_data data = make_spirals(200);
  // [nn-train]
  auto model = make_model(/*seed=*/1);
  fg::nn::adam opt(model.parameters(), /*lr=*/0.02);
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    const fg::tensor<float> loss = fg::nn::cross_entropy(model(data.x), data.labels);
    loss.backward();
    opt.step();
    if (step % 100 == 0) std::printf("step %3d  loss %.4f\n", step, loss.item());
  }
  // [nn-train]
  const double acc = accuracy(model(data.x), data.labels);
  std::printf("training accuracy %.1f%%\n", 100 * acc);

  // [nn-save]
  const std::string path = (std::filesystem::temp_directory_path() / "fusegrad_spirals.npy").string();
  fg::nn::save(path, model.state_dict());  // names "0.weight", "0.bias", "2.weight", ...

  auto restored = make_model(/*seed=*/99);  // other initial values
  fg::nn::load(path, restored.named_parameters());
  // or, from a state dict in memory: restored.load_state_dict(model.state_dict());
  // [nn-save]
  std::filesystem::remove(path);
  const bool same = restored(data.x).to_vector() == model(data.x).to_vector();
  std::printf("the reloaded model predicts %s bits\n", same ? "the same" : "different");
  return acc > 0.9 && same ? 0 : 1;
}
