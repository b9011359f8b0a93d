// test_regress_numerics: every element-wise op gives the same bits at every position and on
// every path, on special inputs; pow is C's pow.
#include "helpers.hpp"

TEST_CASE("regression: every element-wise op gives the same bits at every position and on every path") {
  check_unary(
      "neg", [](auto x) { return -x; }, [](float x) { return -x; });
  check_unary("exp", [](auto x) { return fg::exp(x); });
  check_unary("log", [](auto x) { return fg::log(x); });
  check_unary("sin", [](auto x) { return fg::sin(x); });
  check_unary("cos", [](auto x) { return fg::cos(x); });
  check_unary("tanh", [](auto x) { return fg::tanh(x); });
  check_unary("sigmoid", [](auto x) { return fg::sigmoid(x); });
  check_unary(
      "relu", [](auto x) { return fg::relu(x); }, [](float x) { return 0.0f > x ? 0.0f : x; });
  check_unary(
      "abs", [](auto x) { return fg::abs(x); }, [](float x) { return std::abs(x); });
  check_unary(
      "sqrt", [](auto x) { return fg::sqrt(x); }, [](float x) { return std::sqrt(x); });
  check_unary(
      "step", [](auto x) { return fg::step(x); }, [](float x) { return c_bool(x > 0); });
  check_unary(
      "sign", [](auto x) { return fg::sign(x); }, c_sign);
  for (const float s : {0.0f, -1.0f, 2.5f, f_inf, f_nan}) {
    CAPTURE(s);
    check_unary(
        "x + s", [s](auto x) { return x + s; }, [s](float x) { return x + s; });
    check_unary(
        "x - s", [s](auto x) { return x - s; }, [s](float x) { return x - s; });
    check_unary(
        "s - x", [s](auto x) { return s - x; }, [s](float x) { return s - x; });
    check_unary(
        "x * s", [s](auto x) { return x * s; }, [s](float x) { return x * s; });
    check_unary(
        "x / s", [s](auto x) { return x / s; }, [s](float x) { return x / s; });
    check_unary(
        "s / x", [s](auto x) { return s / x; }, [s](float x) { return s / x; });
  }
  // Integer exponents up to 16 multiply (x^3 = x * x * x, x^-2 = 1 / (x * x), rounded more
  // than once, as PyTorch's x^3 is); the others are C's pow.
  for (const float p : {3.0f, -2.0f, 4.0f, 16.0f}) {
    CAPTURE(p);
    check_unary("pow(x, p)", [p](auto x) { return fg::pow(x, p); });
  }
  for (const float p : {0.0f, 1.0f, 2.0f, -1.0f, 0.5f, 2.5f, -2.5f, 17.0f, 1e9f, f_inf, -f_inf, f_nan}) {
    CAPTURE(p);
    check_unary(
        "pow(x, p)", [p](auto x) { return fg::pow(x, p); }, [p](float x) { return std::pow(x, p); });
  }
  check_binary(
      "add", [](auto a, auto b) { return a + b; }, [](float a, float b) { return a + b; });
  check_binary(
      "sub", [](auto a, auto b) { return a - b; }, [](float a, float b) { return a - b; });
  check_binary(
      "mul", [](auto a, auto b) { return a * b; }, [](float a, float b) { return a * b; });
  check_binary(
      "div", [](auto a, auto b) { return a / b; }, [](float a, float b) { return a / b; });
  check_binary(
      "maximum", [](auto a, auto b) { return fg::maximum(a, b); }, c_max);
  check_binary(
      "pow", [](auto a, auto b) { return fg::pow(a, b); }, [](float a, float b) { return std::pow(a, b); });
  check_binary(
      "gt", [](auto a, auto b) { return fg::gt(a, b); }, [](float a, float b) { return c_bool(a > b); });
  check_binary(
      "ge", [](auto a, auto b) { return fg::ge(a, b); }, [](float a, float b) { return c_bool(a >= b); });
  check_binary(
      "lt", [](auto a, auto b) { return fg::lt(a, b); }, [](float a, float b) { return c_bool(a < b); });
  check_binary(
      "le", [](auto a, auto b) { return fg::le(a, b); }, [](float a, float b) { return c_bool(a <= b); });
  check_binary(
      "eq", [](auto a, auto b) { return fg::eq(a, b); }, [](float a, float b) { return c_bool(a == b); });
  check_binary(
      "ne", [](auto a, auto b) { return fg::ne(a, b); }, [](float a, float b) { return c_bool(a != b); });
}

TEST_CASE("regression: pow is C's pow, in SIMD lanes too") {
  // The cases xsimd's exp(b log a) got wrong, in a SIMD body and alone (a row's last partial
  // batch), in float and double (the grid of every special value is in the test above).
  const std::vector<std::pair<float, float>> named = {{1.0f, f_nan},   {1.0f, f_inf},  {-1.0f, f_inf},
                                                      {-1.0f, -f_inf}, {-f_inf, 0.5f}, {-f_inf, -0.5f},
                                                      {-0.0f, -1.0f},  {-0.0f, 3.0f},  {f_nan, 0.0f}};
  for (const auto& pq : named) {
    const float p = pq.first, q = pq.second;  // not a structured binding: clang 14's CAPTURE
    CAPTURE(p);
    CAPTURE(q);
    const float want = std::pow(p, q);
    const double want_d = std::pow(static_cast<double>(p), static_cast<double>(q));
    for (const index_t len : {index_t{1}, index_t{9}, index_t{16}}) {
      for (const float v : fg::pow(fg::full<float>({len}, p), fg::full<float>({len}, q)).to_vector())
        CHECK(same(v, want));
      for (const double v : fg::pow(fg::full<double>({len}, p), fg::full<double>({len}, q)).to_vector())
        CHECK((std::isnan(want_d) ? std::isnan(v) : v == want_d));
    }
  }
  // Ordinary values, exactly std::pow: xsimd's exp(b log a) lost ulps as |b log a| grew, and
  // flushed pow(subnormal, 1) to 0.
  const td a = fg::rand<double>({1000}, 1, 1e-3, 1e3), b = fg::randn<double>({1000}, 2) * 20.0;
  const auto av = a.to_vector(), bv = b.to_vector(), r = fg::pow(a, b).to_vector();
  for (std::size_t i = 0; i < r.size(); ++i) CHECK(r[i] == std::pow(av[i], bv[i]));
  const double tiny = std::numeric_limits<double>::denorm_min();
  CHECK(fg::pow(fg::full<double>({8}, tiny), fg::ones<double>({8})).to_vector() == std::vector<double>(8, tiny));
}
