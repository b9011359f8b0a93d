#pragma once
/// \file fusegrad/nn/loss.hpp
/// Losses on eager tensors (and so under `fg::jit` and compiled autograd), each the mean over
/// the batch as PyTorch's default `reduction='mean'`: `l1_loss`, `huber_loss`,
/// `binary_cross_entropy_with_logits` (stable form), `nll_loss` and `cross_entropy` (from
/// logits [N, C] and class indices). Class indices are checked: a bad index is a
/// `fusegrad::error` naming it.
#include <vector>

#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/reduce.hpp"
#include "fusegrad/ops/all.hpp"
#include "fusegrad/ops/softmax.hpp"

namespace fusegrad::nn {

/// mean |a - b|.
template <Element T>
tensor<T> l1_loss(const tensor<T>& a, const tensor<T>& b) {
  return mean(tensor<T>(abs(a - b)));
}
/// mean of 0.5 d² where |d| < delta, else delta (|d| - delta/2), d = a - b.
template <Element T>
tensor<T> huber_loss(const tensor<T>& a, const tensor<T>& b, T delta = T(1)) {
  const tensor<T> d = a - b, ad = abs(d);
  return mean(tensor<T>(where(lt(ad, delta), d * d * 0.5, (ad - delta * T(0.5)) * delta)));
}
/// mean of max(x, 0) - x y + log(1 + exp(-|x|)) (targets y in [0, 1]).
template <Element T>
tensor<T> binary_cross_entropy_with_logits(const tensor<T>& x, const tensor<T>& y) {
  return mean(tensor<T>(relu(x) - x * y + log1p(exp(-abs(x)))));
}

namespace detail {
/// 1 at [i, targets[i]] of an [N, C] tensor, else 0 (checked).
template <Element T>
tensor<T> one_hot(std::string_view op, const shape& s, const std::vector<index_t>& targets) {
  if (s.size() != 2) fusegrad::detail::fail(op, "input of shape ", to_string(s), "; expected [N, C]");
  if (static_cast<index_t>(targets.size()) != s[0])
    fusegrad::detail::fail(op, "got ", targets.size(), " targets for a batch of ", s[0], "; expected one per row");
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (targets[i] < 0 || targets[i] >= s[1])
      fusegrad::detail::fail(op, "target ", targets[i], " at row ", i, "; expected a class index in [0, ", s[1], ")");
  tensor<T> t = zeros<T>(s);  // written in place: one pass over the mask
  T* p = t.data_ptr();
  for (std::size_t i = 0; i < targets.size(); ++i) p[static_cast<index_t>(i) * s[1] + targets[i]] = T(1);
  return t;
}
}  // namespace detail

/// -mean over rows of logp[i, targets[i]] (log-probabilities [N, C]).
template <Element T>
tensor<T> nll_loss(const tensor<T>& logp, const std::vector<index_t>& targets) {
  const tensor<T> mask = detail::one_hot<T>("nll_loss", logp.shape(), targets);
  return -sum(tensor<T>(where(mask, logp, 0.0))) / static_cast<T>(targets.size());
}
/// nll_loss(log_softmax(logits, -1), targets): logits [N, C], one class index per row.
template <Element T>
tensor<T> cross_entropy(const tensor<T>& logits, const std::vector<index_t>& targets) {
  if (logits.dim() != 2)
    fusegrad::detail::fail("cross_entropy", "logits of shape ", to_string(logits.shape()), "; expected [N, C]");
  return nll_loss(tensor<T>(log_softmax(logits, -1)), targets);
}

}  // namespace fusegrad::nn
