#pragma once

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
inline bool same(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

/// Index of the first element where `a` and `b` differ, or -1.
inline index_t first_difference(const tf& a, const tf& b) {
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

inline float c_max(float a, float b) { return a != a ? a : b != b ? b : a > b ? a : b; }  // NaN propagates
inline float c_sign(float a) { return a != a ? a : a > 0 ? 1.0f : a < 0 ? -1.0f : 0.0f; }
inline float c_bool(bool b) { return b ? 1.0f : 0.0f; }

}  // namespace
