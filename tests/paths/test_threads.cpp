// fusegrad from several threads at once: one compiled function object shared by 8 threads
// (its instance cache is filled concurrently on the first call), each thread with its own
// tensors and tape; results checked against eager in the same thread; and backwards from
// several threads into shared leaves and through shared nodes. Run under the `tsan` preset
// for data races.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
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
  const auto f = fg::jit(
      [](auto x, auto y) {
        auto c = fg::cos(fg::cos(x));
        if (fg::mean(c).item() > 0.7) c = c * 2.0;
        return c * y + body(x, y);
      },
      {.recompile_limit = 64});  // every graph compiled: the threads share programs, not eager fallbacks
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

// Concurrent backwards into shared leaves (and through shared nodes) accumulate under the
// leaf's lock, as in PyTorch (docs/eager.md, "Thread safety").

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
      } catch (...) { ++other; }
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
  for (double g : w.grad().to_vector())
    CHECK(g == doctest::Approx(threads * rounds * 2.0 * std::cos(1.0)).epsilon(1e-12));
}

// Library threads inside user threads. 8 user threads call jitted and compiled
// functions whose loops run on 4 library threads: the shared lease keeps the library's
// workers at 3 in all (no oversubscription), nothing waits on anything (no deadlock), and
// every result has the bits of a 1-thread run. Run under the `tsan` preset for races.

TEST_CASE("8 user threads x 4 library threads: no oversubscription, no deadlock, 1-thread bits") {
  const int threads_before = fg::get_num_threads();
  const fg::index_t grain_before = fg::detail::set_parallel_grain(256);  // modest sizes split
  const auto jitted = fg::jit(body);
  const auto compiled = fg::compile([](auto x, auto y) { return fg::sum(fg::cos(x) * y) + fg::cos(x); });
  constexpr int users = 8, rounds = 6;
  auto input = [](int t, int r, std::uint64_t k) {
    return fg::randn<float>({3 + (t + r) % 3, 1500}, static_cast<std::uint64_t>(100 * t + r) + k);
  };
  // The 1-thread results first.
  fg::set_num_threads(1);
  std::vector<std::vector<float>> ref(users * rounds * 2);
  for (int t = 0; t < users; ++t)
    for (int r = 0; r < rounds; ++r) {
      const auto x = input(t, r, 0), y = input(t, r, 1);
      ref[static_cast<std::size_t>((t * rounds + r) * 2)] = fg::tensor<float>(jitted(x, y)).to_vector();
      ref[static_cast<std::size_t>((t * rounds + r) * 2 + 1)] = fg::tensor<float>(compiled(x, y)).to_vector();
    }
  fg::set_num_threads(4);
  std::latch start(users);
  std::atomic<int> differs{0}, most_busy{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < users; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) {
        const auto x = input(t, r, 0), y = input(t, r, 1);
        const auto a = fg::tensor<float>(jitted(x, y)).to_vector();
        const auto b = fg::tensor<float>(compiled(x, y)).to_vector();
        if (a != ref[static_cast<std::size_t>((t * rounds + r) * 2)] ||
            b != ref[static_cast<std::size_t>((t * rounds + r) * 2 + 1)])
          ++differs;
        int busy = fg::detail::workers_busy().load(), seen = most_busy.load();
        while (busy > seen && !most_busy.compare_exchange_weak(seen, busy)) {}
      }
    });
  for (auto& th : pool) th.join();
  CHECK(differs == 0);
  CHECK(most_busy <= 3);                          // 4 threads: at most 3 lent at once, for all users
  CHECK(fg::detail::workers_busy().load() == 0);  // every lease returned
  fg::set_num_threads(threads_before);
  fg::detail::set_parallel_grain(grain_before);
}

TEST_CASE("a parallel loop inside a parallel block runs on its own thread") {
  const int before = fg::get_num_threads();
  fg::set_num_threads(4);
  std::atomic<int> inner_blocks{0}, outer_blocks{0};
  fg::detail::parallel_for(64, 8, [&](fg::index_t, fg::index_t) {
    ++outer_blocks;
    fg::detail::parallel_for(100000, 10, [&](fg::index_t b, fg::index_t e) {
      CHECK(b == 0);  // one block: the whole inner loop
      CHECK(e == 100000);
      ++inner_blocks;
    });
  });
  CHECK(inner_blocks == outer_blocks);
  fg::set_num_threads(before);
}

TEST_CASE("8 user threads' parallel loops run on at most 8 + 3 threads at once (4 library threads)") {
  const int before = fg::get_num_threads();
  fg::set_num_threads(4);
  constexpr int users = 8;
  std::atomic<int> active{0}, peak{0}, peak_lent{0};
  std::atomic<long> covered{0};
  auto raise = [](std::atomic<int>& m, int v) {
    int seen = m.load();
    while (v > seen && !m.compare_exchange_weak(seen, v)) {}
  };
  std::latch start(users);
  std::vector<std::thread> pool;
  for (int t = 0; t < users; ++t)
    pool.emplace_back([&] {
      start.arrive_and_wait();
      for (int r = 0; r < 40; ++r)
        fg::detail::parallel_for(1 << 14, 1 << 10, [&](fg::index_t b, fg::index_t e) {
          raise(peak, ++active);
          raise(peak_lent, fg::detail::workers_busy().load());
          volatile double s = 0;
          for (fg::index_t i = b; i < e; ++i) s = s + static_cast<double>(i);
          covered += e - b;
          --active;
        });
    });
  for (auto& th : pool) th.join();
  CHECK(covered == static_cast<long>(users) * 40 * (1 << 14));
  CHECK(peak <= users + 3);
  CHECK(peak_lent <= 3);
  CHECK(fg::detail::workers_busy().load() == 0);
  fg::set_num_threads(before);
}

TEST_CASE("light_mutex: mutual exclusion under contention, waiters woken, try_lock") {
  // The lock of tape nodes and tensors' autograd state (core/mutex.hpp). A plain counter
  // incremented under it by 4 threads must end exact (a lost update shows a broken lock); a
  // holder that sleeps makes the others wait on the word and be woken (they finish).
  fg::detail::light_mutex mu;
  long counter = 0;  // not atomic: only the lock orders its updates
  volatile int sink = 0;
  constexpr int threads = 4, rounds = 50000;
  std::latch start(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) {
        std::lock_guard lock(mu);
        const long v = counter;  // read, wait, write: without the lock, updates are lost
        for (int k = 0; k < 16; ++k) sink = k;
        counter = v + 1;
        if (t == 0 && r % 10000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  for (auto& th : pool) th.join();
  CHECK(counter == static_cast<long>(threads) * rounds);
  CHECK(mu.try_lock());
  CHECK_FALSE(mu.try_lock());  // not recursive
  mu.unlock();
  CHECK(mu.try_lock());
  mu.unlock();
}
