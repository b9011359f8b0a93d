// Native code for run-time programs (jit/native_emitter.hpp): fg::jit's programs and compiled
// autograd's captured backward, run by generated C++ loaded from the code cache, keep the
// interpreter's bits, at every length (whole and partial batches, one tile, several, long
// tiles, parallel blocks), in float and double; async mode runs the interpreter until the code
// is in, then the code.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fusegrad/fusegrad.hpp>
#include <fusegrad/native/code_cache.hpp>  // wait_idle: a TU that links the runtime does not parse it otherwise
#include <string>
#include <type_traits>
#include <vector>

#include "native_fixture.hpp"

namespace fg = fusegrad;

namespace {

using native_test::cache_dir;
using native_test::have_compiler;

template <class T>
bool same_bits(const fg::tensor<T>& a, const fg::tensor<T>& b) {
  if (a.shape() != b.shape()) return false;
  const auto u = a.to_vector(), v = b.to_vector();
  for (std::size_t i = 0; i < u.size(); ++i)
    if (std::memcmp(&u[i], &v[i], sizeof(T)) != 0 && !(u[i] != u[i] && v[i] != v[i])) return false;
  return true;
}

/// Values and gradients of `f(x, y)` summed, through a new fg::jit function in native mode `m`.
template <class T, class F>
std::vector<fg::tensor<T>> run_jit(F f, fg::native::mode m, const fg::tensor<T>& x0, const fg::tensor<T>& y0) {
  fg::native::set_mode(m);
  auto jf = fg::jit(f);
  std::vector<fg::tensor<T>> out;
  for (int call = 0; call < 2; ++call) {  // the second call hits the cache entry
    const auto x = x0.detach().requires_grad(true), y = y0.detach().requires_grad(true);
    const auto r = jf(x, y);
    fg::sum(r).backward();
    out = {r.detach(), x.grad(), y.grad()};
  }
  return out;
}

template <class T, class F>
void check_same_as_interpreter(F f, fg::index_t n, std::uint64_t seed) {
  CAPTURE(n);
  const auto x = fg::randn<T>({n}, seed), y = fg::randn<T>({n}, seed + 1);
  const auto before = fg::native::counters();
  const auto interp = run_jit<T>(f, fg::native::mode::off, x, y);
  const auto native = run_jit<T>(f, fg::native::mode::sync, x, y);
  const auto after = fg::native::counters();
  CHECK(after.failures == before.failures);
  CHECK(after.compiles + after.disk_hits + after.memory_hits > before.compiles + before.disk_hits + before.memory_hits);
  for (std::size_t i = 0; i < interp.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(interp[i], native[i]));
  }
}

}  // namespace

TEST_CASE("native code keeps the interpreter's bits: element-wise chains, reductions, splats, sin/cos pairs") {
  (void)cache_dir();
  if (!have_compiler()) {
    MESSAGE("no c++ on PATH: native code is not tested here");
    return;
  }
  auto coscos = [](const auto& x, const auto& y) { return fg::cos(fg::cos(x)) * y; };
  auto mix = [](const auto& x, const auto& y) { return fg::tanh(x * 0.5 + y) * fg::exp(-x) + fg::max(x); };
  auto means = [](const auto& x, const auto& y) {
    return fg::sin(x) * fg::mean(fg::cos(y)) + fg::sigmoid(x * y) / (fg::sum(y * y) + 1.0);
  };
  // lengths: one element, partial batches, one tile, several tiles, parallel blocks
  for (const fg::index_t n : {1, 7, 9, 256, 1000, 70000}) {
    check_same_as_interpreter<float>(coscos, n, 1);
    check_same_as_interpreter<double>(coscos, n, 3);
    check_same_as_interpreter<float>(mix, n, 5);
    check_same_as_interpreter<double>(means, n, 7);
  }
  fg::native::set_mode(fg::native::mode::off);
}

TEST_CASE("native code reads a tensor once per batch, however many instructions read it") {
  (void)cache_dir();
  if (!have_compiler()) {
    MESSAGE("no c++ on PATH: native code is not tested here");
    return;
  }
  // w is read by four instructions: one pointer and one load per batch, not four (loaded
  // four times, a chain's weight costs a load port and a register per reading instruction).
  std::vector<std::string> sources;
  fg::native::set_log_sources(true);
  fg::native::set_log_sink([&](std::string_view s) { sources.emplace_back(s); });
  fg::native::set_mode(fg::native::mode::sync);
  {
    const fg::no_grad guard;
    auto f = fg::jit([](const auto& x, const auto& w) { return x * w * w * w + w; });
    const auto x = fg::randn<float>({37}, 1), w = fg::randn<float>({37}, 2);
    const auto expected = x * w * w * w + w;
    CHECK(same_bits(f(x, w), expected));
  }
  fg::native::set_mode(fg::native::mode::off);
  fg::native::set_log_sink({});
  fg::native::set_log_sources(false);
  const auto unit = std::find_if(sources.begin(), sources.end(),
                                 [](const std::string& s) { return s.find("segment_0_0") != std::string::npos; });
  REQUIRE(unit != sources.end());
  auto count = [&](std::string_view needle) {
    int n = 0;
    for (auto at = unit->find(needle); at != std::string::npos; at = unit->find(needle, at + 1)) ++n;
    return n;
  };
  CHECK(count("V::load_unaligned(") == 2);  // x and w
  CHECK(count("  const T* s") == 2);        // their pointers
}

TEST_CASE("native code runs compiled autograd's captured backward with the interpreter's bits") {
  (void)cache_dir();
  if (!have_compiler()) return;
  auto chain = [](fg::native::mode m) {
    fg::native::set_mode(m);
    const auto x = fg::randn<float>({3000}, 11).requires_grad(true);
    std::vector<fg::tensor<float>> w;
    for (int l = 0; l < 6; ++l) w.push_back(fg::randn<float>({3000}, 20 + l).requires_grad(true));
    fg::tensor<float> h = x;
    for (const auto& wl : w) h = fg::tanh(h * wl);
    fg::compiled_autograd::enable on;
    fg::sum(h).backward();
    std::vector<fg::tensor<float>> g{x.grad()};
    for (const auto& wl : w) g.push_back(wl.grad());
    return g;
  };
  const auto interp = chain(fg::native::mode::off);
  fg::compiled_autograd::reset();
  const auto native = chain(fg::native::mode::sync);
  fg::compiled_autograd::reset();
  for (std::size_t i = 0; i < interp.size(); ++i) CHECK(same_bits(interp[i], native[i]));
  fg::native::set_mode(fg::native::mode::off);
}

TEST_CASE("async native code: the interpreter runs until the code is installed, with the same bits") {
  (void)cache_dir();
  if (!have_compiler()) return;
  auto f = [](const auto& x, const auto& y) { return fg::exp(fg::sin(x) * y) - x * 0.25; };
  const auto x = fg::randn<double>({5000}, 31), y = fg::randn<double>({5000}, 32);
  fg::native::set_mode(fg::native::mode::async);
  auto jf = fg::jit(f);
  const auto first = jf(x, y);  // returns without waiting for the compiler
  fg::detail::native::code_cache::global().wait_idle();
  const auto before = fg::native::counters();
  const auto second = jf(x, y);
  CHECK(fg::native::counters().fallbacks == before.fallbacks);  // the code is in
  CHECK(same_bits(first, second));
  fg::native::set_mode(fg::native::mode::off);
}

TEST_CASE("native code contracts multiplies and adds exactly where the library's kernels do: sin in double") {
  // Found by the differential fuzzer: kernels built with -ffp-contract=off against a library
  // whose -O2 kernels contract inside xsimd's sin gave 4 of these 72 elements 1 ulp apart.
  (void)cache_dir();
  if (!have_compiler()) return;
  const auto x = fg::randn<double>({1, 3, 3, 8}, 19000057);
  const auto eager = fg::sin(x);
  fg::native::set_mode(fg::native::mode::sync);
  auto f = fg::jit([](const fg::tensor<double>& a) { return fg::sin(a); });
  const auto before = fg::native::counters();
  const auto native = f(x);
  const auto after = fg::native::counters();
  CHECK(after.compiles + after.disk_hits + after.memory_hits > before.compiles + before.disk_hits + before.memory_hits);
  CHECK(same_bits(eager, native));
  fg::native::set_mode(fg::native::mode::off);
}

TEST_CASE("native code keeps the interpreter's bits in long tiles: deep chains cut into segments, reductions") {
  // Long tiles (every loop counted as streaming from memory) with a partial last tile and a
  // partial last batch: the backward's long loop has more streams than a segment takes, so it
  // is cut, its crossing values going through tile buffers, and sums read tile registers.
  (void)cache_dir();
  if (!have_compiler()) return;
  fg::set_last_cache_bytes(1);
  struct restore {
    ~restore() { fg::set_last_cache_bytes(0); }
  } restore_cache_bytes;
  auto chain = [](int layers) {
    return [layers](const auto& x, const auto& y) {
      using tensor_t = std::decay_t<decltype(x)>;
      tensor_t h = x, s = fg::sum(x * y);
      for (int k = 0; k < layers; ++k) {
        h = fg::tanh(h * y);
        if (k == layers / 2) s = fg::sum(h * h);
      }
      return h * (s + 1.0) + fg::max(h);
    };
  };
  for (const fg::index_t n : {fg::index_t{2 * 16384 + 1003}, fg::index_t{16384 + 5}}) {
    check_same_as_interpreter<float>(chain(10), n, 41);
    check_same_as_interpreter<float>(chain(20), n, 43);
    check_same_as_interpreter<double>(chain(20), n, 45);
  }
  fg::native::set_mode(fg::native::mode::off);
}
