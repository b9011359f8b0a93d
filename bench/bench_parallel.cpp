// Thread scaling (core/parallel.hpp): every case at 1 thread and at more, its second argument
// the thread count. tools/parallel_scaling.py turns the JSON into the scaling table and plot
// of docs/performance.md.
//
//   cmake --preset bench && cmake --build --preset bench --target bench_parallel
//   ./build/bench/bench/bench_parallel --benchmark_min_time=0.2 --benchmark_repetitions=3
//       (continued) --benchmark_out=parallel.json --benchmark_out_format=json
//   python3 tools/parallel_scaling.py parallel.json --plot docs/parallel_scaling.png
//
// Cases (floats):
//   BM_coscos_compile/N/threads   fg::compile forward + backward of cos(cos(x)) * y
//   BM_coscos_jit/N/threads       fg::jit, the same
//   BM_eager_cos/N/threads        one eager element-wise op (cos)
//   BM_xyz_compile/N/threads      x * y + z forward (bandwidth bound: 3 reads, 1 write)
//   BM_copy/N/threads             the copy bound: 2N floats copied in blocks on the same threads
//   BM_mlp_step/B/threads         an MLP 64-64-64-1 training step (tanh, mse loss, sgd) at batch B
//   BM_libtorch_*                 LibTorch with the same thread count, where it is installed
// Small sizes (10, 2^10) stay on the calling thread: 2 threads must cost what 1 costs.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "fusegrad/fusegrad.hpp"

#if defined(FUSEGRAD_HAVE_TORCH)
#include <torch/torch.h>
#endif

namespace fg = fusegrad;

namespace {

auto coscos = [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; };
auto xyz = [](auto x, auto y, auto z) { return x * y + z; };

/// Runs the case with the benchmark's thread count (its last argument) and restores it.
struct thread_count {
  explicit thread_count(const benchmark::State& state) : before(fg::get_num_threads()) {
    fg::set_num_threads(static_cast<int>(state.range(1)));
  }
  ~thread_count() { fg::set_num_threads(before); }
  int before;
};

void set_items(benchmark::State& state, long n) { state.SetItemsProcessed(state.iterations() * n); }

template <class F>
void fwd_bwd(benchmark::State& state, const F& f) {
  thread_count tc(state);
  const long n = state.range(0);
  auto x = fg::randn<float>({n}, 1).requires_grad(true), y = fg::randn<float>({n}, 2).requires_grad(true);
  const auto g = fg::randn<float>({n}, 3);
  for (auto _ : state) {
    x.zero_grad();
    y.zero_grad();
    fg::tensor<float> out = f(x, y);
    out.backward(g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  set_items(state, n);
}

void BM_coscos_compile(benchmark::State& state) { fwd_bwd(state, fg::compile(coscos)); }
void BM_coscos_jit(benchmark::State& state) { fwd_bwd(state, fg::jit(coscos)); }

void BM_eager_cos(benchmark::State& state) {
  thread_count tc(state);
  const long n = state.range(0);
  const auto x = fg::randn<float>({n}, 1);
  fg::no_grad ng;
  for (auto _ : state) {
    fg::tensor<float> out = fg::cos(x);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  set_items(state, n);
}

void BM_xyz_compile(benchmark::State& state) {
  thread_count tc(state);
  const long n = state.range(0);
  const auto f = fg::compile(xyz);
  const auto x = fg::randn<float>({n}, 1), y = fg::randn<float>({n}, 2), z = fg::randn<float>({n}, 3);
  fg::no_grad ng;
  for (auto _ : state) {
    fg::tensor<float> out = f(x, y, z);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * n * 16);
  set_items(state, n);
}

void BM_copy(benchmark::State& state) {  // the bytes of x * y + z (3 reads, 1 write) as 2N floats copied
  thread_count tc(state);
  const long n = state.range(0);
  std::vector<float> a(static_cast<std::size_t>(2 * n), 1.0f), b(a.size());
  for (auto _ : state) {
    fusegrad::detail::parallel_for(2 * n, fusegrad::detail::parallel_grain(), [&](fg::index_t i, fg::index_t e) {
      std::memcpy(b.data() + i, a.data() + i, static_cast<std::size_t>(e - i) * sizeof(float));
    });
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 16);
  set_items(state, n);
}

void BM_mlp_step(benchmark::State& state) {
  thread_count tc(state);
  const long batch = state.range(0);
  fg::nn::linear<float> l1{64, 64, true, 11}, l2{64, 64, true, 12}, l3{64, 1, true, 13};
  fg::nn::sgd<float> opt({l1.weight, l1.bias, l2.weight, l2.bias, l3.weight, l3.bias}, 1e-3f);
  const auto x = fg::randn<float>({batch, 64}, 3), target = fg::randn<float>({batch, 1}, 4);
  for (auto _ : state) {
    opt.zero_grad();
    fg::tensor<float> h = fg::tanh(l1(x));
    h = fg::tanh(l2(h));
    fg::tensor<float> loss = fg::nn::mse_loss(l3(h), target);
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(l1.weight.data_ptr());
  }
  set_items(state, batch);
}

#if defined(FUSEGRAD_HAVE_TORCH)
void BM_libtorch_coscos(benchmark::State& state) {
  torch::set_num_threads(static_cast<int>(state.range(1)));
  const long n = state.range(0);
  auto x = torch::randn({n}).requires_grad_(true), y = torch::randn({n}).requires_grad_(true);
  const auto g = torch::randn({n});
  for (auto _ : state) {
    x.mutable_grad() = torch::Tensor();
    y.mutable_grad() = torch::Tensor();
    auto out = torch::cos(torch::cos(x)) * y;
    out.backward(g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  set_items(state, n);
}
void BM_libtorch_mlp_step(benchmark::State& state) {
  torch::set_num_threads(static_cast<int>(state.range(1)));
  const long batch = state.range(0);
  torch::nn::Sequential net(torch::nn::Linear(64, 64), torch::nn::Tanh(), torch::nn::Linear(64, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, 1));
  torch::optim::SGD opt(net->parameters(), 1e-3);
  const auto x = torch::randn({batch, 64}), target = torch::randn({batch, 1});
  for (auto _ : state) {
    opt.zero_grad();
    auto loss = torch::mse_loss(net->forward(x), target);
    loss.backward();
    opt.step();
  }
  set_items(state, batch);
}
#endif

/// Sizes x thread counts: 1 thread and every count up to the cores (at least 2).
void sizes(benchmark::internal::Benchmark* b, std::vector<long> ns) {
  const long cores = std::max(2L, static_cast<long>(std::thread::hardware_concurrency()));
  for (long n : ns)
    for (long t = 1; t <= cores; t *= 2) b->Args({n, t});
  b->ArgNames({"N", "threads"});
}
void elementwise(benchmark::internal::Benchmark* b) { sizes(b, {10, 1 << 10, 1 << 14, 1 << 18, 1 << 20}); }
void bandwidth(benchmark::internal::Benchmark* b) { sizes(b, {10, 1 << 10, 1 << 20, 1 << 24}); }
void batches(benchmark::internal::Benchmark* b) { sizes(b, {16, 256, 4096}); }

}  // namespace

BENCHMARK(BM_coscos_compile)->Apply(elementwise)->UseRealTime();
BENCHMARK(BM_coscos_jit)->Apply(elementwise)->UseRealTime();
BENCHMARK(BM_eager_cos)->Apply(elementwise)->UseRealTime();
BENCHMARK(BM_xyz_compile)->Apply(bandwidth)->UseRealTime();
BENCHMARK(BM_copy)->Apply(bandwidth)->UseRealTime();
BENCHMARK(BM_mlp_step)->Apply(batches)->UseRealTime();
#if defined(FUSEGRAD_HAVE_TORCH)
BENCHMARK(BM_libtorch_coscos)->Apply(elementwise)->UseRealTime();
BENCHMARK(BM_libtorch_mlp_step)->Apply(batches)->UseRealTime();
#endif
