// Numerics: the same bits everywhere, sums that do not drift, PyTorch's special values.
//   - Every element-wise op gives bit-identical results wherever an element sits (SIMD body,
//     the last partial batch, a row's tail) and on every path (eager contiguous and strided,
//     fg::compile's fused loops, fg::jit's programs), on special inputs (±0, ±inf, NaN, ±1,
//     subnormal, huge), and the ops C defines exactly (arithmetic, comparisons, sqrt, pow,
//     ...) give C's results there.
//   - Sums are cascaded (core/accumulate.hpp) on every path: exact where a sequential sum
//     drifts, deterministic however the values are handed over, the same bits on every path.
//   - relu(NaN) is NaN; d/dx x^0 = 0 at x = inf, d/da a^b = 0 at a = b = 0; a max with a NaN
//     is NaN and sends its gradient to the NaN elements; max's backward never divides 0 / 0.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

namespace {

using tf = fg::tensor<float>;
using td = fg::tensor<double>;
using fg::index_t;

constexpr float f_inf = std::numeric_limits<float>::infinity();
constexpr float f_nan = std::numeric_limits<float>::quiet_NaN();

/// The special inputs: signed zeros, infinities, NaN, ±1, the smallest subnormal and normal,
/// the largest finite value, and ordinary values (integers, halves, negative ones).
const std::vector<float> specials = {0.0f,
                                     -0.0f,
                                     f_inf,
                                     -f_inf,
                                     f_nan,
                                     1.0f,
                                     -1.0f,
                                     std::numeric_limits<float>::denorm_min(),
                                     std::numeric_limits<float>::min(),
                                     std::numeric_limits<float>::max(),
                                     0.5f,
                                     -0.5f,
                                     2.5f,
                                     -2.5f,
                                     3.0f,
                                     -3.0f,
                                     1e-3f,
                                     100.0f};

/// The same bits (any two NaNs match: payloads are not a result).
bool same(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

/// Index of the first element where `a` and `b` differ, or -1.
index_t first_difference(const tf& a, const tf& b) {
  if (a.shape() != b.shape()) return 0;
  const auto u = a.to_vector(), v = b.to_vector();
  for (std::size_t i = 0; i < u.size(); ++i)
    if (!same(u[i], v[i])) return static_cast<index_t>(i);
  return -1;
}

/// Row length of the position tests: not a multiple of any SIMD width, so each row has a
/// full batch and a partial one, and rows start at every alignment.
constexpr index_t row = 11;

/// `rows` rows, row r filled with `v(r)`: contiguous, and the same values as a strided view
/// (rows of `row` inside rows of `row + 2`), whose rows eager mode runs one by one.
template <class F>
std::pair<tf, tf> filled(index_t rows, F v) {
  std::vector<float> a, b;
  for (index_t r = 0; r < rows; ++r) {
    for (index_t k = 0; k < row; ++k) a.push_back(v(r));
    for (index_t k = 0; k < row + 2; ++k) b.push_back(v(r));
  }
  return {fg::from_vector<float>(a, {rows, row}), fg::slice(fg::from_vector<float>(b, {rows, row + 2}), 1, 0, row)};
}

/// Checks an element-wise function's results: the same bits at every position of a row (so
/// in the SIMD body, in the padded last batch, at every alignment) and on every path: eager on
/// contiguous and on strided operands, fg::compile (fused loops), fg::jit (a tile program).
/// Returns eager mode's results.
template <class F, class... X>
std::vector<float> check_positions(const std::string& what, F f, const std::pair<X, X>&... in) {
  CAPTURE(what);
  const tf eager = f(in.first...);
  const tf strided = f(in.second...);
  const tf compiled = fg::compile<fg::backend::fused>(f)(in.first...);
  const tf jitted = fg::jit(f)(in.first...);
  const auto v = eager.to_vector();
  const auto rows = eager.shape()[0];
  for (index_t r = 0; r < rows; ++r)
    for (index_t k = 1; k < row; ++k) {
      const float first = v[static_cast<std::size_t>(r * row)], here = v[static_cast<std::size_t>(r * row + k)];
      if (!same(first, here)) {
        INFO("row ", r, " position ", k, ": ", here, ", position 0: ", first);
        CHECK(same(first, here));
      }
    }
  CHECK(first_difference(eager, strided) == -1);
  CHECK(first_difference(eager, compiled) == -1);
  CHECK(first_difference(eager, jitted) == -1);
  return v;
}

/// No reference: an op whose SIMD value (xsimd's exp, sin, ...) may differ from <cmath>'s by
/// an ulp; it is still checked for the same bits everywhere.
struct no_ref {};

/// `check_positions` on every special value; `ref` (a scalar function giving C's result,
/// exactly) checks the values too.
template <class F, class R = no_ref>
void check_unary(const std::string& what, F f, R ref = {}) {
  const auto n = static_cast<index_t>(specials.size());
  const auto v = check_positions(what, f, filled(n, [](index_t r) { return specials[static_cast<std::size_t>(r)]; }));
  if constexpr (!std::is_same_v<R, no_ref>)
    for (std::size_t r = 0; r < specials.size(); ++r) {
      CAPTURE(what);
      CAPTURE(specials[r]);
      CHECK(same(v[r * row], ref(specials[r])));
    }
}

/// `check_positions` on every pair of special values (see `check_unary`).
template <class F, class R = no_ref>
void check_binary(const std::string& what, F f, R ref = {}) {
  const auto n = static_cast<index_t>(specials.size());
  const auto v =
      check_positions(what, f, filled(n * n, [n](index_t r) { return specials[static_cast<std::size_t>(r / n)]; }),
                      filled(n * n, [n](index_t r) { return specials[static_cast<std::size_t>(r % n)]; }));
  if constexpr (!std::is_same_v<R, no_ref>)
    for (std::size_t r = 0; r < specials.size() * specials.size(); ++r) {
      const float a = specials[r / specials.size()], b = specials[r % specials.size()];
      CAPTURE(what);
      CAPTURE(a);
      CAPTURE(b);
      CHECK(same(v[r * row], ref(a, b)));
    }
}

float c_max(float a, float b) { return a != a ? a : b != b ? b : a > b ? a : b; }  // NaN propagates
float c_sign(float a) { return a != a ? a : a > 0 ? 1.0f : a < 0 ? -1.0f : 0.0f; }
float c_bool(bool b) { return b ? 1.0f : 0.0f; }

}  // namespace

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

// Found by the differential fuzzer (`--seed 402`, graph 33244): sin of an expanded value gave
// another last bit under fg::jit than eagerly, because xsimd reduces a batch's arguments by
// one method picked by the batch's largest |x|, so an element's sin depended on its
// neighbours (here a huge pow result sharing its batch).
template <class T>
void check_trig_neighbours(const std::vector<T>& xs) {
  using t = fg::tensor<T>;
  const T nbs[] = {T(1000), T(1e30), std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN(), T(60)};
  for (T x : xs)
    for (T nb : nbs)
      for (index_t pos = 0; pos < 8; ++pos) {
        std::vector<T> v(8, nb);
        v[static_cast<std::size_t>(pos)] = x;
        const t batch = fg::from_vector<T>(v, {8}), alone = fg::from_vector<T>({x}, {1});
        CAPTURE(x);
        CAPTURE(nb);
        CAPTURE(pos);
        const T s = fg::sin(batch).to_vector()[static_cast<std::size_t>(pos)], s1 = fg::sin(alone).item();
        const T c = fg::cos(batch).to_vector()[static_cast<std::size_t>(pos)], c1 = fg::cos(alone).item();
        CHECK(std::memcmp(&s, &s1, sizeof(T)) == 0);
        CHECK(std::memcmp(&c, &c1, sizeof(T)) == 0);
      }
}

TEST_CASE("regression: sin and cos of an element do not depend on its neighbours in a SIMD batch") {
  // Values where xsimd's reduction methods round differently (near multiples of pi/2).
  check_trig_neighbours<double>({1.5707963267948966, 1.5707963267948968, 1.570796326794897, 0.5, -3.0});
  check_trig_neighbours<float>({58.1194649f, 1.57079637f, 0.5f, -3.0f, 100.0f});
}

// lanes::sin/cos evaluate a batch whose every |x| <= 20π inline (core/simd.hpp,
// `small_trig`): xsimd's steps for that class, written out so that the reduction is not an
// out-of-line call. They must keep xsimd's bits for every batch of the class, whichever of
// xsimd's three forms (|x| <= π/4, <= π/2, <= 20π) the batch's largest |x| picks.
template <class T>
void check_small_trig_bits() {
  using V = xsimd::batch<T>;
  constexpr std::size_t W = V::size;
  std::uint64_t state = 12345;
  auto next = [&] {  // a fixed LCG: the test sees the same values everywhere
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  const double pi = 3.14159265358979323846;
  const double limits[] = {pi / 4, pi / 2, 20 * pi};
  const T edges[] = {T(0),
                     T(-0.0),
                     T(pi / 4),
                     T(pi / 2),
                     T(pi),
                     T(3 * pi / 2),
                     T(20 * pi),
                     std::nextafter(T(pi / 4), T(0)),
                     std::nextafter(T(pi / 4), T(1)),
                     std::nextafter(T(pi / 2), T(0)),
                     std::nextafter(T(pi / 2), T(2)),
                     std::numeric_limits<T>::denorm_min(),
                     T(1e-30)};
  int bad = 0;
  for (double lim : limits)
    for (int it = 0; it < 20000; ++it) {
      alignas(64) T x[W], a[W], b[W];
      for (std::size_t l = 0; l < W; ++l) x[l] = T((2 * next() - 1) * lim);
      const T e = edges[static_cast<std::size_t>(it) % std::size(edges)];
      if (std::abs(double(e)) <= lim) x[static_cast<std::size_t>(it) % W] = (it & 1) ? -e : e;
      const V v = V::load_aligned(x);
      fg::lanes::sin(v).store_aligned(a), xsimd::sin(v).store_aligned(b);
      bad += std::memcmp(a, b, sizeof a) != 0;
      fg::lanes::cos(v).store_aligned(a), xsimd::cos(v).store_aligned(b);
      bad += std::memcmp(a, b, sizeof a) != 0;
      const auto [s, c] = fg::lanes::sincos(v);  // one reduction, both functions' bits
      s.store_aligned(a), xsimd::sin(v).store_aligned(b);
      bad += std::memcmp(a, b, sizeof a) != 0;
      c.store_aligned(a), xsimd::cos(v).store_aligned(b);
      bad += std::memcmp(a, b, sizeof a) != 0;
    }
  CHECK(bad == 0);
}

// lanes::sincos outside the inline class: batches mixing small, medium and huge arguments,
// infinities and NaN go class by class, as lanes::sin and lanes::cos do.
template <class T>
void check_sincos_every_class() {
  using V = xsimd::batch<T>;
  constexpr std::size_t W = V::size;
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const T pool[] = {T(0.5),
                    T(-3),
                    T(58.1194649),
                    T(100),
                    T(1e4),
                    T(-2e5),
                    T(1e30),
                    T(-1e30),
                    inf,
                    -inf,
                    nan,
                    T(1.5707963267948966),
                    T(-0.0),
                    std::numeric_limits<T>::max(),
                    std::numeric_limits<T>::denorm_min()};
  int bad = 0;
  for (std::size_t start = 0; start < std::size(pool); ++start) {
    alignas(64) T x[W], a[W], b[W];
    for (std::size_t l = 0; l < W; ++l) x[l] = pool[(start + l * 7) % std::size(pool)];
    const V v = V::load_aligned(x);
    const auto [s, c] = fg::lanes::sincos(v);
    s.store_aligned(a), fg::lanes::sin(v).store_aligned(b);
    bad += std::memcmp(a, b, sizeof a) != 0;
    c.store_aligned(a), fg::lanes::cos(v).store_aligned(b);
    bad += std::memcmp(a, b, sizeof a) != 0;
    for (std::size_t l = 0; l < W; ++l) {  // and lane by lane, the scalar forms' values
      const auto [sl, cl] = fg::lanes::sincos(x[l]);
      bad += !(std::isnan(sl) ? std::isnan(std::sin(x[l])) : sl == std::sin(x[l]));
      bad += !(std::isnan(cl) ? std::isnan(std::cos(x[l])) : cl == std::cos(x[l]));
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("lanes::sincos has the bits of lanes::sin and lanes::cos in every reduction class") {
  check_sincos_every_class<float>();
  check_sincos_every_class<double>();
}

TEST_CASE("regression: lanes::sin/cos/sincos keep xsimd's bits on batches of |x| <= 20 pi (inline fast path)") {
  check_small_trig_bits<float>();
  check_small_trig_bits<double>();
}

TEST_CASE("regression: fg::jit's sin of an expanded value has eager's bits (fuzz seed 402, graph 33244)") {
  auto program = [](const std::vector<td>& in) {
    const td v3 = fg::pow(fg::pow(in[0], -2.0) + 0.10000000000000001, 2.5);
    return std::vector<td>{fg::sin(v3.expand(in[1].shape()))};
  };
  auto jitted = fg::jit(program);
  for (index_t s : {5, 6}) {  // the second call compiles the dynamic-shape graph
    std::vector<td> in{fg::randn<double>({s, 1, 2, s}, s == 5 ? 244099501 : 244204230),
                       fg::randn<double>({s, s, 2, s}, 3)};
    in[0].requires_grad(true);
    const auto want = program(in)[0].contiguous().to_vector(), got = jitted(in)[0].contiguous().to_vector();
    REQUIRE(want.size() == got.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(std::memcmp(&want[i], &got[i], sizeof(double)) == 0);
    }
  }
}

TEST_CASE("regression: max's gradient never divides 0 / 0, when no element equals the max") {
  // Values that no longer reach the saved max (as when the max and its input were rounded
  // differently): the gradient goes nowhere instead of being NaN everywhere.
  for (const bool captured : {false, true}) {
    CAPTURE(captured);
    tf x = fg::from_vector<float>({1.0f, 3.0f, 2.0f}, {3}).requires_grad(true);
    const tf y = fg::max(x);
    x.data_ptr()[1] = 2.5f;  // behind the tape's back: the saved input changes, not its version
    if (captured) {
      fg::compiled_autograd::enable on;
      (y * 2.0f).backward();
    } else {
      (y * 2.0f).backward();
    }
    for (const float g : x.grad().to_vector()) CHECK(g == 0.0f);
  }
}

TEST_CASE("regression: special values match PyTorch on every path") {
  using B = fg::backend::fused;
  SUBCASE("relu(NaN) is NaN, its gradient 0") {
    auto f = [](auto x) { return fg::relu(x); };
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      tf x = fg::from_vector<float>(std::vector<float>{f_nan, -1.0f, 2.0f, -0.0f}, {4}).requires_grad(true);
      const tf y = path == 0 ? f(x) : path == 1 ? fg::compile<B>(f)(x) : fg::jit(f)(x);
      fg::sum(y).backward();
      const auto v = y.to_vector(), g = x.grad().to_vector();
      CHECK(std::isnan(v[0]));
      CHECK(v[1] == 0.0f);
      CHECK(v[2] == 2.0f);
      CHECK(g == std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f});
    }
  }
  SUBCASE("d/dx x^0 = 0 everywhere, x = ±inf, 0 and NaN included") {
    auto f = [](auto x) { return fg::pow(x, 0.0); };
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      td x = fg::from_vector<double>({INFINITY, -INFINITY, 0.0, NAN, 2.0}, {5}).requires_grad(true);
      const td y = path == 0 ? f(x) : path == 1 ? fg::compile<B>(f)(x) : fg::jit(f)(x);
      fg::sum(y).backward();
      CHECK(y.to_vector() == std::vector<double>(5, 1.0));
      CHECK(x.grad().to_vector() == std::vector<double>(5, 0.0));
    }
  }
  SUBCASE("d/da a^b = 0 at a = b = 0; d/db there is 0 too") {
    auto f = [](auto a, auto b) { return fg::pow(a, b); };
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      td a = fg::from_vector<double>({0.0, 0.0, 2.0}, {3}).requires_grad(true);
      td b = fg::from_vector<double>({0.0, 2.0, 0.0}, {3}).requires_grad(true);
      const td y = path == 0 ? f(a, b) : path == 1 ? fg::compile<B>(f)(a, b) : fg::jit(f)(a, b);
      fg::sum(y).backward();
      CHECK(y.to_vector() == std::vector<double>{1.0, 0.0, 1.0});
      CHECK(a.grad().to_vector() == std::vector<double>{0.0, 0.0, 0.0});
      CHECK(b.grad().to_vector() == std::vector<double>{0.0, 0.0, std::log(2.0)});
    }
  }
  SUBCASE("a max with NaN elements is NaN and sends its gradient to them") {
    auto full_max = [](auto x) { return fg::max(x) * 1.0; };
    auto row_max = [](auto x) { return fg::max(x, -1) * 1.0; };
    for (int path = 0; path < 5; ++path) {
      CAPTURE(path);  // eager, compile (fused, aot_eager), jit, compiled autograd
      // Row 0: two NaNs share the gradient; row 1: no NaN, a tie; row 2: one NaN at the end.
      td x = fg::from_vector<double>({NAN, 1.0, NAN, 0.0, 3.0, 3.0, 1.0, 2.0, NAN}, {3, 3}).requires_grad(true);
      td xr = x.detach().clone().requires_grad(true);
      td m, r;
      if (path == 0 || path == 4) m = full_max(x), r = row_max(xr);
      if (path == 1) m = fg::compile<B>(full_max)(x), r = fg::compile<B>(row_max)(xr);
      if (path == 2) {
        m = fg::compile<fg::backend::aot_eager>(full_max)(x);
        r = fg::compile<fg::backend::aot_eager>(row_max)(xr);
      }
      if (path == 3) m = fg::jit(full_max)(x), r = fg::jit(row_max)(xr);
      {
        std::optional<fg::compiled_autograd::enable> on;
        if (path == 4) on.emplace();
        m.backward();
        fg::sum(r).backward();
      }
      CHECK(std::isnan(m.item()));
      CHECK(x.grad().to_vector() == std::vector<double>{1.0 / 3, 0, 1.0 / 3, 0, 0, 0, 0, 0, 1.0 / 3});
      const auto rv = r.to_vector();
      CHECK(std::isnan(rv[0]));
      CHECK(rv[1] == 3.0);
      CHECK(std::isnan(rv[2]));
      CHECK(xr.grad().to_vector() == std::vector<double>{0.5, 0, 0.5, 0, 0.5, 0.5, 0, 0, 1});
    }
  }
}

TEST_CASE("regression: the softmax family's infinities are PyTorch's on every path") {
  using B = fg::backend::fused;
  auto sm = [](auto x) { return fg::softmax(x, -1); };
  auto lsm = [](auto x) { return fg::log_softmax(x, -1); };
  auto lse = [](auto x) { return fg::logsumexp(x, -1); };
  // Row 0 holds +inf, row 1 is all -inf, row 2 holds -inf among finite values.
  const td x =
      fg::from_vector<double>({INFINITY, 1.0, 2.0, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0.0, 0.0}, {3, 3});
  for (int path = 0; path < 3; ++path) {
    CAPTURE(path);  // eager, fg::compile, fg::jit
    auto run = [&](auto f) { return path == 0 ? td(f(x)) : path == 1 ? td(fg::compile<B>(f)(x)) : td(fg::jit(f)(x)); };
    const auto s = run(sm).to_vector(), l = run(lsm).to_vector(), e = run(lse).to_vector();
    for (int k = 0; k < 6; ++k) {  // inf - inf in the first two rows: NaN throughout, as PyTorch
      CHECK(std::isnan(s[static_cast<std::size_t>(k)]));
      CHECK(std::isnan(l[static_cast<std::size_t>(k)]));
    }
    CHECK(s[6] == 0.0);
    CHECK(s[7] == 0.5);
    CHECK(l[6] == -INFINITY);
    CHECK(l[7] == -std::log(2.0));
    CHECK(e == std::vector<double>{INFINITY, -INFINITY, std::log(2.0)});  // the shift rule: no NaN
  }
}

TEST_CASE("regression: logsumexp over an empty dim is -inf, as PyTorch") {
  td x = fg::zeros<double>({3, 0}).requires_grad(true);
  const td y = fg::logsumexp(x, -1);
  CHECK(y.shape() == fg::shape{3});
  CHECK(y.to_vector() == std::vector<double>(3, -INFINITY));
  CHECK(fg::logsumexp(x, 1, true).shape() == fg::shape{3, 1});
  fg::sum(y).backward();
  CHECK(x.grad().shape() == fg::shape{3, 0});
  CHECK(fg::jit([](auto v) { return fg::logsumexp(v, -1); })(x.detach()).to_vector() ==
        std::vector<double>(3, -INFINITY));
  // A dim out of range is the usual error, not a crash in the empty check.
  CHECK_THROWS_WITH_AS((void)fg::logsumexp(x, 2), doctest::Contains("dim 2 is out of range"), fg::error);
}

TEST_CASE("regression: det's gradient at a singular matrix is the cofactor matrix, as PyTorch's") {
  // Rank 2 of 3 (exactly: a zero pivot): the cofactors are nonzero (a finite, PyTorch-equal
  // gradient, not a throw). cof(A)_ij = (-1)^(i+j) det(minor_ij), by hand: only the third
  // row's minors miss the zero row.
  td a = fg::from_vector<double>({1, 2, 3, 4, 5, 6, 0, 0, 0}, {3, 3}).requires_grad(true);
  const td d = fg::det(a);
  CHECK(d.item() == 0.0);
  d.backward();
  const std::vector<double> cof{0, 0, 0, 0, 0, 0, -3, 6, -3}, got = a.grad().to_vector();
  for (std::size_t k = 0; k < cof.size(); ++k)
    CHECK(got[k] == doctest::Approx(cof[k]).epsilon(1e-14));  // (LU of the minors rounds)
  // Rank 1: every 2 x 2 minor vanishes, so the gradient is 0.
  td b = fg::from_vector<double>({1, 2, 0, 2, 4, 0, 0, 0, 0}, {3, 3}).requires_grad(true);
  fg::det(b).backward();
  CHECK(b.grad().to_vector() == std::vector<double>(9, 0.0));
  // 1 x 1: d det / dA = 1 at A = 0.
  td c = fg::zeros<double>({1, 1}).requires_grad(true);
  fg::det(c).backward();
  CHECK(c.grad().to_vector() == std::vector<double>{1.0});
  // Invertible matrices keep det A · A⁻ᵀ, and its double backward.
  td e = fg::from_vector<double>({2, 1, 1, 3}, {2, 2}).requires_grad(true);
  fg::det(e).backward();
  CHECK(e.grad().to_vector() == std::vector<double>{3, -1, -1, 2});
  // A second derivative through the singular case would treat the cofactors as constants: an error.
  td f = fg::from_vector<double>({1, 2, 2, 4}, {2, 2}).requires_grad(true);
  CHECK_THROWS_WITH_AS((void)fg::autograd::grad<double>({fg::det(f)}, {f}, {}, {.create_graph = true}),
                       doctest::Contains("double backward at a matrix of determinant 0"), fg::error);
  // logdet at a singular matrix: -inf, and a NaN gradient (no A⁻ᵀ), not a throw.
  td g = fg::from_vector<double>({1, 2, 2, 4}, {2, 2}).requires_grad(true);
  const td l = fg::logdet(g);
  CHECK(l.item() == -INFINITY);
  l.backward();
  for (double v : g.grad().to_vector()) CHECK(std::isnan(v));
}

TEST_CASE("hvp on spans is forward over reverse on dense duals: the seed's zero tangent meets an infinity") {
  // H v of sum(exp(x)) is exp(x) v. At x = +inf the backward multiplies the seed's tangent (0)
  // by exp(inf): 0 · inf = NaN, where PyTorch's double backward (and JAX's symbolic zeros)
  // never forms that product and gives inf (docs/functional.md, "Special values").
  const std::vector<double> x{INFINITY, 1.0}, v{1.0, 1.0};
  const auto hv = fg::hvp([](const auto& t) { return fg::sum(fg::exp(t)); })(x, v);
  CHECK(std::isnan(hv[0]));
  CHECK(hv[1] == doctest::Approx(std::exp(1.0)));
  // A tangent of the wrong length names the transform.
  CHECK_THROWS_WITH_AS((void)fg::hvp([](const auto& t) { return fg::sum(fg::exp(t)); })(x, std::vector<double>{1.0}),
                       doctest::Contains("hvp: a tangent of 1 elements"), fg::error);
}

namespace {

/// Sums of every path: eager, fg::jit, and (a sum over all dims or the last one) fg::compile
/// with both backends.
template <class F>
std::vector<tf> sum_paths(F f, const tf& x, bool compiles = true) {
  if (!compiles) return {f(x), fg::jit(f)(x)};
  return {f(x), fg::jit(f)(x), fg::compile<fg::backend::fused>(f)(x), fg::compile<fg::backend::aot_eager>(f)(x)};
}

/// `n` copies of `v` summed exactly, rounded to float.
float exact(float v, double n) { return static_cast<float>(static_cast<double>(v) * n); }

/// Within `ulps` units in the last place of `want`.
bool near(float got, float want, int ulps) {
  const double ulp = std::nextafter(std::abs(want), f_inf) - std::abs(want);
  return std::abs(static_cast<double>(got) - want) <= ulps * ulp;
}

}  // namespace

TEST_CASE("regression: float sums do not drift, on every path") {
  SUBCASE("2^28 ones sum to 2^28 (a broadcast view: no memory)") {
    CHECK(fg::sum(fg::ones<float>({1}).expand({index_t{1} << 28})).item() == 268435456.0f);
  }
  SUBCASE("the mean of 2^24 values 0.1f is 0.1f to 2 ulps") {
    const tf x = fg::full<float>({index_t{1} << 24}, 0.1f);
    for (const tf& m : sum_paths([](auto a) { return fg::mean(a); }, x)) CHECK(near(m.item(), 0.1f, 2));
  }
  SUBCASE("sums over dims, both layouts, and the gradient of a broadcast operand") {
    const index_t n = index_t{1} << 21;
    const float want = exact(0.1f, static_cast<double>(n));
    // Over the outer dim (outputs side by side) and over the inner one (outputs along rows).
    for (const tf& s : sum_paths([](auto a) { return fg::sum(a, 0); }, fg::full<float>({n, 3}, 0.1f), false))
      for (const float v : s.to_vector()) CHECK(near(v, want, 4));
    for (const tf& s : sum_paths([](auto a) { return fg::sum(a, -1); }, fg::full<float>({3, n}, 0.1f)))
      for (const float v : s.to_vector()) CHECK(near(v, want, 4));
    // b's gradient sums x over the rows it was broadcast along (sum_to).
    auto f = [](auto a, auto b) { return a * b; };
    const tf x = fg::full<float>({n, 3}, 0.1f);
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      tf b = fg::ones<float>({3}).requires_grad(true);
      const tf y = path == 0 ? f(x, b) : path == 1 ? fg::compile<fg::backend::fused>(f)(x, b) : fg::jit(f)(x, b);
      fg::sum(y).backward();
      for (const float v : b.grad().to_vector()) CHECK(near(v, want, 4));
    }
  }
}

TEST_CASE("regression: a sum does not depend on how its values are handed over") {
  // The same values fed whole, in tile-sized pieces, in odd pieces, one by one: the same bits.
  const auto v = fg::randn<float>({10007}, 3).to_vector();
  auto fed = [&](index_t piece) {
    fg::detail::running_sum<float> s;
    for (index_t i = 0; i < static_cast<index_t>(v.size()); i += piece)
      s.add(v.data() + i, std::min<index_t>(piece, static_cast<index_t>(v.size()) - i));
    return s.total();
  };
  const float whole = fed(static_cast<index_t>(v.size()));
  for (const index_t piece : {1, 3, 7, 31, 256, 1000}) CHECK(same(fed(piece), whole));
  double ref = 0;
  for (const float e : v) ref += e;
  CHECK(std::abs(whole - ref) < 1e-4);
}

TEST_CASE("regression: sums give the same bits on every path, whatever the layout") {
  // Full sums, sums over the last dim, means, and gradients of operands broadcast along
  // various dims (sum_to in eager mode, reductions inside fused loops, IR programs): every
  // path agrees bit for bit with eager mode.
  const tf x = fg::randn<float>({37, 5, 301}, 4);
  auto check = [&](const std::string& what, auto f) {
    CAPTURE(what);
    const auto r = sum_paths(f, x);
    for (std::size_t p = 1; p < r.size(); ++p) {
      CAPTURE(p);
      CHECK(first_difference(r[0], r[p]) == -1);
    }
  };
  check("sum", [](auto a) { return fg::sum(a); });
  check("mean", [](auto a) { return fg::mean(a); });
  check("sum over the last dim", [](auto a) { return fg::sum(a, -1); });
  check("mean over the last dim", [](auto a) { return fg::mean(a, -1, true); });
  check("sum of a product", [](auto a) { return fg::sum(a * a); });
  auto grads = [&](const std::string& what, const fg::shape& bs) {
    CAPTURE(what);
    auto f = [](auto a, auto b) { return fg::sin(a * b); };
    std::vector<tf> g;
    for (int path = 0; path < 4; ++path) {
      tf b = fg::randn<float>(bs, 5).requires_grad(true);
      const tf y = path == 0   ? f(x, b)
                   : path == 1 ? fg::compile<fg::backend::fused>(f)(x, b)
                   : path == 2 ? fg::compile<fg::backend::aot_eager>(f)(x, b)
                               : fg::jit(f)(x, b);
      fg::sum(y).backward();
      g.push_back(b.grad());
    }
    for (std::size_t p = 1; p < g.size(); ++p) {
      CAPTURE(p);
      CHECK(first_difference(g[0], g[p]) == -1);
    }
  };
  grads("b [301]: outputs side by side", {301});
  grads("b [5, 1]: outputs along rows, interleaved", {5, 1});
  grads("b [37, 1, 1]: each output a run of rows", {37, 1, 1});
  grads("b [5, 301]", {5, 301});
  grads("b [37, 1, 301]", {37, 1, 301});
  grads("b [1]: everything", {1});
}

// A graph that needs the sine and the cosine of one value (a forward cos and its backward's
// sin) computes them together, from one reduction (lanes::sincos): fg::compile's loops under
// every plan (the cost plans recompute cos(x) beside the backward's sin(x)), fg::jit's
// programs (one instruction for both) and the span engine's forward and backward. Each path
// keeps eager's bits: values in every
// reduction class (small, medium, huge, inf, NaN), at every position of a batch.
template <class T, class F>
void check_sibling_paths(const F& f, index_t n, double scale) {
  using t_t = fg::tensor<T>;
  std::vector<T> xv = fg::randn<T>({n}, 11).to_vector(), yv = fg::randn<T>({n}, 12).to_vector();
  for (auto& x : xv) x = static_cast<T>(x * scale);
  if (n > 5) xv[3] = std::numeric_limits<T>::infinity(), xv[5] = std::numeric_limits<T>::quiet_NaN();
  if (n > 8) xv[8] = T(1e30);
  auto leaves = [&] {
    return std::pair{fg::from_vector<T>(xv).requires_grad(true), fg::from_vector<T>(yv).requires_grad(true)};
  };
  // Bits, except that a NaN is any NaN (IEEE gives no sign to the NaN of inf * 0 or sin(inf):
  // the span engine's and eager's NaN signs differed before siblings, in double, in a call of
  // one partial batch).
  auto same = [](const t_t& a, const t_t& b) {
    const auto u = a.contiguous().to_vector(), v = b.contiguous().to_vector();
    if (u.size() != v.size()) return false;
    for (std::size_t i = 0; i < u.size(); ++i)
      if (!(std::isnan(u[i]) && std::isnan(v[i])) && std::memcmp(&u[i], &v[i], sizeof(T)) != 0) return false;
    return true;
  };
  auto [xe, ye] = leaves();
  const t_t want = f(xe, ye);
  fg::sum(want).backward();
  auto check_compiled = [&](auto compiled, const char* name) {
    auto [x, y] = leaves();
    const t_t got = compiled(x, y);
    fg::sum(got).backward();
    CAPTURE(name);
    CHECK(same(got, want));
    CHECK(same(x.grad(), xe.grad()));
    CHECK(same(y.grad(), ye.grad()));
  };
  check_compiled(fg::compile(f), "compile");
  check_compiled(fg::compile<fg::backend::fused, fg::policy::cost_cached>(f), "cost_cached");
  check_compiled(fg::compile<fg::backend::fused, fg::policy::cost_streamed>(f), "cost_streamed");
  check_compiled(fg::compile<fg::backend::fused, fg::policy::min_cut>(f), "min_cut");
  auto jitted = fg::jit([&](const t_t& x, const t_t& y) { return f(x, y); });
  check_compiled(jitted, "jit");
  if (n > 1) {  // its backward program computes the pairs together ("%3+%4" in its code)
    const auto entries = jitted.entries();
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].code.find("+%") != std::string::npos);
  }
  // The span engine: value and gradients in one loop (the sum in fusegrad's summation order).
  auto [xs, ys] = leaves();
  const auto [value, grads] =
      fg::value_and_grad([&](const auto& x, const auto& y) { return fg::sum(f(x, y)); }, fg::argnums<0, 1>)(xs, ys);
  const T total = fg::sum(want).item();
  CHECK((std::memcmp(&value, &total, sizeof(T)) == 0 || (std::isnan(value) && std::isnan(total))));
  CHECK(same(std::get<0>(grads), xe.grad()));
  CHECK(same(std::get<1>(grads), ye.grad()));
}

TEST_CASE("sin and cos of one value are computed together (sincos) with eager's bits on every path") {
  auto coscos = [](const auto& x, const auto& y) { return fg::cos(fg::cos(x)) * y; };
  auto sinsin = [](const auto& x, const auto& y) { return fg::sin(fg::sin(x)) * y; };
  auto sincos_chain = [](const auto& x, const auto& y) { return fg::sin(fg::cos(x) * 2.0) * y; };
  for (index_t n : {1, 7, 9, 1000, 70000})
    for (double scale : {1.0, 300.0, 1e6}) {
      CAPTURE(n);
      CAPTURE(scale);
      check_sibling_paths<float>(coscos, n, scale);
      check_sibling_paths<double>(coscos, n, scale);
      check_sibling_paths<float>(sinsin, n, scale);
      check_sibling_paths<double>(sincos_chain, n, scale);
    }
  // The cost plans recompute cos(x) beside the backward's sin(x) rather than saving it.
  using A = decltype(fg::compile(coscos))::analysis<float, 2>;
  static_assert(A::cg.sibling[1] >= 0 && A::plan<fg::policy::cost_cached>.recompute[1] &&
                    A::plan<fg::policy::cost_streamed>.recompute[1],
                "cos(x) (canonical node 1) has a sibling in the backward and is recomputed beside it");
}
