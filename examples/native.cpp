// Native code for run-time graphs (docs/jit.md, "Native code"): fg::jit's programs compiled to
// C++ by the system compiler, loaded, and cached on disk, with the interpreter's bits.
#include <cstdio>
#include <cstring>
#include <vector>

#include <fusegrad/jit.hpp>

namespace fg = fusegrad;

namespace {
bool same_bits(const fg::tensor<float>& a, const fg::tensor<float>& b) {
  const auto u = a.to_vector(), v = b.to_vector();
  return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0;
}

/// f(x, y) and x's gradient through a new jitted function, in native mode `m`.
std::vector<fg::tensor<float>> run(fg::native::mode m, const fg::tensor<float>& x0, const fg::tensor<float>& y) {
  fg::native::set_mode(m);
  auto f = fg::jit([](const fg::tensor<float>& x, const fg::tensor<float>& w) {
    fg::tensor<float> h = x;
    for (int layer = 0; layer < 10; ++layer) h = fg::tanh(h * w + 0.1f);
    return h;
  });
  const auto x = x0.detach().requires_grad(true);
  const auto out = f(x, y);
  fg::sum(out).backward();
  return {out.detach(), x.grad()};
}
}  // namespace

int main() {
  const auto x = fg::randn<float>({1 << 16}, 1), w = fg::randn<float>({1 << 16}, 2);
  const auto interpreted = run(fg::native::mode::off, x, w);

  // [native-sync]
  // Compile each new program before its first run (the default, async, compiles in the
  // background while the interpreter runs; FUSEGRAD_NATIVE=off|async|sync does the same).
  fg::native::reset_counters();
  const auto native = run(fg::native::mode::sync, x, w);  // calls fg::native::set_mode(sync)
  const fg::native::counters_t c = fg::native::counters();
  std::printf("native code: %llu compiled, %llu loaded from disk, %llu failed\n",
              static_cast<unsigned long long>(c.compiles), static_cast<unsigned long long>(c.disk_hits),
              static_cast<unsigned long long>(c.failures));
  // [native-sync]

  if (c.failures > 0) {  // no compiler here: the interpreter ran, as it should
    std::printf("no native code on this machine; the interpreter's results stand\n");
    return 0;
  }
  const bool same = same_bits(interpreted[0], native[0]) && same_bits(interpreted[1], native[1]);
  std::printf("values and gradients, native against interpreted: %s\n", same ? "the same bits" : "DIFFERENT");
  return same && c.compiles + c.disk_hits > 0 ? 0 : 1;
}
