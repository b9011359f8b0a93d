// The softmax family through fg::compile's row groups, at row lengths around the SIMD batch,
// the tile and the row block (1, 3, 7, 8, 15, 16, 17, 128, 256, 257, 1000, 1030, 4099; a row of
// one tile has its max and its sums taken at once, a longer one tile by tile), and on shapes of
// more than one block of rows: the forward values bit for bit against eager in float (and softmax's gradient, whose
// terms eager sums in the same order), the same bits on 1 and 2 threads, gradients near eager's in double, and
// gradcheck through the compiled function. A row's scalars (its max, its sum, an output's
// gradient) reach the row body as one broadcast batch, read at every batch of the row.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;

namespace {
const auto softmax_loss = [](auto x, auto g) { return fg::sum(fg::softmax(x, -1) * g); };
const auto log_softmax_loss = [](auto x, auto g) { return fg::sum(fg::log_softmax(x, -1) * g); };
const auto logsumexp_g = [](auto x, auto g) { return fg::logsumexp(x, -1, true) * g; };
const auto layer_norm_g = [](auto x, auto g) { return fg::layer_norm(x, 1e-5) * g; };
const auto rms_norm_g = [](auto x, auto g) { return fg::rms_norm(x, 1e-5) * g; };

constexpr long row_lengths[] = {1, 3, 7, 8, 15, 16, 17, 128, 256, 257, 1000, 1030, 4099};

/// The rows for row length `c`: enough for several row blocks where rows are short.
long rows_for(long c) {
  if (c <= 17) return 1100;
  return c <= 257 ? 100 : 5;
}

/// `fn`'s value and x's gradient (of the sum of the value times itself) through eager or
/// through `compiled`.
template <class T, class F>
std::pair<std::vector<T>, std::vector<T>> value_and_grad(const F& fn, const fg::tensor<T>& x0, const fg::tensor<T>& g) {
  auto x = x0.detach().clone().requires_grad(true);
  const fg::tensor<T> y = fn(x, g);
  fg::sum(y * y).backward();
  return {y.to_vector(), x.grad().to_vector()};
}

/// Largest difference between `a` and `b` relative to the largest element of `a`.
double normwise(const std::vector<double>& a, const std::vector<double>& b) {
  double top = 1e-300, err = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    top = std::max(top, std::abs(a[i])), err = std::max(err, std::abs(a[i] - b[i]));
  return err / top;
}

/// One function of the family at every row length: forward bits (float) against eager, all
/// bits on 1 and 2 threads, and the double gradient near eager's.
template <class F>
void check_family_member(const F& fn, bool grad_bits) {
  const auto compiled = fg::compile(fn);
  const auto compiled_d = fg::compile(fn);
  const int threads_before = fg::get_num_threads();
  for (const long c : row_lengths) {
    CAPTURE(c);
    const long r = rows_for(c);
    const auto xf = fg::randn<float>({r, c}, 11) * 3.0f, gf = fg::randn<float>({r, c}, 12);
    const auto eager = value_and_grad(fn, xf, gf);
    fg::set_num_threads(1);
    const auto one = value_and_grad(compiled, xf, gf);
    fg::set_num_threads(2);
    const auto two = value_and_grad(compiled, xf, gf);
    fg::set_num_threads(threads_before);
    CHECK(one.first == eager.first);
    if (grad_bits) CHECK(one.second == eager.second);
    CHECK(one.first == two.first);
    CHECK(one.second == two.second);
    const auto xd = fg::randn<double>({r, c}, 13) * 3.0, gd = fg::randn<double>({r, c}, 14);
    const auto ed = value_and_grad(fn, xd, gd), cd = value_and_grad(compiled_d, xd, gd);
    CHECK(normwise(ed.first, cd.first) < 1e-13);
    CHECK(normwise(ed.second, cd.second) < 1e-11);
  }
}
}  // namespace

TEST_CASE("the softmax family through fg::compile at row lengths around the batch, tile and block") {
  SUBCASE("softmax") { check_family_member(softmax_loss, true); }
  SUBCASE("log_softmax") { check_family_member(log_softmax_loss, false); }
  SUBCASE("logsumexp") { check_family_member(logsumexp_g, false); }
  SUBCASE("layer_norm") { check_family_member(layer_norm_g, false); }
  SUBCASE("rms_norm") { check_family_member(rms_norm_g, false); }
}

TEST_CASE("row groups over more than one block of rows, on 1 and 2 threads") {
  // A block holds up to 2^18 elements (fewer where threads share the rows): these shapes
  // cross a block's end on one thread ([2100, 128]: 2048 rows and 52; [300, 1000]: 262 and 38;
  // [70, 4099]: 63 and 7; [40000, 7]: a row shorter than a batch), and cut differently on two.
  // A row meets the same nodes wherever its block ends: eager's bits on both.
  const auto softmax_c = fg::compile(softmax_loss);
  const auto log_softmax_c = fg::compile(log_softmax_loss);
  const auto layer_norm_c = fg::compile(layer_norm_g);
  const int threads_before = fg::get_num_threads();
  const std::vector<fg::shape> shapes = {{2100, 128}, {300, 1000}, {70, 4099}, {40000, 7}, {3, 700, 128}};
  for (const fg::shape& s : shapes) {
    CAPTURE(s.size());
    CAPTURE(s.back());
    const auto x = fg::randn<float>(s, 51) * 3.0f, g = fg::randn<float>(s, 52);
    const auto softmax_e = value_and_grad(softmax_loss, x, g), log_softmax_e = value_and_grad(log_softmax_loss, x, g);
    const auto layer_norm_e = value_and_grad(layer_norm_g, x, g);
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      fg::set_num_threads(threads);
      const auto softmax_got = value_and_grad(softmax_c, x, g);
      const auto log_softmax_got = value_and_grad(log_softmax_c, x, g);
      const auto layer_norm_got = value_and_grad(layer_norm_c, x, g);
      fg::set_num_threads(threads_before);
      CHECK(softmax_got == softmax_e);
      CHECK(log_softmax_got.first == log_softmax_e.first);
      CHECK(layer_norm_got.first == layer_norm_e.first);
    }
  }
}

TEST_CASE("softmax's backward with its gradient summed to a broadcast operand's shape") {
  // The backward's sums to an operand's shape are the identity (one loop fewer) only where
  // nothing was broadcast; `g` of one row makes its gradient a real sum, and the general
  // loops run.
  const auto compiled = fg::compile(softmax_loss);
  for (const long c : {1L, 7L, 17L, 1030L}) {
    CAPTURE(c);
    const auto x = fg::randn<double>({40, c}, 31) * 3.0;
    auto ge = fg::randn<double>({c}, 32).requires_grad(true), gc = ge.detach().clone().requires_grad(true);
    auto xe = x.detach().clone().requires_grad(true), xc = x.detach().clone().requires_grad(true);
    const fg::tensor<double> le = softmax_loss(xe, ge), lc = compiled(xc, gc);
    le.backward();
    lc.backward();
    CHECK(std::abs(le.item() - lc.item()) <= 1e-12 * (1 + std::abs(le.item())));
    CHECK(normwise(xe.grad().to_vector(), xc.grad().to_vector()) < 1e-11);
    CHECK(normwise(ge.grad().to_vector(), gc.grad().to_vector()) < 1e-12);
  }
}

TEST_CASE("softmax over the last dim of a 3-d value, its weights broadcast over the first dim") {
  // Rows along the last dim, each with its own max and sum (taken at once where a row is one
  // tile), beside g's gradient summed over the first dim (column sums): eager's bits.
  const auto compiled = fg::compile(softmax_loss);
  for (const long c : {5L, 128L, 300L}) {
    CAPTURE(c);
    const auto x = fg::randn<float>({6, 7, c}, 41) * 3.0f;
    auto ge = fg::randn<float>({7, c}, 42).requires_grad(true), gc = ge.detach().clone().requires_grad(true);
    auto xe = x.detach().clone().requires_grad(true), xc = x.detach().clone().requires_grad(true);
    const fg::tensor<float> le = softmax_loss(xe, ge), lc = compiled(xc, gc);
    le.backward();
    lc.backward();
    CHECK(le.item() == lc.item());
    CHECK(xe.grad().to_vector() == xc.grad().to_vector());
    CHECK(ge.grad().to_vector() == gc.grad().to_vector());
  }
}

TEST_CASE("a row's sum kept as a vector and broadcast along the columns: its log per element, eager's bits") {
  // log(sum(exp(x), -1)) looks like a row's value to the row body (computed once per row where
  // its loads are broadcast along the row), but without keepdim the [n] vector broadcasts
  // along the columns of a square x: the row body sees its load contiguous and computes the
  // log at every batch. A row of one tile, of several tiles, and with a partial batch.
  const auto f = [](auto x, auto g) { return (x - fg::log(fg::sum(fg::exp(x), -1))) * g; };
  const auto compiled = fg::compile(f);
  for (const long c : {8L, 17L, 128L, 300L}) {
    CAPTURE(c);
    const auto x = fg::randn<float>({c, c}, 61), g = fg::randn<float>({c, c}, 62);
    const auto eager = value_and_grad(f, x, g), got = value_and_grad(compiled, x, g);
    CHECK(got.first == eager.first);
    const auto xd = fg::randn<double>({c, c}, 63), gd = fg::randn<double>({c, c}, 64);
    CHECK(normwise(value_and_grad(f, xd, gd).second, value_and_grad(fg::compile(f), xd, gd).second) < 1e-11);
  }
}

TEST_CASE("the softmax family through fg::compile passes gradcheck") {
  for (const long c : {1L, 7L, 17L}) {
    CAPTURE(c);
    const auto x = fg::randn<double>({3, c}, 21), g = fg::randn<double>({3, c}, 22);
    for (const auto& r :
         {fg::gradcheck(fg::compile(softmax_loss), x, g), fg::gradcheck(fg::compile(log_softmax_loss), x, g),
          fg::gradcheck(fg::compile(logsumexp_g), x, g), fg::gradcheck(fg::compile(layer_norm_g), x, g),
          fg::gradcheck(fg::compile(rms_norm_g), x, g)})
      CHECK_MESSAGE(r.ok, r.message);
  }
}
