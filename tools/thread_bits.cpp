// Bit-for-bit agreement across thread counts: eager, fg::compile and fg::jit, forward and
// backward, at 2..16 threads against 1, on sizes that split into uneven blocks (docs/performance.md,
// "On 16 cores"). Build and run (exit status non-zero on a mismatch):
//   g++ -std=c++20 -O2 -mavx2 -mfma -fopenmp -Iinclude tools/thread_bits.cpp -o thread_bits -lpthread && ./thread_bits
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include "fusegrad/fusegrad.hpp"
namespace fg = fusegrad;
template <int K, class H, class X>
auto tanh_chain(const H& h, const X& w) {
  if constexpr (K == 0) return h;
  else return tanh_chain<K - 1>(fg::tanh(h * w), w);
}
auto coscos = [](auto x, auto y) { return fg::sum(fg::cos(fg::cos(x)) * y); };
auto tanh4 = [](auto x, auto w) { return fg::sum(tanh_chain<4>(x, w)); };
struct result {
  std::vector<float> v, gx, gy;
};
template <class F>
result run(F& f, long n) {
  auto x = fg::randn<float>({n}, 1).requires_grad(true),
       y = (fg::randn<float>({n}, 2) * 0.5f + 1.0f).detach().requires_grad(true);
  fg::tensor<float> o = f(x, y);
  o.backward();
  return {o.to_vector(), x.grad().to_vector(), y.grad().to_vector()};
}
int main() {
  int bad = 0, checks = 0;
  for (long n : {1000003L, 1L << 20, 3L << 18}) {
    auto e1 = [](auto x, auto y) { return coscos(x, y); };
    auto e2 = [](auto x, auto y) { return tanh4(x, y); };
    auto c1 = fg::compile(coscos);
    auto c2 = fg::compile(tanh4);
    auto j1 = fg::jit(e1);
    auto j2 = fg::jit(e2);
    std::vector<result> base;
    for (int t = 1; t <= 16; ++t) {
      fg::set_num_threads(t);
      std::vector<result> r{run(e1, n), run(e2, n), run(c1, n), run(c2, n), run(j1, n), run(j2, n)};
      if (t == 1) {
        base = r;
        continue;
      }
      for (std::size_t k = 0; k < r.size(); ++k) {
        ++checks;
        const bool same = r[k].v == base[k].v && r[k].gx == base[k].gx && r[k].gy == base[k].gy;
        if (!same) {
          ++bad;
          std::printf("MISMATCH n=%ld threads=%d path=%zu\n", n, t, k);
        }
      }
    }
  }
  std::printf("threads 2..16 against 1: %d comparisons, %d mismatches (hardware threads: %u)\n", checks, bad,
              std::thread::hardware_concurrency());
  return bad != 0;
}
