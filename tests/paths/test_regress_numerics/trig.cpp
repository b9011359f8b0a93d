// test_regress_numerics: sin and cos do not depend on their SIMD neighbours; lanes::sincos has
// the bits of sin and cos; sin and cos of one value computed together keep eager's bits.
#include "helpers.hpp"

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
