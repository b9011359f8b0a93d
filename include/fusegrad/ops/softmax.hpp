#pragma once
/// \file fusegrad/ops/softmax.hpp
/// logsumexp(x, dim), softmax(x, dim) and log_softmax(x, dim), stable at extreme inputs: the
/// max along `dim` is subtracted before `exp` (so logsumexp([1000, 0]) is 1000, not inf).
/// Infinities follow PyTorch: logsumexp replaces an infinite max by 0 (a row of -inf gives
/// -inf, a row holding +inf gives +inf, not NaN); softmax and log_softmax subtract the max as
/// it is, so a row holding +inf is NaN throughout (inf - inf) and a row of -inf is NaN. The max
/// is a constant shift (`detach`): the forms' gradients are exactly those of the unshifted
/// ones, softmax's `y (g - Σ g y)`, with no pass for the shift's gradient, which is zero.
/// Written once over any operand from the public ops (max, detach, sum, exp, log, where), so
/// every path runs them and derives their gradients: fused by `fg::compile` and `fg::jit`
/// (where `dim` must be the last dim inside `fg::compile`, as for its other reductions). Over
/// an empty dim, the eager overload of logsumexp (eager/reduce.hpp) gives -inf, as PyTorch.
#include <limits>

#include "fusegrad/core/shape.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/detach.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/exp.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/where.hpp"

namespace fusegrad {
namespace detail {
/// `m` with its infinities replaced by 0: the shift of the stable forms (PyTorch's rule).
template <Operand M>
constexpr auto finite_shift(const M& m) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  return where(eq(m, inf) + eq(m, -inf), 0.0, m);
}
}  // namespace detail

/// log Σ exp(x) along `dim` (PyTorch's `torch.logsumexp`).
template <Operand X>
constexpr auto logsumexp(const X& x, index_t dim, bool keepdim = false) {
  const auto m = detail::finite_shift(detach(max(x, dim, true)));
  return log(sum(exp(x - m), dim, keepdim)) + (keepdim ? m : detail::finite_shift(detach(max(x, dim, false))));
}
/// exp(x) / Σ exp(x) along `dim`.
template <Operand X>
constexpr auto softmax(const X& x, index_t dim) {
  const auto e = exp(x - detach(max(x, dim, true)));
  return e / sum(e, dim, true);
}
/// x - logsumexp(x) along `dim`, as (x - m) - log Σ exp(x - m) (PyTorch's form: exact where
/// the row's values are equal, -log n, where x - (log Σ + m) would cancel).
template <Operand X>
constexpr auto log_softmax(const X& x, index_t dim) {
  const auto d = x - detach(max(x, dim, true));
  return d - log(sum(exp(d), dim, true));
}
}  // namespace fusegrad
