// fusegrad from several threads at once: one compiled function object shared by 8 threads
// (its instance cache is filled concurrently on the first call), each thread with its own
// tensors and tape; results checked against eager in the same thread; and backwards from
// several threads into shared leaves and through shared nodes. Run under the `tsan` preset
// for data races.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_rel;

namespace {
auto body = [](auto x, auto y) {
  auto e = fg::exp(x - fg::max(x, -1, true));
  return fg::cos(fg::cos(x)) * y + e / fg::sum(e, -1, true);
};

}  // namespace

TEST_CASE("one compiled function called from 8 threads at once") {
  const auto f = fg::compile(body);
  constexpr int threads = 8, rounds = 20;
  std::latch start(threads);
  std::atomic<int> bad{0}, done{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();  // every thread's first call races for the instance cache
      for (int r = 0; r < rounds; ++r) {
        const fg::index_t rows = 1 + (t + r) % 4, cols = 3 + 17 * ((t * 7 + r) % 5);
        const auto seed = static_cast<std::uint64_t>(1000 * t + r);
        auto xa = fg::randn<double>({rows, cols}, seed).requires_grad(true);
        auto ya = fg::randn<double>({cols}, seed + 1).requires_grad(true);
        auto xb = xa.detach().clone().requires_grad(true), yb = ya.detach().clone().requires_grad(true);
        const fg::tensor<double> va = f(xa, ya), vb = body(xb, yb);
        fg::sum(va * va).backward();
        fg::sum(vb * vb).backward();
        if (max_rel(va, vb) > 1e-12 || max_rel(xa.grad(), xb.grad()) > 1e-12 || max_rel(ya.grad(), yb.grad()) > 1e-12)
          ++bad;
        ++done;
      }
    });
  }
  for (auto& th : pool) th.join();
  CHECK(done == threads * rounds);
  CHECK(bad == 0);
}

TEST_CASE("copies of a compiled function, and float and double, from several threads") {
  const auto f = fg::compile(body);
  std::atomic<int> bad{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&, t, g = f] {  // each thread owns a copy (its own instance cache)
      for (int r = 0; r < 10; ++r) {
        auto x = fg::randn<float>({2, 33}, static_cast<std::uint64_t>(t * 100 + r)).requires_grad(true);
        auto y = fg::randn<float>({33}, 7);
        const fg::tensor<float> out = g(x, y);
        fg::sum(out).backward();
        const auto xd = fg::randn<double>({2, 33}, static_cast<std::uint64_t>(t * 100 + r));
        const fg::tensor<double> od = g(xd, fg::randn<double>({33}, 7));
        const auto of = out.to_vector();
        const auto odv = od.to_vector();
        for (std::size_t i = 0; i < of.size(); ++i)
          if (std::abs(of[i] - odv[i]) > 1e-4 * (1 + std::abs(odv[i]))) ++bad;
        if (!x.grad().defined()) ++bad;
      }
    });
  }
  for (auto& th : pool) th.join();
  CHECK(bad == 0);
}

TEST_CASE("one jitted function called from 8 threads at once (shared cache, dynamic shapes, graph breaks)") {
  // A data-dependent branch (a graph break), varying sizes (recompiles, then a dynamic entry),
  // float and double: the cache is shared and filled concurrently.
  const auto f = fg::jit([](auto x, auto y) {
    auto c = fg::cos(fg::cos(x));
    if (fg::mean(c).item() > 0.7) c = c * 2.0;
    return c * y + body(x, y);
  }, {.recompile_limit = 64});  // every graph compiled: the threads share programs, not eager fallbacks
  constexpr int threads = 8, rounds = 25;
  std::latch start(threads);
  std::atomic<int> bad{0}, done{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) {
        const fg::index_t rows = 2 + (t + r) % 3, cols = 3 + 5 * ((t * 3 + r) % 4);
        const auto seed = static_cast<std::uint64_t>(1000 * t + r);
        auto xa = fg::randn<double>({rows, cols}, seed).requires_grad(true);
        auto ya = fg::randn<double>({cols}, seed + 1).requires_grad(true);
        auto xb = xa.detach().clone().requires_grad(true), yb = ya.detach().clone().requires_grad(true);
        const fg::tensor<double> va = f(xa, ya);
        auto cb = fg::cos(fg::cos(xb));
        if (fg::mean(cb).item() > 0.7) cb = cb * 2.0;
        const fg::tensor<double> vb = cb * yb + body(xb, yb);
        fg::sum(va * va).backward();
        fg::sum(vb * vb).backward();
        if (max_rel(va, vb) > 1e-12 || max_rel(xa.grad(), xb.grad()) > 1e-10 || max_rel(ya.grad(), yb.grad()) > 1e-10)
          ++bad;
        const auto xf = fg::randn<float>({rows, cols}, seed);
        const auto of = f(xf, fg::randn<float>({cols}, seed + 1)).to_vector();
        const auto od = va.to_vector();
        for (std::size_t i = 0; i < of.size(); ++i)
          if (std::abs(of[i] - od[i]) > 1e-4 * (1 + std::abs(od[i]))) ++bad;
        ++done;
      }
    });
  }
  for (auto& th : pool) th.join();
  CHECK(done == threads * rounds);
  CHECK(bad == 0);
}

// Issue 16, item 11: concurrent backwards into shared leaves (and through shared nodes)
// accumulate under the leaf's lock, as in PyTorch (docs/eager.md, "Thread safety").

TEST_CASE("two threads, 2,000 backwards each, into one shared leaf") {
  auto w = fg::ones<double>({3}).requires_grad(true);
  std::atomic<int> hook_calls{0};
  w.register_hook([&](const fg::tensor<double>&) { ++hook_calls; });
  constexpr int threads = 2, rounds = 2000;
  std::latch start(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      start.arrive_and_wait();  // the first forwards race for the leaf's AccumulateGrad too
      for (int r = 0; r < rounds; ++r) fg::sum(w * 1.0).backward();
    });
  for (auto& th : pool) th.join();
  CHECK(hook_calls == threads * rounds);
  REQUIRE(w.grad().defined());
  for (double g : w.grad().to_vector()) CHECK(g == threads * rounds);  // each backward adds 1
}

TEST_CASE("threads running backward through one retained graph, with retain_grad on an intermediate") {
  const std::vector<double> wv{0.5, -1.25, 2.0};
  auto w = fg::from_vector<double>(wv).requires_grad(true);
  auto m = fg::sin(w) * w;
  m.retain_grad();
  const auto y = fg::sum(m);
  constexpr int threads = 4, rounds = 300;
  std::latch start(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) y.backward(fg::backward_options{.retain_graph = true});
    });
  for (auto& th : pool) th.join();
  const double n = threads * rounds;
  const auto gw = w.grad().to_vector(), gm = m.grad().to_vector();
  REQUIRE(gw.size() == 3);
  REQUIRE(gm.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(gw[i] == doctest::Approx(n * (std::cos(wv[i]) * wv[i] + std::sin(wv[i]))).epsilon(1e-12));
    CHECK(gm[i] == n);
  }
}

TEST_CASE("threads racing to free one graph: each backward either runs or is refused cleanly") {
  auto w = fg::from_vector<double>({1.5, -2.0}).requires_grad(true);
  const auto y = fg::sum(w * w);  // MulBackward0 saves both inputs; the first backward frees them
  constexpr int threads = 4;
  std::latch start(threads);
  std::atomic<int> ran{0}, refused{0}, other{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      start.arrive_and_wait();
      try {
        y.backward();
        ++ran;
      } catch (const fg::error& e) {
        if (std::string(e.what()).find("a second time") != std::string::npos) ++refused;
        else ++other;
      } catch (...) {
        ++other;
      }
    });
  for (auto& th : pool) th.join();
  CHECK(other == 0);
  CHECK(ran >= 1);
  CHECK(ran + refused == threads);
  const auto g = w.grad().to_vector();
  CHECK(g[0] == 3.0 * ran);  // d/dw w^2 = 2w, once per backward that ran
  CHECK(g[1] == -4.0 * ran);
}

TEST_CASE("concurrent backwards into a shared leaf under compiled autograd") {
  auto w = fg::ones<double>({4}).requires_grad(true);
  constexpr int threads = 2, rounds = 200;
  std::latch start(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      fg::compiled_autograd::enable on;  // per thread
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) fg::sum(fg::sin(w) * 2.0).backward();
    });
  for (auto& th : pool) th.join();
  for (double g : w.grad().to_vector()) CHECK(g == doctest::Approx(threads * rounds * 2.0 * std::cos(1.0)).epsilon(1e-12));
}
