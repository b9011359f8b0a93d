// test_ops: bugs these tests found, fixed in the library; the backward rules against their
// compositions; comparisons with a scalar on either side; cat and stack.
#include "helpers.hpp"

// =========================================================================================
// Regressions: bugs these tests found, fixed in the library.
// =========================================================================================

TEST_CASE("regression: pow at a zero base agrees between SIMD lanes and the scalar tail") {
  // pow's SIMD path used xsimd::pow, which returns 0 for a zero base whatever the
  // exponent; the scalar tail (std::pow) and PyTorch give pow(0, 0) = 1, pow(0, -1) = inf.
  // 17 doubles fill at least two SIMD batches at any width up to 8 (AVX2: [0 x 16, 1]).
  CHECK(fg::pow(fg::zeros<double>({17}), 0).to_vector() == std::vector<double>(17, 1.0));
  CHECK(fg::pow(fg::zeros<double>({17}), -1).to_vector() == std::vector<double>(17, INFINITY));
  // The same for a tensor exponent (pow_op::value reaches xsimd::pow through ADL).
  CHECK(fg::pow(fg::zeros<double>({17}), fg::zeros<double>({17})).to_vector() == std::vector<double>(17, 1.0));
  // And so d/dx pow(x, 1) = 1 * pow(x, 0) is 0 instead of 1 at x = 0 in the SIMD lanes.
  td x = fg::zeros<double>({17});
  x.requires_grad(true);
  fg::sum(fg::pow(x, 1)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>(17, 1.0));
}

TEST_CASE("regression: a tensor with a size-0 dim after a dim of size > 1 is contiguous") {
  // contiguous_strides({2, 0}) = {1, 1}, but is_contiguous() wants stride 0 for dim 0
  // (the running product after the size-0 dim), so a fresh [2, 0] tensor reported
  // non-contiguous (PyTorch: every empty tensor is contiguous). view() then throws, and so
  // does reshape(), whose contiguous copy has the same strides; batched matmul with an
  // empty inner dim fails the same way.
  const td e = fg::zeros<double>({2, 0});
  CHECK(e.is_contiguous());
  CHECK_NOTHROW((void)e.reshape({0}));
  CHECK_NOTHROW((void)e.view({0, 2}));
  CHECK_NOTHROW((void)fg::matmul(fg::zeros<double>({2, 3, 0}), fg::zeros<double>({2, 0, 4})));
}

TEST_CASE("regression: pow with a negative base and an integer exponent in SIMD lanes") {
  // xsimd's pow is exp(b log a): NaN for a negative base even with an integer exponent.
  const auto x = fg::full<double>({17}, -2.0);
  CHECK(fg::pow(x, 3).to_vector() == std::vector<double>(17, -8.0));
  for (double v : fg::pow(x, fg::full<double>({17}, 2.0)).to_vector()) CHECK(v == doctest::Approx(4.0).epsilon(1e-14));
  CHECK(std::isnan(fg::pow(x, 0.5).to_vector()[3]));
}

TEST_CASE("regression: d pow(a, b) / db is 0 at a == 0 (PyTorch), not 0 * log 0") {
  auto a = fg::zeros<double>({9}).requires_grad(true);
  auto b = fg::full<double>({9}, 2.0).requires_grad(true);
  fg::sum(fg::pow(a, b)).backward();
  CHECK(b.grad().to_vector() == std::vector<double>(9, 0.0));
}

TEST_CASE("regression: sum(x, {}) reduces over all dims, not dim 0") {
  const auto x = fg::ones<double>({3, 4});
  CHECK(fg::sum(x, {}).shape() == fg::shape{});
  CHECK(fg::mean(x, {}).shape() == fg::shape{});
  CHECK(fg::max(x, {}).shape() == fg::shape{});
}

TEST_CASE("tanh_backward and sigmoid_backward equal their three-op compositions bit for bit") {
  // Each is one op whose value rounds after each step as g * (1 - y * y) and g * (y * (1 - y))
  // round as three eager ops (GCC would otherwise contract a multiply and an add into one
  // fused multiply-add): the gradients of tanh and sigmoid keep their bits on every path. 37
  // elements: the SIMD body and the scalar tail, in float and double.
  auto check = [](auto zero) {
    using T = decltype(zero);
    const auto g = fg::randn<T>({37}, 11) * T(3);
    const auto y = fg::tanh(fg::randn<T>({37}, 12) * T(2));  // outputs of tanh and sigmoid's range
    const auto s = fg::sigmoid(fg::randn<T>({37}, 13) * T(3));
    const fg::tensor<T> t_op = fg::tanh_backward(g, y), t_ref = g * (T(1) - y * y);
    const fg::tensor<T> s_op = fg::sigmoid_backward(g, s), s_ref = g * (s * (T(1) - s));
    int t_bad = 0, s_bad = 0;
    for (fg::index_t i = 0; i < 37; ++i) {
      t_bad += t_op.data_ptr()[i] != t_ref.data_ptr()[i];
      s_bad += s_op.data_ptr()[i] != s_ref.data_ptr()[i];
    }
    CHECK(t_bad == 0);
    CHECK(s_bad == 0);
  };
  check(0.0f);
  check(0.0);
}

// PyTorch's spellings: comparison operators are the element-wise comparisons (on tensors, on
// fg::compile's symbolic values and under fg::jit), and cat/stack take braced lists.
TEST_CASE("x > 0.0, 0.5 < x and the other orderings are gt/ge/lt/le on every path") {
  const auto x = fg::from_vector<double>({-1.0, 0.5, 2.0, 0.0}, {2, 2});
  const auto y = fg::from_vector<double>({0.0, 0.5, 1.0, 0.0}, {2, 2});
  CHECK((x > 0.0).to_vector() == fg::gt(x, 0.0).to_vector());
  CHECK((x >= 0.5).to_vector() == fg::ge(x, 0.5).to_vector());
  CHECK((x < y).to_vector() == fg::lt(x, y).to_vector());
  CHECK((x <= y).to_vector() == fg::le(x, y).to_vector());
  CHECK((0.5 < x).to_vector() == std::vector<double>{0, 0, 1, 0});
  CHECK((0.5 <= x).to_vector() == std::vector<double>{0, 1, 1, 0});
  CHECK((1 > x).to_vector() == std::vector<double>{1, 1, 0, 1});
  CHECK((0 >= x).to_vector() == std::vector<double>{1, 0, 0, 1});
  // A mask written with operators, through fg::compile and fg::jit: eager's values and gradients.
  auto masked = [](auto a, auto b) { return fg::sum(fg::where(a > 0.0, a * b, b) * (b >= a)); };
  const auto f = fg::compile(masked);
  const auto j = fg::jit([&](const fg::tensor<double>& a, const fg::tensor<double>& b) { return masked(a, b); });
  auto run = [&](auto&& fn) {
    auto a = fg::from_vector<double>({-1.0, 0.5, 2.0, 0.25}, {2, 2}).requires_grad(true);
    auto b = fg::from_vector<double>({0.0, 0.5, 1.0, 3.0}, {2, 2}).requires_grad(true);
    const fg::tensor<double> v = fn(a, b);
    v.backward();
    return std::vector<std::vector<double>>{v.to_vector(), a.grad().to_vector(), b.grad().to_vector()};
  };
  const auto want = run(masked);
  CHECK(want[0] == std::vector<double>{0.0 + 0.25 + 0.0 + 0.75});
  CHECK(run(f) == want);
  CHECK(run(j) == want);
}

TEST_CASE("cat and stack take braced lists, as torch.cat([a, b], 1)") {
  const auto a = fg::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const auto b = fg::from_vector<float>({5, 6}, {2, 1});
  CHECK(fg::cat({a, b}, 1).to_vector() == fg::cat(std::vector{a, b}, 1).to_vector());
  CHECK(fg::cat({a, b}, 1).shape() == fg::shape{2, 3});
  CHECK(fg::stack({a, a}, 1).to_vector() == fg::stack(std::vector{a, a}, 1).to_vector());
  CHECK(fg::stack({a, a}).shape() == fg::shape{2, 2, 2});
}
