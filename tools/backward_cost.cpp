// The instructions of one small eager backward (sum(cos(x) * y + w), three leaves of 16
// floats), for comparing two versions of the headers under callgrind: the difference of a
// 20,000-iteration and a 2,000-iteration run, divided by 18,000, is one iteration's cost
// without start-up (docs/performance-log.md, "what a backward's all-or-nothing .grad() costs").
//   g++ -std=c++20 -O2 -DNDEBUG -mavx2 -mfma -Iinclude tools/backward_cost.cpp -o backward_cost
//   for a in short long; do valgrind --tool=callgrind --callgrind-out-file=/dev/null ./backward_cost $a; done
#include <cstdio>
#include <cstring>

#include "fusegrad/fusegrad.hpp"
namespace fg = fusegrad;
int main(int argc, char** argv) {
  const bool long_run = argc > 1 && std::strcmp(argv[1], "long") == 0;
  auto x = fg::randn<float>({16}, 1).requires_grad(true);
  auto y = fg::randn<float>({16}, 2).requires_grad(true);
  auto w = fg::randn<float>({16}, 3).requires_grad(true);
  double acc = 0;
  for (int i = 0, n = long_run ? 20000 : 2000; i < n; ++i) {
    fg::sum(fg::cos(x) * y + w).backward();
    acc += x.grad().to_vector()[0];
    x.zero_grad();
    y.zero_grad();
    w.zero_grad();
  }
  std::printf("%g\n", acc);
}
