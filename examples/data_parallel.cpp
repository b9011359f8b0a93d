// Data parallelism over MPI (docs/distributed.md): every rank trains the same MLP on its own
// share of each batch; distributed::data_parallel averages the gradients across ranks while
// the backward runs. Built where MPI is found (target fusegrad::mpi); the test suite runs it
// as `mpirun -np 2 data_parallel`.
#include <cstdio>
#include <vector>

#include <fusegrad/distributed/data_parallel.hpp>
#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

namespace {

/// A step's share of the batch for `rank`: inputs, and a teacher's targets.
std::pair<fg::tensor<float>, fg::tensor<float>> batch_of(int step, int rank) {
  const fg::tensor<float> teacher = fg::randn<float>({16, 1}, 42);
  fg::tensor<float> x =
      fg::randn<float>({32, 16}, 1000 * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(rank));
  return {x, fg::matmul(x, teacher)};
}

/// The mean of `v` over the ranks.
float mean_over_ranks(float v, int ranks) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return v / static_cast<float>(ranks);
}

int train(int rank, int ranks) {
  // [dp-train]
  // Different initial values on every rank: data_parallel broadcasts rank 0's.
  fg::nn::linear<float> l1(16, 64, true, /*seed=*/10 * rank), l2(64, 1, true, 10 * rank + 1);
  std::vector<fg::tensor<float>> params = l1.parameters();
  for (const auto& p : l2.parameters()) params.push_back(p);
  fg::distributed::data_parallel<float> dp(params);  // {.bucket_bytes = 25 MiB, .overlap = true}
  fg::nn::sgd<float> opt(params, 0.05f);
  auto loss_of = [&](int step) {
    auto [x, t] = batch_of(step, rank);  // this rank's share of the step's batch
    fg::tensor<float> d = l2(fg::tanh(l1(x))) - t;
    return fg::mean(d * d);
  };
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    fg::tensor<float> loss = loss_of(step);
    loss.backward();  // each bucket's all-reduce starts as soon as its last gradient is in
    dp.finish();      // waits for them; .grad() holds the average over the ranks
    opt.step();
  }
  // [dp-train]
  const float first = mean_over_ranks(loss_of(0).item(), ranks);
  // [dp-compiled]
  for (int step = 30; step < 40; ++step) {
    opt.zero_grad();
    fg::tensor<float> loss = loss_of(step);
    {
      fg::compiled_autograd::enable on;  // one captured backward: the hooks are call_hook nodes
      loss.backward();
    }
    dp.finish();
    opt.step();
  }
  // [dp-compiled]
  const float last = mean_over_ranks(loss_of(0).item(), ranks);
  // The parameters are the same on every rank: their sums' extremes over the ranks agree.
  float sum = 0;
  for (const auto& p : params) sum += fg::sum(p).item();
  float lo = sum, hi = sum;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("%d ranks: loss %.4f -> %.4f, parameters equal on every rank: %s\n", ranks, first, last,
                lo == hi ? "yes" : "no");
  return lo == hi && last < first ? 0 : 1;
}

}  // namespace

// [dp-main]
int main(int argc, char** argv) {
  int provided = 0;  // fusegrad's loops may use OpenMP threads; MPI calls stay on this one
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  // An exception on a rank: its message, then MPI_Abort ends every rank (no rank waits).
  const int code = fg::distributed::run_or_abort([&] { return train(rank, ranks); });
  MPI_Finalize();
  return code;
}
// [dp-main]
