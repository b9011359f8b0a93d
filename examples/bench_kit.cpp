// Microbenchmarks of fused kernels with fusegrad's kit (<fusegrad/bench.hpp>,
// docs/benchmarking.md): a user's kernel, cos(cos(x)) * y with its gradients, against the
// user's own hand loop, and x * y + z (forward only, bound by memory) against a plain loop;
// each with one call that registers every variant at every size.
//
// Run by the test suite with no arguments: a quick pass (two small sizes, 10 ms a case) after
// `check`, which fails the run unless every variant agrees with the hand loop. With arguments
// they go to Google Benchmark, at sizes up to 2^20:
//   ./bench_kit --benchmark_min_time=0.2
//   FUSEGRAD_NUM_THREADS=1 ./bench_kit --benchmark_filter='coscos/(hand|compile)/'
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <fusegrad/bench.hpp>

namespace fg = fusegrad;

// [bench-kit-hand]
// The hand loop of sum(cos(cos(x)) * y) with its gradients, as the kit calls it with
// with_backward(): the inputs, then one gradient per input; returns the value.
// One pass: d/dx = y sin(cos x) sin x and d/dy = cos(cos x), stored as they come.
float coscos_hand(std::span<const float> x, std::span<const float> y, std::span<float> gx, std::span<float> gy) {
  using B = xsimd::batch<float>;
  const std::size_t n = x.size();
  B sum(0.0f);
  std::size_t i = 0;
  for (; i + B::size <= n; i += B::size) {
    const B xv = B::load_unaligned(&x[i]), yv = B::load_unaligned(&y[i]);
    const B c1 = xsimd::cos(xv), c2 = xsimd::cos(c1);
    sum += c2 * yv;
    (yv * xsimd::sin(c1) * xsimd::sin(xv)).store_unaligned(&gx[i]);
    c2.store_unaligned(&gy[i]);
  }
  float value = xsimd::hadd(sum);
  for (; i < n; ++i) {  // the last partial batch, one element at a time
    const float c1 = std::cos(x[i]), c2 = std::cos(c1);
    value += c2 * y[i];
    gx[i] = y[i] * std::sin(c1) * std::sin(x[i]);
    gy[i] = c2;
  }
  return value;
}
// [bench-kit-hand]

// [bench-kit-xyz-hand]
// A forward-only hand loop: the inputs, then the output. A plain loop; `__restrict` tells the
// compiler the output overlaps no input, so that it vectorizes the loop without checks.
void xyz_hand(std::span<const float> x, std::span<const float> y, std::span<const float> z, std::span<float> out) {
  const float* __restrict px = x.data();
  const float* __restrict py = y.data();
  const float* __restrict pz = z.data();
  float* __restrict po = out.data();
  for (std::size_t i = 0; i < out.size(); ++i) po[i] = px[i] * py[i] + pz[i];
}
// [bench-kit-xyz-hand]

int main(int argc, char** argv) {
  const bool quick = argc == 1;  // the test suite's run
  std::vector<char*> args(argv, argv + argc);
  char min_time[] = "--benchmark_min_time=0.01";  // seconds (Google Benchmark 1.7)
  if (quick) args.push_back(min_time);
  const std::vector<fg::index_t> sizes =
      quick ? std::vector<fg::index_t>{10, 1 << 10} : std::vector<fg::index_t>{10, 1 << 10, 1 << 16, 1 << 20};
  try {
    // [bench-kit-suite]
    fg::bench::suite("coscos", [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; })
        .sizes(sizes)
        .with_backward()  // sum(f(x, y)) and both gradients
        .hand(coscos_hand)
        .check(1e-5)  // every variant against the hand loop first, at the smallest size
        .add();
    // [bench-kit-suite]
    // [bench-kit-xyz]
    fg::bench::suite("xyz", [](auto x, auto y, auto z) { return x * y + z; })
        .sizes(sizes)
        .hand(xyz_hand)
        .check(1e-6)
        .add();
    // [bench-kit-xyz]
  } catch (const fg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("check: every variant agrees with its hand loop\n");

  int n = static_cast<int>(args.size());
  args.push_back(nullptr);  // argv[argc] is null, as main's is
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
