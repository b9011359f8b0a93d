#pragma once
// The built-in element-wise ops, one line each, as generic functions of one or two operands,
// with a domain to sample: the functional transforms' tests run every transform over every
// entry (against the eager engine and finite differences). A new op joins with one line.
#include <cmath>
#include <string_view>
#include <vector>
#include <tuple>

#include <fusegrad/fusegrad.hpp>

namespace fusegrad_test {

/// |a - b| within `tol` relative to 1 + |b|.
inline bool close(double a, double b, double tol = 1e-12) { return std::abs(a - b) <= tol * (1 + std::abs(b)); }

/// `n` points spread over [lo, hi] (deterministic, not sorted).
inline std::vector<double> sample(double lo, double hi, int n, double phase = 0.0) {
  std::vector<double> r(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    r[static_cast<std::size_t>(i)] = lo + (hi - lo) * std::fmod(0.05 + phase + i * 0.6180339887, 0.9);
  return r;
}

/// A double leaf that requires grad.
inline fusegrad::tensor<double> leaf(const std::vector<double>& v) {
  auto t = fusegrad::from_vector<double>(v);
  t.requires_grad(true);
  return t;
}

template <class F>
struct op_case {
  std::string_view name;
  F f;
  double lo, hi;       ///< where to sample (away from kinks: they are checked at given points elsewhere)
  bool smooth = true;  ///< finite differences apply (false: piecewise constant, zero gradient)
};
template <class F>
op_case(std::string_view, F, double, double, bool = true) -> op_case<F>;

namespace fg = fusegrad;

inline const auto unary_ops = std::tuple{
    op_case{"neg", [](const auto& x) { return -x; }, -2.0, 2.0},
    op_case{"exp", [](const auto& x) { return fg::exp(x); }, -2.0, 2.0},
    op_case{"log", [](const auto& x) { return fg::log(x); }, 0.3, 3.0},
    op_case{"sin", [](const auto& x) { return fg::sin(x); }, -3.0, 3.0},
    op_case{"cos", [](const auto& x) { return fg::cos(x); }, -3.0, 3.0},
    op_case{"tanh", [](const auto& x) { return fg::tanh(x); }, -2.0, 2.0},
    op_case{"sigmoid", [](const auto& x) { return fg::sigmoid(x); }, -3.0, 3.0},
    op_case{"relu", [](const auto& x) { return fg::relu(x); }, 0.1, 2.0},
    op_case{"relu<0", [](const auto& x) { return fg::relu(x); }, -2.0, -0.1},
    op_case{"abs", [](const auto& x) { return fg::abs(x); }, -2.0, -0.1},
    op_case{"sqrt", [](const auto& x) { return fg::sqrt(x); }, 0.3, 3.0},
    op_case{"step", [](const auto& x) { return fg::step(x); }, -2.0, 2.0, false},
    op_case{"sign", [](const auto& x) { return fg::sign(x); }, -2.0, 2.0, false},
    op_case{"add_scalar", [](const auto& x) { return x + 1.5; }, -2.0, 2.0},
    op_case{"sub_scalar", [](const auto& x) { return x - 1.5; }, -2.0, 2.0},
    op_case{"rsub_scalar", [](const auto& x) { return 1.5 - x; }, -2.0, 2.0},
    op_case{"mul_scalar", [](const auto& x) { return x * 1.5; }, -2.0, 2.0},
    op_case{"div_scalar", [](const auto& x) { return x / 1.5; }, -2.0, 2.0},
    op_case{"rdiv_scalar", [](const auto& x) { return 1.5 / x; }, 0.3, 3.0},
    op_case{"pow_scalar 3", [](const auto& x) { return fg::pow(x, 3); }, -2.0, 2.0},
    op_case{"pow_scalar -2", [](const auto& x) { return fg::pow(x, -2); }, 0.3, 3.0},
    op_case{"pow_scalar 1.7", [](const auto& x) { return fg::pow(x, 1.7); }, 0.3, 3.0},
};

inline const auto binary_ops = std::tuple{
    op_case{"add", [](const auto& a, const auto& b) { return a + b; }, -2.0, 2.0},
    op_case{"sub", [](const auto& a, const auto& b) { return a - b; }, -2.0, 2.0},
    op_case{"mul", [](const auto& a, const auto& b) { return a * b; }, -2.0, 2.0},
    op_case{"div", [](const auto& a, const auto& b) { return a / b; }, 0.3, 3.0},
    op_case{"maximum", [](const auto& a, const auto& b) { return fg::maximum(a, b); }, -2.0, 2.0},
    op_case{"pow", [](const auto& a, const auto& b) { return fg::pow(a, b); }, 0.3, 2.0},
    op_case{"gt", [](const auto& a, const auto& b) { return fg::gt(a, b); }, -2.0, 2.0, false},
    op_case{"ge", [](const auto& a, const auto& b) { return fg::ge(a, b); }, -2.0, 2.0, false},
    op_case{"lt", [](const auto& a, const auto& b) { return fg::lt(a, b); }, -2.0, 2.0, false},
    op_case{"le", [](const auto& a, const auto& b) { return fg::le(a, b); }, -2.0, 2.0, false},
    op_case{"eq", [](const auto& a, const auto& b) { return fg::eq(a, b); }, -2.0, 2.0, false},
    op_case{"ne", [](const auto& a, const auto& b) { return fg::ne(a, b); }, -2.0, 2.0, false},
};

}  // namespace fusegrad_test
