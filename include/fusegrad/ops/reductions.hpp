#pragma once
/// \file fusegrad/ops/reductions.hpp
/// Reductions written once over any operand from sum, mean and max (so every path runs them,
/// fuses them and derives their gradients): min, amax, amin, var and std (with `correction`,
/// Bessel's 1 by default, as PyTorch), and the vector norms p = 1, 2, inf. `dims` is one dim,
/// a list of dims (eager tensors and fg::jit), or absent (all dims); inside `fg::compile` a
/// reduction takes the last dim or all dims. NaN propagates; the gradients are PyTorch's:
/// min/amax/amin split evenly among ties (as max), the 2-norm's is x / ‖x‖ and 0 where the
/// norm is 0 (not 0/0), the inf-norm's that of max(|x|).
#include <concepts>
#include <limits>
#include <utility>

#include "fusegrad/core/error.hpp"
#include "fusegrad/ops/abs.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/sqrt.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/where.hpp"
#include "fusegrad/ops/zeros_like.hpp"

namespace fusegrad {
namespace ops {
/// √s with the 2-norm's gradient: g / (2y), and 0 where y = 0 (PyTorch's norm backward masks
/// the 0/0 of a zero vector).
struct norm_sqrt_op {
  static constexpr std::string_view name = "norm_sqrt", grad_fn = "NormBackward1";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  static constexpr bool uses_input = false, uses_output = true;
  template <class V>
  static V value(const V& x) {
    using std::sqrt;
    return sqrt(x);
  }
  static auto derivative(const auto&, const auto& y, const auto& g) {
    using T = element_of<std::remove_cvref_t<decltype(g)>>;
    return apply_op(select_op<T>{T(0)}, y, g / (y * 2.0));
  }
};
}  // namespace ops

/// The smallest element (over all dims, or `dims`), -max(-x): exact, NaN propagating.
template <Operand X>
constexpr auto min(const X& x) {
  return -max(-x);
}
template <Operand X, class D>
constexpr auto min(const X& x, const D& dims, bool keepdim = false) {
  return -max(-x, dims, keepdim);
}
template <Operand X>
constexpr auto amax(const X& x) {
  return max(x);
}
template <Operand X, class D>
constexpr auto amax(const X& x, const D& dims, bool keepdim = false) {
  return max(x, dims, keepdim);
}
template <Operand X>
constexpr auto amin(const X& x) {
  return min(x);
}
template <Operand X, class D>
constexpr auto amin(const X& x, const D& dims, bool keepdim = false) {
  return min(x, dims, keepdim);
}

namespace detail {
/// The number of elements each result of a reduction over `dims` folds, as a value of the
/// result's shape (computed in the graph: expressions do not know their shapes).
template <Operand X, class D>
constexpr auto reduced_count_like(const X& x, const D& dims, bool keepdim) {
  return sum(apply_op(ops::zeros_like_op{}, x) + 1.0, dims, keepdim);
}
}  // namespace detail

/// Σ (x - mean)² / (n - correction) over `dims` (n - correction <= 0 gives inf or NaN, as PyTorch).
template <Operand X, class D>
constexpr auto var(const X& x, const D& dims, double correction = 1, bool keepdim = false) {
  const auto d = x - mean(x, dims, true);
  return sum(d * d, dims, keepdim) / (detail::reduced_count_like(x, dims, keepdim) - correction);
}
template <Operand X>
constexpr auto var(const X& x) {
  const auto d = x - mean(x);
  return sum(d * d) / (sum(apply_op(ops::zeros_like_op{}, x) + 1.0) - 1.0);
}
/// √var (PyTorch's `std`; the name `std` would hide namespace std inside fusegrad).
template <Operand X, class D>
constexpr auto stddev(const X& x, const D& dims, double correction = 1, bool keepdim = false) {
  return sqrt(var(x, dims, correction, keepdim));
}
template <Operand X>
constexpr auto stddev(const X& x) {
  return sqrt(var(x));
}

/// ‖x‖_p over `dims` for p = 1, 2 or inf (any other p is an error). For values whose type does
/// not depend on the op (eager tensors, fg::jit); inside `fg::compile` write `sum(abs(x))`,
/// `max(abs(x))` or `sqrt(sum(x * x))`.
template <Operand X, class D>
requires std::same_as<decltype(sum(abs(std::declval<const X&>()), std::declval<const D&>(), false)),
                      decltype(max(abs(std::declval<const X&>()), std::declval<const D&>(), false))>
constexpr auto norm(const X& x, double p, const D& dims, bool keepdim = false) {
  if (p == 2) return apply_op(ops::norm_sqrt_op{}, sum(x * x, dims, keepdim));
  if (p == 1) return sum(abs(x), dims, keepdim);
  if (p != std::numeric_limits<double>::infinity()) fusegrad::detail::fail("norm", "p = ", p, "; expected 1, 2 or inf");
  return max(abs(x), dims, keepdim);
}
template <Operand X>
requires std::same_as<decltype(sum(abs(std::declval<const X&>()))), decltype(max(abs(std::declval<const X&>())))>
constexpr auto norm(const X& x, double p = 2) {
  if (p == 2) return apply_op(ops::norm_sqrt_op{}, sum(x * x));
  if (p == 1) return sum(abs(x));
  if (p != std::numeric_limits<double>::infinity()) fusegrad::detail::fail("norm", "p = ", p, "; expected 1, 2 or inf");
  return max(abs(x));
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_REDUCTIONS(X) X(U, plain, norm_sqrt_op)
