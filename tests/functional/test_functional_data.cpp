// The functional transforms on real data: ranges read as data (fg::data, captured or passed
// as an argument), plain numbers inside transformed functions, jvp with argnums, elements of a
// range (x[i]) broadcast beside ranges, outputs built with fg::concat and their m x n
// Jacobians; and fg::grad(f)(x) against fg::value_and_grad(f)(x).second, bit for bit, wherever
// the call is inlined.
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

namespace {

template <class T>
bool same_bits(T a, T b) {
  if constexpr (sizeof(T) == 8) return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
  else return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}
std::string message_of(auto&& fn) {
  try {
    fn();
  } catch (const fg::error& e) { return e.what(); }
  return "(no error)";
}

// ---- grad against value_and_grad: each in a call of its own, the value read or not ----------

volatile double sink;  // where a caller stores the value it reads

template <class F, class... A>
[[gnu::noinline]] auto grad_only(const F& f, const A&... a) {
  return f(a...);
}

/// The gradient by four routes: fg::grad; value_and_grad with the value stored, with the value
/// in the result's arithmetic, and dropped. GCC contracted a product into an add by the uses it
/// has where the call is inlined, so these differed in the last bits at -O2 and -O3 before the
/// scalar form rounded each op on its own.
template <class Nums, class F, class... A>
[[gnu::noinline]] auto by_grad(const F& f, const A&... a) {
  return fg::grad(f, Nums{})(a...);
}
template <class Nums, class F, class... A>
[[gnu::noinline]] auto by_vg_stored(const F& f, const A&... a) {
  auto [v, g] = fg::value_and_grad(f, Nums{})(a...);
  sink = static_cast<double>(v);
  return g;
}
template <class Nums, class F, class... A>
[[gnu::noinline]] auto by_vg_used(const F& f, const A&... a) {
  auto [v, g] = fg::value_and_grad(f, Nums{})(a...);
  if constexpr (requires { g + v * 0; }) return g + v * 0;  // (x + 0 == x: the bits of g unless g is -0)
  else return g;
}
template <class Nums, class F, class... A>
[[gnu::noinline]] auto by_vg_dropped(const F& f, const A&... a) {
  return fg::value_and_grad(f, Nums{})(a...).second;
}

template <class T, class Nums, class F, class... A>
void check_agree(const char* name, const F& f, const A&... a) {
  INFO(std::string(name));
  const auto g1 = by_grad<Nums>(f, a...), g2 = by_vg_stored<Nums>(f, a...), g4 = by_vg_dropped<Nums>(f, a...);
  const auto g5 = fg::grad(f, Nums{})(a...);  // inline, beside the others
  auto flat = [](const auto& g) {
    if constexpr (requires { std::get<0>(g); }) return std::array<T, 2>{std::get<0>(g), std::get<1>(g)};
    else return std::array<T, 1>{g};
  };
  const auto a1 = flat(g1), a2 = flat(g2), a4 = flat(g4), a5 = flat(g5);
  for (std::size_t i = 0; i < a1.size(); ++i) {
    CHECK(same_bits(a1[i], a2[i]));
    CHECK(same_bits(a1[i], a4[i]));
    CHECK(same_bits(a1[i], a5[i]));
    CHECK(std::isfinite(a1[i]));
  }
  if constexpr (sizeof...(A) == 1) {
    const T g3 = by_vg_used<Nums>(f, a...);
    if (a1[0] != 0) CHECK(same_bits(a1[0], g3));
  }
}

template <class T>
void agree_at(T x) {
  using A0 = fg::argnums_t<0>;
  using A01 = fg::argnums_t<0, 1>;
  using A1 = fg::argnums_t<1>;
  check_agree<T, A0>(
      "cubic", [](auto x) { return x * x * x - 2.0 * x + 1.0; }, x);
  check_agree<T, A0>(
      "horner", [](auto x) { return ((x * 1.5 + 2.0) * x + 3.0) * x * x + 0.25 * x; }, x);
  check_agree<T, A0>(
      "quartic", [](auto x) { return x * x * x * x + x * x; }, x);
  check_agree<T, A0>(
      "sin exp", [](auto x) { return fg::sin(x) * fg::exp(x * 0.5) + x * x; }, x);
  check_agree<T, A0>(
      "pow", [](auto x) { return fg::pow(x, 3.0) * x + fg::pow(x * x + 1.0, 0.5); }, x);
  check_agree<T, A0>(
      "division", [](auto x) { return (x * x + 1.0) / (x * 3.0 + 2.0) - x / (x * x + 1.0); }, x);
  check_agree<T, A0>(
      "log tanh sqrt", [](auto x) { return fg::log(x * x + 1.0) * fg::tanh(x) + fg::sqrt(x * x + 2.0) * x; }, x);
  check_agree<T, A0>(
      "nested",
      [](auto x) {
        auto a = fg::sin(x) * x + fg::cos(x);
        auto b = a * a * x + fg::exp(-a);
        return b / (a * a + 1.0) + fg::sigmoid(b) * x;
      },
      x);
  check_agree<T, A0>(
      "reciprocal sum", [](auto x) { return 1.0 / (x * x + 1.0) + 2.0 / (x * x + 3.0) + x * 0.5; }, x);
  check_agree<T, A0>(
      "cos cos", [](auto x) { return fg::cos(fg::cos(x)) * (x * x + 0.5); }, x);
  check_agree<T, A0>(
      "exp log", [](auto x) { return fg::exp(fg::log(x * x + 1.5) * 0.5) * x - x * x * 0.125; }, x);
  check_agree<T, A0>(
      "softplus", [](auto x) { return fg::log1p(fg::exp(x)) * x + x * x * x * 0.1; }, x);
  check_agree<T, A0>(
      "atan square", [](auto x) { return fg::atan(x) * fg::square(x + 1.0) + x; }, x);
  check_agree<T, A0>(
      "pow real", [](auto x) { return fg::pow(x * x + 0.5, 1.7) - fg::pow(x * x + 2.0, -0.3) * x; }, x);
  check_agree<T, A0>(
      "erf", [](auto x) { return fg::erf(x) * x * x + fg::exp(-x * x) * 0.5; }, x);
  check_agree<T, A0>(
      "rational", [](auto x) { return (x * x * x + 2.0 * x) / (x * x + x * 0.5 + 1.0); }, x);
  // two arguments, argnums
  check_agree<T, A01>(
      "sin(x) y + x^2", [](auto x, auto y) { return fg::sin(x) * y + x * x; }, x, T(2) - x);
  check_agree<T, A01>(
      "rosenbrock 2-D", [](auto x, auto y) { return (1.0 - x) * (1.0 - x) + 100.0 * (y - x * x) * (y - x * x); }, x,
      x * T(0.5) + T(1));
  check_agree<T, A01>(
      "x / y + log", [](auto x, auto y) { return x / (y * y + 1.0) + fg::log(x * x + y * y + 1.0) * x; }, x, T(0.75));
  check_agree<T, A1>(
      "x^y in y", [](auto x, auto y) { return fg::pow(x * x + 1.0, y) * y + fg::exp(x * y); }, x, T(1.25));
}

}  // namespace

TEST_CASE("grad and value_and_grad agree bit for bit: 20 scalar functions, float and double") {
  for (double x : {0.3, 0.7, 1.3, -2.1, 5.5, -0.45}) {
    INFO("x = " << x);
    volatile double xd = x;  // (not a constant the compiler could fold)
    volatile float xf = static_cast<float>(x);
    agree_at<double>(xd);
    agree_at<float>(xf);
  }
  // at compile time too
  constexpr auto poly = [](auto x) { return x * x * x - 2.0 * x * x + 1.0; };
  static_assert(fg::grad(poly)(2.0) == fg::value_and_grad(poly)(2.0).second);
  static_assert(fg::grad(poly)(1.5f) == fg::value_and_grad(poly)(1.5f).second);
}

TEST_CASE("grad and value_and_grad agree bit for bit on ranges, and with .into") {
  std::vector<double> x(37), gx(37), gy(37);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * double(i)) + 0.1;
  auto f = [](const auto& x, auto s) { return fg::sum(fg::exp(x * s) * x) + s * fg::mean(fg::cos(x)); };
  const auto g1 = fg::grad(f, fg::argnums<0, 1>)(x, 0.75);
  const auto [v, g2] = fg::value_and_grad(f, fg::argnums<0, 1>)(x, 0.75);
  double gs = 0;
  const double v3 = fg::value_and_grad(f, fg::argnums<0, 1>).into(std::span<double>(gx), gs)(x, 0.75);
  CHECK(same_bits(v, v3));
  CHECK(same_bits(std::get<1>(g1), std::get<1>(g2)));
  CHECK(same_bits(std::get<1>(g1), gs));
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(same_bits(std::get<0>(g1)[i], std::get<0>(g2)[i]));
    CHECK(same_bits(std::get<0>(g1)[i], gx[i]));
  }
}

// ---- plain numbers --------------------------------------------------------------------------

TEST_CASE("plain numbers in op functions: constants of the expression, the op's own value") {
  CHECK(fg::sqrt(2.0) == std::sqrt(2.0));
  CHECK(fg::exp(-0.05) == fg::ops::exp_op::value(-0.05));
  CHECK(fg::log(3.0f) == std::log(3.0f));
  CHECK(fg::relu(-1.5) == 0.0);
  CHECK(fg::maximum(2.0, 3.0) == 3.0);
  CHECK(fg::pow(2.0, 10.0) == 1024.0);
  static_assert(fg::pow(3.0, 2.0) == 9.0 && fg::abs(-2.0) == 2.0);
  // a captured maturity and rate, numbers; the spot an argument
  const double T = 0.75, r = 0.03;
  auto f = [T, r](auto s) { return s * s * fg::sqrt(T) * fg::exp(-r * T); };
  const auto [v, g] = fg::value_and_grad(f)(2.0);
  CHECK(v == doctest::Approx(4.0 * std::sqrt(T) * std::exp(-r * T)).epsilon(1e-15));
  CHECK(g == doctest::Approx(4.0 * std::sqrt(T) * std::exp(-r * T)).epsilon(1e-15));
  // beside a range
  std::vector<double> x{0.5, 1.0, 1.5};
  auto fr = [T](const auto& x) { return fg::sum(x * fg::sqrt(T) + fg::exp(T)); };
  const auto gr = fg::grad(fr)(x);
  for (double gi : gr) CHECK(gi == doctest::Approx(std::sqrt(T)).epsilon(1e-15));
}

// ---- data -----------------------------------------------------------------------------------

TEST_CASE("fg::data: a captured range read element-wise, as a range argument, not differentiated") {
  std::vector<double> x(37), w(37);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1 * double(i) - 1.3, w[i] = std::cos(0.3 * double(i));
  // the same function with w as a second argument: the same bits
  auto f2 = [](const auto& x, const auto& w) { return fg::sum(fg::sin(x) * w + x * x); };
  auto f1 = [&w](const auto& x) { return fg::sum(fg::sin(x) * fg::data(w) + x * x); };
  const auto [v2, g2] = fg::value_and_grad(f2)(x, w);
  const auto [v1, g1] = fg::value_and_grad(f1)(x);
  CHECK(same_bits(v1, v2));
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(same_bits(g1[i], g2[i]));
  // passed as an argument: handed to the function unchanged
  auto f3 = [](const auto& x, const auto& z) { return fg::sum(fg::sin(x) * z + x * x); };
  const auto [v3, g3] = fg::value_and_grad(f3)(x, fg::data(w));
  CHECK(same_bits(v3, v2));
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(same_bits(g3[i], g2[i]));
  // a slice of data, against the same slice of an argument
  auto f4 = [&w](const auto& x) { return fg::sum(fg::slice(x, 1, 30) * fg::slice(fg::data(w), 5, 30)); };
  const auto g4 = fg::grad(f4)(x);
  CHECK(g4[0] == 0.0);
  for (std::size_t i = 1; i <= 30; ++i) CHECK(g4[i] == w[i + 4]);
  CHECK(g4[31] == 0.0);
  // the Hessian-vector product of sum(w x^2): 2 w v
  std::vector<double> v(37, 0.5);
  const auto hv = fg::hvp([&w](const auto& x) { return fg::sum(fg::data(w) * x * x); })(x, v);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(hv[i] == doctest::Approx(2 * w[i] * 0.5).epsilon(1e-15));
}

TEST_CASE("fg::data with scalar arguments only: the span engine runs it (Monte Carlo)") {
  std::vector<double> z(10001);
  std::mt19937_64 gen(7);
  std::normal_distribution<double> nd;
  for (double& zi : z) zi = nd(gen);
  const double K = 1.1, T = 0.5;
  // the discounted mean payoff of a call on S0 exp((r - sigma^2/2) T + sigma sqrt(T) z)
  auto price = [&](auto s0, auto sigma, auto r) {
    const auto st = s0 * fg::exp((r - 0.5 * sigma * sigma) * T + sigma * fg::sqrt(T) * fg::data(z));
    return fg::exp(-r * T) * fg::mean(fg::relu(st - K));
  };
  const auto [v, g] = fg::value_and_grad(price, fg::argnums<0, 1, 2>)(1.0, 0.3, 0.02);
  // against a hand loop: value and the pathwise derivatives
  double pv = 0, delta = 0, vega = 0, rho = 0;
  const double df = std::exp(-0.02 * T);
  for (double zi : z) {
    const double st = 1.0 * std::exp((0.02 - 0.045) * T + 0.3 * std::sqrt(T) * zi);
    if (st <= K) continue;
    pv += st - K, delta += st / 1.0, vega += st * (-0.3 * T + std::sqrt(T) * zi), rho += T * st;
  }
  const double n = double(z.size());
  pv *= df / n, delta *= df / n, vega *= df / n, rho = rho * df / n - T * pv;
  CHECK(v == doctest::Approx(pv).epsilon(1e-12));
  CHECK(std::get<0>(g) == doctest::Approx(delta).epsilon(1e-12));
  CHECK(std::get<1>(g) == doctest::Approx(vega).epsilon(1e-12));
  CHECK(std::get<2>(g) == doctest::Approx(rho).epsilon(1e-12));
  CHECK(same_bits(fg::grad(price)(1.0, 0.3, 0.02), std::get<0>(g)));
  // forward mode, with argnums: a tangent for sigma only; the draws need none
  const auto [y, dy] = fg::jvp(price, fg::argnums<1>, std::tuple{1.0, 0.3, 0.02}, std::tuple{1.0});
  CHECK(y == doctest::Approx(v).epsilon(1e-14));
  CHECK(dy == doctest::Approx(std::get<1>(g)).epsilon(1e-12));
  // vjp of the scalar output
  const auto [yv, pb] = fg::vjp(price, 1.0, 0.3, 0.02);
  CHECK(yv == doctest::Approx(v).epsilon(1e-14));
  CHECK(std::get<2>(pb(2.0)) == doctest::Approx(2 * std::get<2>(g)).epsilon(1e-12));
}

TEST_CASE("jvp with argnums: the unselected arguments are data, with no tangent") {
  std::vector<double> x{0.5, -1.0, 2.0, 0.25, 3.0}, w{1.0, 2.0, 3.0, 4.0, 5.0}, t{1.0, 0.0, -1.0, 0.5, 2.0};
  auto f = [](const auto& x, const auto& w, auto s) { return fg::sum(w * fg::sin(x) * s); };
  const auto [y, dy] =
      fg::jvp(f, fg::argnums<0>, std::tuple<const std::vector<double>&, const std::vector<double>&, double>(x, w, 1.5),
              std::tuple<const std::vector<double>&>(t));
  double ey = 0, edy = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    ey += w[i] * std::sin(x[i]) * 1.5, edy += w[i] * std::cos(x[i]) * 1.5 * t[i];
  CHECK(y == doctest::Approx(ey).epsilon(1e-14));
  CHECK(dy == doctest::Approx(edy).epsilon(1e-14));
  // the scalar argument selected: d/ds
  const auto [y2, ds] =
      fg::jvp(f, fg::argnums<2>, std::tuple<const std::vector<double>&, const std::vector<double>&, double>(x, w, 1.5),
              std::tuple{1.0});
  CHECK(ds == doctest::Approx(ey / 1.5).epsilon(1e-14));
  // scalars only
  const auto [y3, d3] =
      fg::jvp([](auto a, auto b) { return fg::sin(a) * b; }, fg::argnums<1>, std::tuple{0.5, 2.0}, std::tuple{1.0});
  CHECK(y3 == doctest::Approx(std::sin(0.5) * 2.0));
  CHECK(d3 == doctest::Approx(std::sin(0.5)));
}

// ---- elements, concat, Jacobians --------------------------------------------------------------

TEST_CASE("x[i]: one element, a scalar broadcast over a range; its gradient summed into element i") {
  std::vector<double> x{0.5, -1.25, 2.0, 0.75, -0.5, 1.5};
  // f = sum(x0 * x) + x2 * x3: df/dx0 = sum(x) + x0, df/dxj = x0 (j != 0) + [x3 at 2, x2 at 3]
  auto f = [](const auto& x) { return fg::sum(x[0] * x) + x[2] * x[3]; };
  const auto [v, g] = fg::value_and_grad(f)(x);
  double s = 0;
  for (double xi : x) s += xi;
  CHECK(v == doctest::Approx(x[0] * s + x[2] * x[3]));
  CHECK(g[0] == doctest::Approx(s + x[0]));
  CHECK(g[1] == doctest::Approx(x[0]));
  CHECK(g[2] == doctest::Approx(x[0] + x[3]));
  CHECK(g[3] == doctest::Approx(x[0] + x[2]));
  CHECK(g[5] == doctest::Approx(x[0]));
  // the same as a slice of length 1 of a second argument: eager's broadcasting, bit for bit
  auto fs = [](const auto& x, auto x0) { return fg::sum(x0 * x); };
  auto fe = [](const auto& x) { return fg::sum(x[0] * x); };
  const auto [vs, gs] = fg::value_and_grad(fs, fg::argnums<1>)(x, x[0]);
  const auto [ve, ge] = fg::value_and_grad(fe)(x);
  CHECK(same_bits(vs, ve));
  CHECK(same_bits(gs + x[0], ge[0]));
  // Hessian: d2/dx0 dxj = 1 (j != 0), 2 at (0, 0)
  const auto h = fg::hessian(fe)(x);
  CHECK(h[0] == 2.0);
  CHECK(h[1] == 1.0);
  CHECK(h[6] == 1.0);
  CHECK(h[7] == 0.0);
}

TEST_CASE("jacobian of a 3 -> 4 map on spans, built with fg::concat, against its closed form") {
  auto f = [](const auto& x) { return fg::concat(x[0] * x[1], x[1] * x[2], fg::sin(x[2]), x[0] + x[1] + x[2]); };
  for (const auto& x : {std::vector<double>{0.5, -1.25, 2.0}, std::vector<double>{-0.3, 0.8, -2.2}}) {
    const auto j = fg::jacobian(f)(x);
    const double e[4][3] = {{x[1], x[0], 0}, {0, x[2], x[1]}, {0, 0, std::cos(x[2])}, {1, 1, 1}};
    REQUIRE(j.size() == 12);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 3; ++c)
        CHECK(j[static_cast<std::size_t>(r * 3 + c)] == doctest::Approx(e[r][c]).epsilon(1e-15));
    // the value, and vjp: J^T ybar
    const auto [y, pb] = fg::vjp(f, x);
    REQUIRE(y.size() == 4);
    CHECK(y[2] == std::sin(x[2]));
    const std::vector<double> yb{1.0, -2.0, 0.5, 3.0};
    const auto g = pb(yb);
    for (int c = 0; c < 3; ++c) {
      double s = 0;
      for (int r = 0; r < 4; ++r) s += e[r][c] * yb[static_cast<std::size_t>(r)];
      CHECK(g[static_cast<std::size_t>(c)] == doctest::Approx(s).epsilon(1e-15));
    }
  }
}

TEST_CASE("concat of parts of different lengths: element-wise parts, reductions, numbers") {
  std::array<double, 5> x{0.5, -1.0, 2.0, 0.25, 1.5};
  // [x0 * x[1..3), sum(x^2), exp(x), 1]: m = 2 + 1 + 5 + 1 = 9
  auto f = [](const auto& x) { return fg::concat(x[0] * fg::slice(x, 1, 2), fg::sum(x * x), fg::exp(x), 1.0); };
  const auto j = fg::jacobian(f)(x);
  REQUIRE(j.size() == 9 * 5);
  auto at = [&](int r, int c) { return j[static_cast<std::size_t>(r * 5 + c)]; };
  CHECK(at(0, 0) == x[1]);
  CHECK(at(0, 1) == x[0]);
  CHECK(at(1, 0) == x[2]);
  CHECK(at(1, 2) == x[0]);
  CHECK(at(1, 1) == 0.0);
  for (int c = 0; c < 5; ++c) {
    CHECK(at(2, c) == doctest::Approx(2 * x[static_cast<std::size_t>(c)]));
    for (int k = 0; k < 5; ++k) CHECK(at(3 + k, c) == (k == c ? std::exp(x[static_cast<std::size_t>(c)]) : 0.0));
    CHECK(at(8, c) == 0.0);
  }
  const auto [y, pb] = fg::vjp(f, x);
  CHECK(y.size() == 9);
  CHECK(y[8] == 1.0);
  // jvp of the concat: the Jacobian times a direction
  const std::array<double, 5> t{1, 0, 0, 0, 0};
  const auto [yj, tj] = fg::jvp(f, std::span<const double>(x), std::span<const double>(t));
  CHECK(tj[0] == x[1]);
  CHECK(tj[2] == doctest::Approx(2 * x[0]));
}

// ---- misuse ---------------------------------------------------------------------------------

TEST_CASE("errors: data of the wrong length, an element out of range, a cotangent of the wrong size") {
  std::vector<double> x(1000, 0.5), z(999, 1.0);
  auto f = [&z](const auto& x) { return fg::sum(x * fg::data(z)); };
  const std::string m = message_of([&] { (void)fg::grad(f)(x); });
  CHECK(m.find("1000") != std::string::npos);
  CHECK(m.find("999") != std::string::npos);
  CHECK(m.find("fg::data") != std::string::npos);
  CHECK(m.find("value_and_grad") != std::string::npos);
  const std::string e = message_of([&] {
    (void)fg::grad([](const auto& x) { return fg::sum(x * x[5]); })(std::vector<double>{1, 2});
  });
  CHECK(e.find("element 5 of a range of 2 elements") != std::string::npos);
  const std::vector<double> x3{1, 2, 3};  // (the pullback holds a range by reference)
  const auto [y, pb] = fg::vjp([](const auto& x) { return fg::concat(x, x[0]); }, x3);
  CHECK(y.size() == 4);
  const std::string c = message_of([&] { (void)pb(std::vector<double>{1, 2, 3}); });
  CHECK(c.find("a cotangent of 3 elements for an output of 4") != std::string::npos);
}
