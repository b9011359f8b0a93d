#pragma once
/// \file fusegrad/eager/gradcheck.hpp
/// `gradcheck`: analytic gradients (the tape) against central finite differences, in double.

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/views.hpp"

namespace fusegrad {

struct gradcheck_options {
  double eps = 1e-6;   ///< finite-difference step
  double atol = 1e-5;  ///< absolute tolerance
  double rtol = 1e-3;  ///< relative tolerance (of the numeric value)
};

/// The outcome of a gradcheck, with the worst element found.
struct gradcheck_result {
  bool ok = true;
  double max_abs_error = 0;  ///< largest |analytic - numeric| over all Jacobian entries
  std::size_t input = 0;     ///< input holding the worst entry
  index_t input_element = 0, output_element = 0;
  double analytic = 0, numeric = 0;
  std::string message;  ///< readable summary
  explicit operator bool() const noexcept { return ok; }
};

namespace detail {
/// A call of the checked function on the inputs `xs` (type-erased, so that the check itself is
/// compiled once per element type, not once per function).
template <Element T>
struct gradcheck_call {
  tensor<T> (*fn)(const void* f, const std::vector<tensor<T>>& xs);
  const void* f;
  tensor<T> operator()(const std::vector<tensor<T>>& xs) const { return fn(f, xs); }
};

/// The check of `gradcheck` on leaves `xs` (contiguous copies that require grad).
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): both Jacobians and their comparison, in order
gradcheck_result gradcheck_values(const gradcheck_options& opt, const gradcheck_call<T>& f,
                                  std::vector<tensor<T>>& xs) {
  auto call = [&] { return f(xs); };
  const tensor<T> y = call();
  const index_t m = y.numel();
  gradcheck_result res;
  // Analytic Jacobian, one backward per output element: J[i][j][k] = d y_j / d x_i[k].
  std::vector<std::vector<double>> analytic(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) analytic[i].assign(static_cast<std::size_t>(m * xs[i].numel()), 0.0);
  if (y.requires_grad()) {
    if (m == 0) {
      y.backward(zeros<T>(y.shape()));
      for (std::size_t i = 0; i < xs.size(); ++i)
        if (xs[i].grad().defined() && xs[i].grad().shape() != xs[i].shape())
          fail("gradcheck", "gradient of input ", i, " has shape ", to_string(xs[i].grad().shape()), "; expected ",
               to_string(xs[i].shape()));
    }
    for (index_t j = 0; j < m; ++j) {
      for (auto& x : xs) x.zero_grad();
      tensor<T> g = zeros<T>(y.shape());
      g.data_ptr()[j] = 1.0;
      y.backward(g, {.retain_graph = true});
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const tensor<T> gx = xs[i].grad();
        if (!gx.defined()) continue;
        if (gx.shape() != xs[i].shape())
          fail("gradcheck", "gradient of input ", i, " has shape ", to_string(gx.shape()), "; expected ",
               to_string(xs[i].shape()));
        const auto v = gx.to_vector();
        for (index_t k = 0; k < xs[i].numel(); ++k)
          analytic[i][static_cast<std::size_t>(j * xs[i].numel() + k)] = v[static_cast<std::size_t>(k)];
      }
    }
  }
  // Numeric Jacobian by central differences, comparing as we go.
  double worst = -std::numeric_limits<double>::infinity();
  no_grad guard;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    T* p = xs[i].data_ptr();
    for (index_t k = 0; k < xs[i].numel(); ++k) {
      const T orig = p[k];
      p[k] = orig + opt.eps;
      const auto plus = call().to_vector();
      p[k] = orig - opt.eps;
      const auto minus = call().to_vector();
      p[k] = orig;
      for (index_t j = 0; j < m; ++j) {
        const auto jj = static_cast<std::size_t>(j);
        const double num = (plus[jj] - minus[jj]) / (2 * opt.eps);
        const double ana = analytic[i][static_cast<std::size_t>(j * xs[i].numel() + k)];
        const double err = std::abs(ana - num), tol = opt.atol + opt.rtol * std::abs(num);
        // The error as a fraction of the entry's tolerance: above 1 fails. The worst entry is
        // the one closest to failing (not the one of least margin, which in a passing check
        // is an exact zero of the Jacobian where the tolerance is smallest). NaN anywhere
        // counts as the worst possible entry.
        const double score = std::isnan(err) ? INFINITY : err == 0 ? 0 : tol > 0 ? err / tol : INFINITY;
        res.max_abs_error = std::max(res.max_abs_error, std::isnan(err) ? INFINITY : err);
        if (score > worst) {
          worst = score;
          res.input = i;
          res.input_element = k;
          res.output_element = j;
          res.analytic = ana;
          res.numeric = num;
        }
      }
    }
  }
  res.ok = !(worst > 1);
  std::ostringstream os;
  os.precision(10);
  os << (res.ok ? "gradcheck passed" : "gradcheck FAILED") << ": worst entry d out[" << res.output_element
     << "] / d input" << res.input << "[" << res.input_element << "]: analytic " << res.analytic << ", numeric "
     << res.numeric << ", error " << std::max(worst, 0.0) << " of its tolerance (max abs error " << res.max_abs_error
     << ")";
  res.message = os.str();
  return res;
}
}  // namespace detail

/// Checks the Jacobian of `f(inputs...)` (double tensors) against central differences.
/// Every input is treated as a leaf requiring grad; `f` may return any shape.
template <class F, std::same_as<tensor<double>>... Ts>
gradcheck_result gradcheck(const gradcheck_options& opt, F&& f, const Ts&... inputs) {
  std::vector<tensor<double>> xs{detail::contiguous_copy(inputs)...};
  for (auto& x : xs) x.requires_grad(true);
  const detail::gradcheck_call<double> call{[](const void* fp, const std::vector<tensor<double>>& v) -> tensor<double> {
                                              auto& fn =
                                                  *static_cast<std::remove_reference_t<F>*>(const_cast<void*>(fp));
                                              return [&]<std::size_t... I>(std::index_sequence<I...>) {
                                                return tensor<double>(fn(v[I]...));
                                              }
                                              (std::index_sequence_for<Ts...>{});
                                            },
                                            &f};
  return detail::gradcheck_values(opt, call, xs);
}

template <class F, std::same_as<tensor<double>>... Ts>
gradcheck_result gradcheck(F&& f, const Ts&... inputs) {
  return gradcheck(gradcheck_options{}, std::forward<F>(f), inputs...);
}

}  // namespace fusegrad
