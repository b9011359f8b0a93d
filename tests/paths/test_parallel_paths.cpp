// Every path on several threads: eager element-wise ops (contiguous, bias-like, broadcast,
// strided), copies, sums and means (full, over dims in the row and column forms, several rows
// per output), maxes, matmul, linear's backward (sum_to), fg::compile and fg::jit forward and
// backward (full reductions inside the loops), and compiled autograd give the same bits with
// 1, 2, 3 and 8 threads; compiled paths equal eager and pass gradcheck with several threads.
// The grain is lowered so that these modest sizes are cut into many blocks.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
namespace fd = fusegrad::detail;
using fusegrad_test::max_normwise;
using fusegrad_test::max_rel;

namespace {

/// Sets the thread count and a small grain for one scope.
struct threads_scope {
  int before = fg::get_num_threads();
  fg::index_t grain;
  threads_scope(int n, fg::index_t g) : grain(fd::set_parallel_grain(g)) { fg::set_num_threads(n); }
  ~threads_scope() {
    fg::set_num_threads(before);
    fd::set_parallel_grain(grain);
  }
};

auto softmax_body = [](auto x, auto y) {
  auto e = fg::exp(x - fg::max(x, -1, true));
  return fg::cos(fg::cos(x)) * y + e / fg::sum(e, -1, true);
};
auto full_sum_body = [](auto x, auto y) { return fg::sum(fg::cos(x) * y) + fg::max(fg::sin(x) * y); };

/// Every path's results, in order, as raw values.
template <class T>
std::vector<std::vector<T>> run_all() {
  std::vector<std::vector<T>> outs;
  auto put = [&](const fg::tensor<T>& t) { outs.push_back(t.contiguous().to_vector()); };
  const auto x = fg::randn<T>({37, 301}, 1), y = fg::randn<T>({37, 301}, 2);
  const auto bias = fg::randn<T>({301}, 3), col = fg::randn<T>({37, 1}, 4);
  // Element-wise: contiguous, bias-like, general broadcast, strided; a copy.
  put(fg::cos(x));
  put(x * y);
  put(x + bias);
  put(x * col);
  put(x.t() * y.t());
  put(x.t().contiguous());
  // Reductions: full (contiguous and strided), over the inner dim (row form), over the outer
  // dim (column form), several rows per output, means, maxes.
  const auto big = fg::randn<T>({(1 << 17) + 77}, 5);
  put(fg::sum(big));
  put(fg::sum(x));
  put(fg::sum(x.t()));
  put(fg::sum(x, 1));
  put(fg::sum(x, 0));
  put(fg::mean(x, 1, true));
  const auto z = fg::randn<T>({8, 50, 40}, 6);
  put(fg::sum(z, std::vector<fg::index_t>{0, 2}));
  put(fg::max(big));
  put(fg::max(x));
  put(fg::max(x, 1));
  // Matrix products and linear's backward (the bias gradient is a column-form sum_to).
  put(fg::matmul(fg::randn<T>({200, 64}, 7), fg::randn<T>({64, 48}, 8)));
  put(fg::bmm(fg::randn<T>({3, 70, 20}, 9), fg::randn<T>({3, 20, 30}, 10)));
  {
    auto xl = fg::randn<T>({500, 64}, 11).requires_grad(true);
    auto w = fg::randn<T>({32, 64}, 12).requires_grad(true), b = fg::randn<T>({32}, 13).requires_grad(true);
    fg::sum(fg::relu(fg::linear(xl, w, b))).backward();
    put(xl.grad());
    put(w.grad());
    put(b.grad());
  }
  // fg::compile and fg::jit, forward and backward: rows with reductions over dims, and one
  // long row whose full sum and max are accumulated inside the loop.
  const auto compiled = fg::compile(softmax_body);
  const auto jitted = fg::jit(softmax_body);
  const auto compiled_full = fg::compile(full_sum_body);
  const auto jitted_full = fg::jit(full_sum_body);
  for (int path = 0; path < 4; ++path) {
    const bool full = path >= 2;
    auto a = (full ? big : x).detach().requires_grad(true);
    auto b = (full ? fg::randn<T>({(1 << 17) + 77}, 14) : bias).detach().requires_grad(true);
    fg::tensor<T> out = path == 0   ? compiled(a, b)
                        : path == 1 ? jitted(a, b)
                        : path == 2 ? compiled_full(a, b)
                                    : jitted_full(a, b);
    fg::sum(out * out).backward();
    put(out);
    put(a.grad());
    put(b.grad());
  }
  // A fused stage over broadcast operands (rows of the general path, forward only).
  {
    const auto bcast = fg::compile([](auto a, auto b, auto c) { return fg::cos(a) * b + c; });
    fg::no_grad ng;
    put(bcast(x, bias, col));
  }
  // Compiled autograd over an eager tape.
  {
    fg::compiled_autograd::enable on;
    auto a = x.detach().requires_grad(true), b = bias.detach().requires_grad(true);
    fg::sum(fg::exp(a * T(0.1)) * b + fg::sum(a, 0)).backward();
    put(a.grad());
    put(b.grad());
  }
  return outs;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE_TEMPLATE("every path gives the same bits with 1, 2, 3 and 8 threads", T, float, double) {
  std::vector<std::vector<T>> ref;
  {
    threads_scope one(1, 512);
    ref = run_all<T>();
  }
  for (int threads : {2, 3, 8}) {
    threads_scope many(threads, 512);
    const auto outs = run_all<T>();
    REQUIRE(outs.size() == ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i)
      CHECK_MESSAGE(same_bits(outs[i], ref[i]), "result ", i, " differs with ", threads, " threads");
  }
}

TEST_CASE("with several threads, compiled paths equal eager and pass gradcheck") {
  threads_scope three(3, 64);
  const auto compiled = fg::compile(softmax_body);
  const auto jitted = fg::jit(softmax_body);
  const auto compiled_full = fg::compile(full_sum_body);
  const auto jitted_full = fg::jit(full_sum_body);
  for (int path = 0; path < 4; ++path) {
    const bool full = path >= 2;
    const auto a0 = fg::randn<double>(full ? fg::shape{3000} : fg::shape{30, 97}, 1);
    const auto b0 = fg::randn<double>(full ? fg::shape{3000} : fg::shape{97}, 2);
    auto a = a0.detach().requires_grad(true), b = b0.detach().requires_grad(true);
    auto ea = a0.detach().requires_grad(true), eb = b0.detach().requires_grad(true);
    const fg::tensor<double> out = path == 0   ? compiled(a, b)
                                   : path == 1 ? jitted(a, b)
                                   : path == 2 ? compiled_full(a, b)
                                               : jitted_full(a, b);
    const fg::tensor<double> ref = full ? full_sum_body(ea, eb) : softmax_body(ea, eb);
    fg::sum(out * out).backward();
    fg::sum(ref * ref).backward();
    CHECK(max_rel(out, ref) < 1e-12);
    CHECK(max_normwise(ea.grad(), a.grad()) < 1e-12);
    CHECK(max_normwise(eb.grad(), b.grad()) < 1e-12);
  }
  // gradcheck on inputs large enough to be cut into blocks (grain 64: 256-value sum chunks),
  // through a scalar loss with random weights (every output's gradient counts; one backward).
  const auto w2 = fg::randn<double>({6, 97}, 10), w1 = fg::randn<double>({700}, 11);
  auto loss2 = [&w2](const auto& f) { return [&w2, p = &f](auto a, auto b) { return fg::sum((*p)(a, b) * w2); }; };
  auto r = fg::gradcheck(loss2(compiled), fg::randn<double>({6, 97}, 3), fg::randn<double>({97}, 4));
  CHECK_MESSAGE(r, r.message);
  r = fg::gradcheck(loss2(jitted), fg::randn<double>({6, 97}, 3), fg::randn<double>({97}, 4));
  CHECK_MESSAGE(r, r.message);
  r = fg::gradcheck([&](auto a, auto b) { return compiled_full(a, b) * 1.0; }, fg::randn<double>({700}, 5),
                    fg::randn<double>({700}, 6));
  CHECK_MESSAGE(r, r.message);
  r = fg::gradcheck([&](auto a, auto b) { return jitted_full(a, b) + fg::sum(a * w1); }, fg::randn<double>({700}, 5),
                    fg::randn<double>({700}, 6));
  CHECK_MESSAGE(r, r.message);
  r = fg::gradcheck(
      [&](auto a, auto w, auto b) {
        return fg::sum(fg::linear(a, w, b) * fg::randn<double>({40, 5}, 12));
      },
      fg::randn<double>({40, 9}, 7), fg::randn<double>({5, 9}, 8), fg::randn<double>({5}, 9));
  CHECK_MESSAGE(r, r.message);
}

// Products with one to three columns (a layer with one output, and its backward) have their
// own loop (rows side by side, sums in registers: much faster than the general kernel for so
// few columns; docs/architecture.md, "Every core"); it must
// give the columns of the general kernel bit for bit, whatever the rows' cut.
TEST_CASE_TEMPLATE("thin products give the wide kernel's columns bitwise, with 1 and 3 threads", T, float, double) {
  const auto a = fg::randn<T>({203, 67}, 31), wide = fg::randn<T>({67, 6}, 32);
  const auto full = fg::mm(a, wide).contiguous().to_vector();
  for (int threads : {1, 3}) {
    threads_scope ts(threads, 64);
    for (fg::index_t m : {1, 2, 3}) {
      CAPTURE(threads);
      CAPTURE(m);
      const auto thin = fg::mm(a, fg::narrow(wide, 1, 0, m).contiguous()).to_vector();
      int differ = 0;
      for (fg::index_t i = 0; i < 203; ++i)
        for (fg::index_t j = 0; j < m; ++j)
          differ += std::memcmp(&thin[static_cast<std::size_t>(i * m + j)], &full[static_cast<std::size_t>(i * 6 + j)],
                                sizeof(T)) != 0;
      CHECK(differ == 0);
    }
  }
}
