// Regressions of fg::compile found by hostile use: every compiled
// path (fg::compile with the eager, aot_eager and fused backends, fg::jit, and a compiled
// function traced inside fg::jit) accepts exactly what eager mode accepts, with the same
// errors, and writes every element of every gradient it produces (empty outputs, broadcasts
// over empty dims, reductions over nothing, matrix products with an empty inner dim).
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_rel;

namespace {

using D = fg::tensor<double>;

/// Fills this thread's buffer cache with buffers of `n` doubles holding 7: a later buffer of
/// that size that a kernel forgets to write reads 7, not the zeros fresh memory often holds.
void poison_buffers(fg::index_t n) {
  std::vector<D> junk;
  for (int i = 0; i < 8; ++i) junk.push_back(fg::full<double>({n}, 7.0));
}

/// The outcome of one path: values and gradients, or the error it threw.
struct outcome {
  std::optional<std::string> error;
  D value;
  std::vector<D> grads;
};

template <class F, class... X>
outcome run_path(const F& f, const X&... xs) {
  outcome r;
  std::vector<D> in{xs.detach().clone().requires_grad(true)...};
  try {
    const D y = [&]<std::size_t... I>(std::index_sequence<I...>) { return D(f(in[I]...)); }
    (std::index_sequence_for<X...>{});
    r.value = y.detach().clone();
    fg::sum(y * fg::randn<double>(y.shape(), 99)).backward();
  } catch (const fg::error& e) {
    r.error = e.what();
    return r;
  }
  for (const auto& x : in) r.grads.push_back(x.grad());
  return r;
}

/// Runs `fn` eagerly (the reference) and through every compiled path on copies of `xs`:
/// the same error, or the same values and gradients (gradients fully written: a NaN or a
/// stray value fails the comparison).
template <class F, class... X>
void same_on_every_path(F fn, const X&... xs) {
  const outcome ref = run_path(fn, xs...);
  auto check = [&](const std::string& path, const outcome& got) {
    CAPTURE(path);
    const std::string ref_error = ref.error.value_or("none"), got_error = got.error.value_or("none");
    CAPTURE(ref_error);
    CAPTURE(got_error);
    REQUIRE(ref.error.has_value() == got.error.has_value());
    if (ref.error) {
      CHECK(*got.error == *ref.error);
      return;
    }
    CHECK(max_rel(ref.value, got.value) < 1e-12);
    REQUIRE(got.grads.size() == ref.grads.size());
    for (std::size_t i = 0; i < ref.grads.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got.grads[i].defined() == ref.grads[i].defined());
      if (ref.grads[i].defined()) CHECK(max_rel(ref.grads[i], got.grads[i]) < 1e-12);
    }
  };
  check("compile<eager>", run_path(fg::compile<fg::backend::eager>(fn), xs...));
  check("compile<aot_eager>", run_path(fg::compile<fg::backend::aot_eager>(fn), xs...));
  check("compile<fused>", run_path(fg::compile(fn), xs...));
  check("compile<fused, save_all>", run_path(fg::compile<fg::backend::fused, fg::policy::save_all>(fn), xs...));
  check("jit", run_path(fg::jit(fn), xs...));
  check("jit(compile)", run_path(fg::jit(fg::compile(fn)), xs...));
}

auto bilinear = [](auto x, auto y) { return x * y + fg::sin(y) * x; };

}  // namespace

TEST_CASE("item 4: the gradient of an input broadcast over an empty output is written (zeros)") {
  // x [0, n] * y [n]: the output is empty, y's gradient is a sum over nothing.
  for (fg::index_t n : {fg::index_t{3}, fg::index_t{8192}}) {
    CAPTURE(n);
    poison_buffers(n);
    auto x = fg::zeros<double>({0, n}).requires_grad(true);
    auto y = fg::randn<double>({n}, 2).requires_grad(true);
    fg::sum(fg::compile(bilinear)(x, y)).backward();
    REQUIRE(y.grad().shape() == fg::shape{n});
    CHECK(max_rel(fg::zeros<double>({n}), y.grad()) == 0);
    CHECK(x.grad().shape() == fg::shape{0, n});
  }
  poison_buffers(8192);
  same_on_every_path(bilinear, fg::zeros<double>({0, 8192}), fg::randn<double>({8192}, 2));
  poison_buffers(8192);
  same_on_every_path(bilinear, fg::zeros<double>({2, 0, 8192}), fg::randn<double>({1, 1, 8192}, 2));
  // The empty dim inside, a 0-d operand, a reduction of the empty product.
  same_on_every_path([](auto x, auto y, auto s) { return fg::exp(x * y) * s + y; }, fg::randn<double>({4, 0, 3}, 1),
                     fg::randn<double>({4, 1, 3}, 2), fg::randn<double>({}, 3));
  same_on_every_path([](auto x, auto y) { return fg::sum(x * y, -1, true) + fg::sum(y); }, fg::zeros<double>({0, 5}),
                     fg::randn<double>({5}, 2));
  same_on_every_path([](auto x, auto y) { return fg::sum(fg::tanh(x) * y); }, fg::zeros<double>({0, 5}),
                     fg::randn<double>({1, 5}, 2));
}

TEST_CASE("item 7: max over an empty dim throws eager's error on every path") {
  auto max_last = [](auto x) { return fg::max(x, -1); };
  auto max_all = [](auto x) { return fg::max(x) * 2.0; };
  auto max_keep = [](auto x, auto y) { return fg::exp(fg::max(x * y, -1, true)); };
  // The reference itself throws (eager raises, as PyTorch does).
  CHECK_THROWS_WITH_AS((void)fg::max(fg::zeros<double>({2, 0}), -1), doctest::Contains("over an empty dim"), fg::error);
  same_on_every_path(max_last, fg::zeros<double>({2, 0}));
  same_on_every_path(max_all, fg::zeros<double>({0}));
  same_on_every_path(max_all, fg::zeros<double>({3, 0, 2}));
  same_on_every_path(max_keep, fg::zeros<double>({3, 0}), fg::randn<double>({1, 0}, 2));
  // Not empty reductions: each of the zero results of [0, 3] reduces 3 values.
  same_on_every_path(max_last, fg::zeros<double>({0, 3}));
  same_on_every_path(max_keep, fg::zeros<double>({0, 3}), fg::randn<double>({3}, 2));
}

TEST_CASE("item 7: matrix products with an empty dim equal eager (zeros, fully written)") {
  auto mm = [](auto a, auto b) { return fg::matmul(a, b); };
  auto mm_act = [](auto a, auto b, auto c) { return fg::sin(fg::matmul(fg::exp(a), b)) + c; };
  auto lin = [](auto x, auto w, auto b) { return fg::linear(x, w, b); };
  // Ordinary shapes first: inside fg::jit a compiled product used to lose its gradient.
  same_on_every_path(mm_act, fg::randn<double>({4, 3}, 1), fg::randn<double>({3, 2}, 2), fg::randn<double>({2}, 3));
  poison_buffers(8192);
  same_on_every_path(mm, fg::randn<double>({4, 0}, 1), fg::randn<double>({0, 3}, 2));     // inner dim 0
  same_on_every_path(mm, fg::randn<double>({4, 3}, 1), fg::randn<double>({3, 0}, 2));     // no columns
  same_on_every_path(mm, fg::randn<double>({0, 3}, 1), fg::randn<double>({3, 2}, 2));     // no rows
  same_on_every_path(mm, fg::randn<double>({2, 4, 0}, 1), fg::randn<double>({0, 3}, 2));  // batched rows
  same_on_every_path(mm, fg::randn<double>({2048, 0}, 1), fg::randn<double>({0, 4}, 2));  // 8192 outputs
  same_on_every_path(mm_act, fg::randn<double>({4, 0}, 1), fg::randn<double>({0, 3}, 2), fg::randn<double>({3}, 3));
  same_on_every_path(lin, fg::randn<double>({5, 0}, 1), fg::randn<double>({2, 0}, 2), fg::randn<double>({2}, 3));
  // The result of the inner-dim-0 product holds its elements (it used to have no storage).
  const D y = fg::compile(mm)(fg::randn<double>({4, 0}, 1), fg::randn<double>({0, 3}, 2));
  REQUIRE(y.shape() == fg::shape{4, 3});
  CHECK(max_rel(fg::zeros<double>({4, 3}), y) == 0);
}

TEST_CASE("item 7: compiled matrix products reject what eager rejects, with eager's error") {
  auto mm = [](auto a, auto b) { return fg::matmul(a, b); };
  auto lin = [](auto x, auto w) { return fg::linear(x, w); };
  same_on_every_path(mm, fg::randn<double>({4, 3}, 1), fg::randn<double>({2, 5}, 2));
  same_on_every_path(mm, fg::randn<double>({4, 0}, 1), fg::randn<double>({3, 0}, 2));
  same_on_every_path(mm, fg::randn<double>({}, 1), fg::randn<double>({3, 2}, 2));
  same_on_every_path(lin, fg::randn<double>({4, 3}, 1), fg::randn<double>({2, 4}, 2));
  // What fg::compile cannot express (a vector or a batch of matrices as the second operand)
  // is an error there, never a different product: eager's [4, 6] x [2, 3, 5] is an error too.
  same_on_every_path(mm, fg::randn<double>({4, 6}, 1), fg::randn<double>({2, 3, 5}, 2));
  for (const auto& b : {fg::randn<double>({3}, 2), fg::randn<double>({2, 3, 5}, 2)}) {
    const auto a = b.dim() == 1 ? fg::randn<double>({4, 3}, 1) : fg::randn<double>({2, 4, 3}, 1);
    CHECK_NOTHROW((void)fg::matmul(a, b));
    CHECK_THROWS_WITH_AS((void)fg::compile(mm)(a, b), doctest::Contains("second operand is a matrix [k, n]"),
                         fg::error);
  }
}

TEST_CASE("item 7: reductions over dim -1 of a 0-d input, as eager") {
  same_on_every_path([](auto x) { return fg::sum(x, -1); }, fg::randn<double>({}, 1));
  same_on_every_path([](auto x) { return fg::sum(x, -1, true) * 3.0; }, fg::randn<double>({}, 1));
  same_on_every_path([](auto x, auto y) { return fg::mean(x * y, -1) + fg::max(fg::exp(x), -1, true); },
                     fg::randn<double>({}, 1), fg::randn<double>({}, 2));
}

TEST_CASE("a stage whose operands all have one shape (the fused loops' plain pass) writes every element as eager") {
  // The plain pass (kernel/fused_runner.hpp) runs such a stage on this thread without the
  // per-tile hooks: its stores and the sums a node writes straight into are fresh buffers it
  // never fills. Poisoned buffers show an element left unwritten; the sizes put elements in
  // the SIMD body, the scalar tail, one partial tile and several tiles, and one element (the
  // general pass). `x * y + z`'s backward sums a load (the output's gradient) to z's shape:
  // no node writes it, and the plain pass copies it after the row.
  auto coscos = [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; };
  auto xyz = [](auto x, auto y, auto z) { return x * y + z; };
  auto shared = [](auto x, auto y) {
    auto c = fg::cos(x);
    return c * y + fg::exp(c) * x;
  };
  for (const fg::index_t n : {1, 2, 7, 8, 9, 300, 1000, 4099}) {
    CAPTURE(n);
    poison_buffers(n);
    const D x = fg::randn<double>({n}, 1), y = fg::randn<double>({n}, 2), z = fg::randn<double>({n}, 3);
    same_on_every_path(coscos, x, y);
    same_on_every_path(xyz, x, y, z);
    same_on_every_path(shared, x, y);
  }
}
