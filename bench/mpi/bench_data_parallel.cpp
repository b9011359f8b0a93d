// Backward + all-reduce of an MLP's gradients across MPI ranks (docs/performance.md,
// "Data parallelism over MPI"): distributed::data_parallel with each bucket's all-reduce
// launched from the gradient hooks (overlapped with the rest of the backward), against the
// same buckets all-reduced after the backward, and the backward alone (no communication).
//
//   mpirun -np 2 bench_data_parallel [--width 2048] [--layers 3] [--batch 32] [--steps 15] [--bucket-mb 25]
//
// Times are the slowest rank's, per step, median over the steps; the three variants take
// turns step by step, so that a change in the machine's load falls on all three.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fusegrad/distributed/data_parallel.hpp>
#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;
namespace dist = fusegrad::distributed;

namespace {

struct mlp {
  mlp(fg::index_t width, int layers) {
    for (int l = 0; l < layers; ++l) ls.emplace_back(width, width, true, static_cast<std::uint64_t>(l));
  }
  fg::tensor<float> operator()(fg::tensor<float> x) const {
    for (std::size_t l = 0; l < ls.size(); ++l) x = l + 1 < ls.size() ? fg::relu(ls[l](x)) : ls[l](x);
    return x;
  }
  std::vector<fg::tensor<float>> parameters() const {
    std::vector<fg::tensor<float>> p;
    for (const auto& l : ls)
      for (const auto& q : l.parameters()) p.push_back(q);
    return p;
  }
  std::vector<fg::nn::linear<float>> ls;
};

/// One step's backward and finish(), in seconds: the slowest rank's.
double time_step(const mlp& m, dist::data_parallel<float>* dp, const fg::tensor<float>& x) {
  for (auto& p : m.parameters()) p.zero_grad();
  const auto y = m(x);
  const auto loss = fg::mean(y * y);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  loss.backward();
  if (dp) dp->finish();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

long arg(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0, ranks = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const auto width = static_cast<fg::index_t>(arg(argc, argv, "--width", 2048));
  const int layers = static_cast<int>(arg(argc, argv, "--layers", 3));
  const auto batch = static_cast<fg::index_t>(arg(argc, argv, "--batch", 32));
  const int steps = static_cast<int>(arg(argc, argv, "--steps", 15));
  const auto bucket = static_cast<std::size_t>(arg(argc, argv, "--bucket-mb", 25)) << 20;
  const int code = dist::run_or_abort([&] {
    mlp bare(width, layers), over(width, layers), after(width, layers);
    dist::data_parallel<float> dp_over(over.parameters(), MPI_COMM_WORLD, {.bucket_bytes = bucket, .overlap = true});
    dist::data_parallel<float> dp_after(after.parameters(), MPI_COMM_WORLD, {.bucket_bytes = bucket, .overlap = false});
    const auto x = fg::randn<float>({batch, width}, 1 + static_cast<std::uint64_t>(rank));
    std::vector<double> t_bare, t_over, t_after;
    for (int s = -2; s < steps; ++s) {  // two warm-up steps
      const double a = time_step(bare, nullptr, x), b = time_step(over, &dp_over, x),
                   c = time_step(after, &dp_after, x);
      if (s < 0) continue;
      t_bare.push_back(a);
      t_over.push_back(b);
      t_after.push_back(c);
    }
    std::size_t n = 0;
    for (const auto& p : over.parameters()) n += static_cast<std::size_t>(p.numel());
    if (rank == 0) {
      const double mb = median(t_bare) * 1e3, mo = median(t_over) * 1e3, ma = median(t_after) * 1e3;
      std::printf(
          "%d ranks, MLP %d x [%ld, %ld] + bias, %.1f M parameters (%.1f MB of float gradients), batch %ld per rank, "
          "%zu buckets of <= %zu MiB, median of %d steps\n",
          ranks, layers, static_cast<long>(width), static_cast<long>(width), static_cast<double>(n) / 1e6,
          static_cast<double>(n) * 4 / 1e6, static_cast<long>(batch), dp_over.buckets().size(), bucket >> 20, steps);
      std::printf("  backward alone:                          %8.1f ms\n", mb);
      std::printf("  backward + all-reduce, overlapped:       %8.1f ms  (communication not hidden: %.1f ms)\n", mo,
                  mo - mb);
      std::printf("  backward, then all-reduce (no overlap):  %8.1f ms  (communication: %.1f ms)\n", ma, ma - mb);
      std::printf("  no overlap / overlapped: %.2f\n", ma / mo);
    }
    return 0;
  });
  MPI_Finalize();
  return code;
}
