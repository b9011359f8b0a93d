// Native code for row steps (jit/native_emitter.hpp, jit/row_step.hpp): the softmax family and a
// normalisation, forward and backward, run by generated C++ with the interpreter's bits and
// eager mode's, at every row length (one value, partial batches, one tile, several, a partial
// last tile), one row or many, on one thread or two; and the row step really runs the code.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fusegrad/fusegrad.hpp>
#include <fusegrad/ir/graph.hpp>
#include <fusegrad/jit/native_request.hpp>
#include <fusegrad/jit/program.hpp>
#include <string>
#include <vector>

#include "native_fixture.hpp"

namespace fg = fusegrad;

namespace {

using native_test::cache_dir;
using native_test::have_compiler;

/// True when `a` and `b` hold the same bytes (and shape).
template <class T>
bool same_bytes(const fg::tensor<T>& a, const fg::tensor<T>& b) {
  if (a.shape() != b.shape()) return false;
  const auto u = a.to_vector(), v = b.to_vector();
  return u.size() == v.size() && (u.empty() || std::memcmp(u.data(), v.data(), u.size() * sizeof(T)) == 0);
}

/// `f(x, g)`'s value and the gradients of its sum: through a new fg::jit function in native
/// mode `m`, or eagerly (`jitted` false).
template <class T, class F>
std::vector<fg::tensor<T>> value_and_grads(F f, bool jitted, fg::native::mode m, const fg::tensor<T>& x0,
                                           const fg::tensor<T>& g0) {
  fg::native::set_mode(m);
  auto jf = fg::jit(f);
  std::vector<fg::tensor<T>> out;
  for (int call = 0; call < 2; ++call) {  // the second call hits the cache entry
    const auto x = x0.detach().requires_grad(true), g = g0.detach().requires_grad(true);
    const auto r = jitted ? jf(x, g) : f(x, g);
    fg::sum(r).backward();
    out = {r.detach(), x.grad(), g.grad()};
  }
  fg::native::set_mode(fg::native::mode::off);
  return out;
}

/// Native rows against the interpreter's and eager mode's, byte for byte, on [R, C] for every
/// R, C and thread count the test names.
template <class T, class F>
void rows_same_bits(F f, std::uint64_t seed) {
  for (const int threads : {1, 2}) {
    fg::set_num_threads(threads);
    for (const fg::index_t R : {1, 5, 300})
      for (const fg::index_t C : {1, 3, 7, 8, 15, 16, 17, 1000, 1030, 4099}) {
        if (R * C > 300 * 1030 && threads == 2) continue;  // (the largest ones once)
        CAPTURE(threads);
        CAPTURE(R);
        CAPTURE(C);
        const auto x = fg::randn<T>({R, C}, seed), g = fg::randn<T>({R, C}, seed + 1);
        const auto before = fg::native::counters();
        const auto interp = value_and_grads<T>(f, true, fg::native::mode::off, x, g);
        const auto native = value_and_grads<T>(f, true, fg::native::mode::sync, x, g);
        const auto eager = value_and_grads<T>(f, false, fg::native::mode::off, x, g);
        const auto after = fg::native::counters();
        CHECK(after.failures == before.failures);
        CHECK(after.compiles + after.disk_hits + after.memory_hits >
              before.compiles + before.disk_hits + before.memory_hits);
        for (std::size_t i = 0; i < interp.size(); ++i) {
          CAPTURE(i);
          CHECK(same_bytes(interp[i], native[i]));
          CHECK(same_bytes(eager[i], native[i]));
        }
      }
  }
  fg::set_num_threads(1);
}

auto softmax_g = [](const auto& x, const auto& g) { return fg::softmax(x, -1) * g; };
auto log_softmax_g = [](const auto& x, const auto& g) { return fg::log_softmax(x, -1) * g; };
auto logsumexp_keep = [](const auto& x, const auto& g) { return fg::logsumexp(x, -1, true) * g; };
auto logsumexp_drop = [](const auto& x, const auto& g) { return fg::logsumexp(x * g, -1, false); };
// A row scalar times a single element (a full mean computed before the row step), splatted.
auto scaled_by_one = [](const auto& x, const auto& g) {
  return fg::log_softmax(x, -1) * g + fg::logsumexp(x, -1, true) * fg::mean(g);
};
auto normalise = [](const auto& x, const auto& g) {
  const auto d = x - fg::mean(x, {-1}, true);
  return d * (1.0 / fg::sqrt(fg::mean(d * d, {-1}, true) + 1e-5)) * g;
};

}  // namespace

TEST_CASE("native row steps: softmax, log_softmax, logsumexp and a normalisation keep the interpreter's bits") {
  (void)cache_dir();
  if (!have_compiler()) {
    MESSAGE("no c++ on PATH: native code is not tested here");
    return;
  }
  rows_same_bits<float>(softmax_g, 1);
  rows_same_bits<double>(softmax_g, 3);
  rows_same_bits<float>(log_softmax_g, 5);
  rows_same_bits<double>(log_softmax_g, 7);
  rows_same_bits<float>(logsumexp_keep, 9);
  rows_same_bits<double>(logsumexp_keep, 11);
  rows_same_bits<float>(logsumexp_drop, 13);
  rows_same_bits<double>(logsumexp_drop, 15);
  rows_same_bits<float>(normalise, 17);
  rows_same_bits<double>(normalise, 19);
  rows_same_bits<float>(scaled_by_one, 21);
  rows_same_bits<double>(scaled_by_one, 23);
}

TEST_CASE("a row step runs its generated code once installed") {
  (void)cache_dir();
  if (!have_compiler()) return;
  fg::ir::graph<float> gr;
  const fg::ir::value<float> a{&gr, gr.add_input({6, 37})};
  const std::uint64_t last = 2;  // dim 1
  const fg::ir::value<float> m{&gr, gr.add_reduction(fg::ir::node_kind::max, a.id, last, true)};
  const auto e = fg::exp(a - m);
  const fg::ir::value<float> s{&gr, gr.add_reduction(fg::ir::node_kind::sum, e.id, last, true)};
  const auto y = e / s;
  const fg::detail::jit::program<float> p(gr, std::vector<int>{y.id});
  std::size_t rows_step = p.num_steps();
  for (std::size_t l = 0; l < p.num_steps(); ++l)
    if (p.steps()[l].rows >= 0) rows_step = l;
  REQUIRE(rows_step < p.num_steps());
  const auto x = fg::randn<float>({6, 37}, 41);
  const auto interp = p.run({x})[0];
  CHECK((p.native()->rows_at(rows_step) == nullptr));
  fg::native::set_mode(fg::native::mode::sync);
  fg::detail::jit::request_native(p);
  fg::native::set_mode(fg::native::mode::off);
  // Installed: the run takes it (a null function would run the interpreter).
  REQUIRE((p.native()->rows_at(rows_step) != nullptr));
  CHECK(same_bytes(interp, p.run({x})[0]));
  CHECK(same_bytes(fg::softmax(x, -1), p.run({x})[0]));
}
