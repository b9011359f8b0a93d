#pragma once
// Comparisons of tensors shared by the tests. Any NaN fails: no test expects one.
#include <algorithm>
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

namespace fusegrad_test {

/// Largest element-wise relative difference (a NaN or a shape mismatch gives 1e300).
inline double max_rel(const fusegrad::tensor<double>& a, const fusegrad::tensor<double>& b) {
  if (a.shape() != b.shape()) return 1e300;
  const auto u = a.to_vector(), v = b.to_vector();
  double m = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    if (std::isnan(u[i]) || std::isnan(v[i])) return 1e300;
    m = std::max(m, std::abs(u[i] - v[i]) / (1e-12 + std::abs(u[i])));
  }
  return m;
}

/// Largest difference relative to the largest element of `a`: for values that go through
/// sums in different orders (cancellation leaves rounding relative to the whole vector).
inline double max_normwise(const fusegrad::tensor<double>& a, const fusegrad::tensor<double>& b) {
  if (a.shape() != b.shape()) return 1e300;
  const auto u = a.to_vector(), v = b.to_vector();
  double d = 0, m = 1e-300;
  for (std::size_t i = 0; i < u.size(); ++i) {
    if (std::isnan(u[i]) || std::isnan(v[i])) return 1e300;
    d = std::max(d, std::abs(u[i] - v[i]));
    m = std::max(m, std::abs(u[i]));
  }
  return d / m;
}

}  // namespace fusegrad_test
