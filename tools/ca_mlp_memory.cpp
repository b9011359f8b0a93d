// Compiled autograd against the eager engine on bench_compiled_autograd's MLP (64-64-64-1,
// tanh) at batch N / 64, one process per engine so that its peak resident memory and page
// faults are its own (docs/performance-log.md, "the fused loops' plain pass"). Build and run:
//   g++ -std=c++20 -O3 -DNDEBUG -mavx2 -mfma -Iinclude tools/ca_mlp_memory.cpp -o ca_mlp_memory -lpthread
//   for e in compiled eager; do /usr/bin/time -f "%M KB peak, %R minor faults" ./ca_mlp_memory $e 1048576 40; done
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include "fusegrad/fusegrad.hpp"
namespace fg = fusegrad;
int main(int argc, char** argv) {
  if (argc != 4 || (std::strcmp(argv[1], "compiled") != 0 && std::strcmp(argv[1], "eager") != 0)) {
    std::fprintf(stderr, "usage: ca_mlp_memory compiled|eager N backwards\n");
    return 2;
  }
  const bool compiled = std::strcmp(argv[1], "compiled") == 0;
  const long n = std::atol(argv[2]);
  const int backwards = std::atoi(argv[3]);
  fg::nn::linear<float> l1{64, 64, true, 11}, l2{64, 64, true, 12}, l3{64, 1, true, 13};
  const auto x = fg::randn<float>({n / 64, 64}, 3);
  const fg::tensor<float> loss = fg::sum(l3(fg::tanh(l2(fg::tanh(l1(x))))));
  std::optional<fg::compiled_autograd::enable> on;
  std::optional<fg::compiled_autograd::disable> off;
  if (compiled) on.emplace(fg::backend::fused{});
  else off.emplace();
  auto step = [&] {
    for (auto* l : {&l1, &l2, &l3}) {
      l->weight.zero_grad();
      l->bias.zero_grad();
    }
    loss.backward({.retain_graph = true});
  };
  step();  // the capture and compile (compiled autograd), and the first touch of the gradients
  step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < backwards; ++i) step();
  const auto t1 = std::chrono::steady_clock::now();
  std::printf("%s: %.1f us per backward\n", argv[1],
              std::chrono::duration<double, std::micro>(t1 - t0).count() / backwards);
  return 0;
}
