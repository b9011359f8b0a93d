#pragma once

// Op coverage. Every differentiable op is gradchecked in double over the shape classes
// scalar (0-d), 1-element, vector, matrix, broadcast operands and empty (where the op allows
// it). Forward values are compared in float and double with independent references (std::
// math, hand-written broadcasting / reduction / matmul loops). grad_fn names, storage sharing
// of views and the non-differentiable comparisons, step and sign are checked too.
// Test cases named "regression: ..." pin bugs found by these tests and since fixed.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fg = fusegrad;

namespace {

using td = fg::tensor<double>;
using fg::index_t;
// Plain function pointers (captureless lambdas convert): one gradcheck instantiation per
// arity and no std::function machinery per lambda keep the compile time down.
using fn1 = td (*)(const td&);
using fn2 = td (*)(const td&, const td&);
using fn3 = td (*)(const td&, const td&, const td&);

// ---- inputs ---------------------------------------------------------------------------
// any: N(0,1). pos: U(0.5, 2). away: N(0,1) pushed >= 0.5 away from 0 (kinks of relu/abs,
// the pole of 1/x). grid: multiples of 0.5, with ties and exact zeros (for value checks).
enum class dom { any, pos, away, grid };

template <class E = double>
fg::tensor<E> input(const fg::shape& s, dom d = dom::any, std::uint64_t seed = 1) {
  std::vector<double> v =
      d == dom::pos ? fg::rand<double>(s, seed, 0.5, 2.0).to_vector() : fg::randn<double>(s, seed).to_vector();
  for (double& e : v) {
    if (d == dom::away) e = e < 0 ? e - 0.5 : e + 0.5;
    if (d == dom::grid) e = std::round(e * 2) / 2;
  }
  return fg::from_vector<E>(std::vector<E>(v.begin(), v.end()), s);
}

// ---- checking helpers -----------------------------------------------------------------
// One out-of-line assertion (with the call site's line captured) keeps the ~200 check sites
// small, which matters for compile time.
inline void expect_ok(int line, bool ok, const std::string& message) {
  CAPTURE(line);
  CHECK_MESSAGE(ok, message);
}

template <class... Fs>
fg::gradcheck_result gc(td (*f)(const Fs&...), const Fs&... xs) {
  try {
    return fg::gradcheck(f, xs...);
  } catch (const std::exception& e) {  // e.g. a gradient of the wrong shape
    fg::gradcheck_result r;
    r.ok = false;
    r.message = std::string("gradcheck threw: ") + e.what();
    return r;
  }
}
#define GRADCHECK(...)                                 \
  do {                                                 \
    const fg::gradcheck_result gc_r = gc(__VA_ARGS__); \
    expect_ok(__LINE__, gc_r.ok, gc_r.message);        \
  } while (false)

inline std::string str(const fg::shape& s) { return fg::to_string(s); }
template <class E>
constexpr double tol_of() {
  return std::is_same_v<E, float> ? 1e-5 : 1e-12;
}
template <class E>
std::vector<double> dbl(const std::vector<E>& v) {
  return {v.begin(), v.end()};
}

/// "" when `got` matches `want` within `tol` (relative; absolute below magnitude 1; NaN
/// matches NaN), else a description of the first mismatch.
template <class E>
std::string first_diff(const std::vector<E>& got, const std::vector<double>& want, double tol) {
  if (got.size() != want.size())
    return "got " + std::to_string(got.size()) + " elements, expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if ((std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= tol * std::max(1.0, std::abs(w))) continue;
    std::ostringstream os;
    os.precision(17);
    os << "element " << i << ": got " << g << ", expected " << w;
    return os.str();
  }
  return {};
}
#define CHECK_OK(...)                        \
  do {                                       \
    const std::string ok_m = (__VA_ARGS__);  \
    expect_ok(__LINE__, ok_m.empty(), ok_m); \
  } while (false)

}  // namespace
