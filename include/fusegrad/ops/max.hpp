#pragma once
/// \file fusegrad/ops/max.hpp
/// Max over all elements or over one dim (values only). The gradient flows to the maximal
/// elements, split evenly between ties (PyTorch's `amax` rule); a NaN max (any NaN element:
/// the max propagates NaN) sends it to the NaN elements, as PyTorch does. An empty reduction
/// throws.
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/step.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/sum.hpp"

namespace fusegrad {

namespace detail {
/// The max's backward rule, in pieces over any algebra (eager tensors, expression types, IR
/// values; each path reduces and broadcasts its own way): `g * hits / count`, with
/// `hits = max_hits(x, y)` (y, the max, broadcast back to x) and `count` = `max_count(s)`
/// broadcast back (s, the sum of `hits` over the reduced dims).
///
/// 1 where `x` reaches the max `y`: equal to it, or NaN (a NaN max means NaN elements, which
/// are the ones it came from; otherwise no element is NaN).
template <class X, class Y>
auto max_hits(const X& x, const Y& y) {
  return eq(x, y) + ne(x, x);
}
/// The hits' sum `s`, with 1 for 0: a slice that no element reaches (the max computed from
/// values rounded differently) gets no gradient rather than 0 / 0 = NaN.
template <class S>
auto max_count(const S& s) {
  return s + (1.0 - sign(s));
}
}  // namespace detail

template <Element T>
tensor<T> max(const tensor<T>& x, const std::vector<index_t>& dims, bool keepdim = false) {
  const auto mask = detail::reduce_mask("max", x.shape(), dims);
  tensor<T> y = detail::reduce_values(detail::reduce_op::max, x, mask, keepdim);
  if (detail::active_recorder<T>()) [[unlikely]]
    return y;  // traced: the tracer derives the backward
  if (detail::needs_grad(x)) {
    detail::record<T>(dims.empty() ? "MaxBackward1" : "MaxBackward0", {x}, {&y}, {x, y},
                      [mask](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
                        const shape& from = s[0].shape();
                        tensor<T> hit = detail::max_hits(s[0], detail::unreduce(s[1], from, mask));
                        auto* rec = detail::active_recorder<T>();  // a traced backward (compiled autograd)
                        tensor<T> count = detail::max_count(
                            rec ? rec->reduce(detail::reduce_op::sum, hit, mask, true)
                                : detail::reduce_keepdim(hit, mask, detail::reduce_kind::sum));
                        return std::vector<tensor<T>>{
                            tensor<T>(detail::unreduce(g[0], from, mask) * hit / count)};
                      });
  }
  return y;
}
template <Element T> tensor<T> max(const tensor<T>& x) { return max(x, std::vector<index_t>{}); }
template <Element T, std::integral D> tensor<T> max(const tensor<T>& x, D dim, bool keepdim = false) {
  return max(x, std::vector<index_t>{static_cast<index_t>(dim)}, keepdim);
}

}  // namespace fusegrad
