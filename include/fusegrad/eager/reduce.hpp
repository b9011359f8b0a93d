#pragma once
/// \file fusegrad/eager/reduce.hpp
/// The reductions on eager tensors: `sum`, `mean` and `max` over all elements (a 0-d result)
/// or over given dims (optionally keeping them), each recording its backward; their one
/// value body (`reduce_values`) and the broadcast back of a reduced gradient (`unreduce`).
/// Mean over nothing is NaN (like PyTorch); an empty max throws.

#include <algorithm>

#include "fusegrad/eager/pointwise.hpp"
#include "fusegrad/eager/views.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/max.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/reduce.hpp"
#include "fusegrad/ops/softmax.hpp"

namespace fusegrad {
namespace detail {
/// Broadcasts a reduced gradient `g` (shaped `reduced_shape(.., keepdim)`) back to `from`.
template <Element T>
tensor<T> unreduce(const tensor<T>& g, const shape& from, const std::vector<bool>& mask) {
  if (auto* r = active_recorder<T>()) [[unlikely]]
    return r->expand(g, from, mask);
  if (!needs_grad(g)) {
    // Nothing to record: the view reshape + expand would make, in one step (each reduced dim
    // read with step 0, each kept one with g's step). g without or with the reduced dims.
    const std::size_t r = from.size();
    const bool keep = g.dim() == r;
    strides st(r, 0);
    std::size_t gd = 0;
    bool fits = keep || g.dim() == static_cast<std::size_t>(std::count(mask.begin(), mask.end(), false));
    for (std::size_t d = 0; d < r && fits; ++d) {
      if (!mask[d]) {
        fits = g.shape()[gd] == from[d];
        st[d] = g.strides()[gd++];
      } else if (keep) {
        fits = g.shape()[gd++] == 1;
      }
    }
    if (fits) return alias(g, from, std::move(st), g.offset());
  }
  return g.reshape(reduced_shape(from, mask, true)).expand(from);
}

/// The values of `op` (sum, mean or max) of `x` over `mask`'s dims, without recording a
/// backward (a tracer on this thread records the reduction instead): the one body of the
/// eager reductions and of compiled graphs' reduction nodes. An empty max throws.
template <Element T>
tensor<T> reduce_values(reduce_op op, const tensor<T>& x, const std::vector<bool>& mask, bool keepdim) {
  check_reduction(op, x.shape(), mask);
  const index_t n = reduced_count(x.shape(), mask);
  if (auto* rec = active_recorder<T>()) [[unlikely]]
    return rec->reduce(op, x, mask, keepdim);
  tensor<T> r = reduce_keepdim(x, mask, op == reduce_op::max ? reduce_op::max : reduce_op::sum);
  if (op == reduce_op::mean) r = map(ops::div_scalar_op<T>{static_cast<T>(n)}, r);
  // r is fresh (no other handle, no history): its shape set in place, not through another view.
  auto& ri = *r.raw_impl();
  ri.sizes = reduced_shape(x.shape(), mask, keepdim);
  ri.st = contiguous_strides(ri.sizes);
  return r;
}
}  // namespace detail

/// Sum over `dims` (all dims when empty); reduced dims are dropped unless `keepdim`.
template <Element T>
tensor<T> sum(const tensor<T>& x, const std::vector<index_t>& dims, bool keepdim = false) {
  auto mask = detail::reduce_mask("sum", x.shape(), dims);
  tensor<T> y = detail::reduce_values(detail::reduce_op::sum, x, mask, keepdim);
  if (detail::active_recorder<T>()) [[unlikely]]
    return y;  // traced: the tracer derives the backward
  if (!detail::needs_grad(x)) return y;
  const auto params = detail::params_of(mask);  // before the mask moves into the rule
  detail::record_layout(
      std::string_view(dims.empty() ? "SumBackward0" : "SumBackward1"), x, y,
      [from = x.shape(), mask = std::move(mask)](const tensor<T>& g) { return detail::unreduce(g, from, mask); }, false,
      params);
  return y;
}
/// Sum of all elements, as a 0-d tensor.
template <Element T>
tensor<T> sum(const tensor<T>& x) {
  return sum(x, std::vector<index_t>{});
}
/// Sum over one dim.
template <Element T, std::integral D>
tensor<T> sum(const tensor<T>& x, D dim, bool keepdim = false) {
  return sum(x, std::vector<index_t>{static_cast<index_t>(dim)}, keepdim);
}

/// Mean over `dims` (all dims when empty); NaN for an empty reduction.
template <Element T>
tensor<T> mean(const tensor<T>& x, const std::vector<index_t>& dims, bool keepdim = false) {
  const auto mask = detail::reduce_mask("mean", x.shape(), dims);
  tensor<T> y = detail::reduce_values(detail::reduce_op::mean, x, mask, keepdim);
  if (detail::active_recorder<T>()) [[unlikely]]
    return y;  // traced: the tracer derives the backward
  const index_t n = detail::reduced_count(x.shape(), mask);
  detail::record_layout(
      std::string_view(dims.empty() ? "MeanBackward0" : "MeanBackward1"), x, y,
      [from = x.shape(), mask, n](const tensor<T>& g) {
        return detail::unreduce(tensor<T>(g / static_cast<T>(n)), from, mask);
      },
      false, detail::params_of(mask, n));
  return y;
}
template <Element T>
tensor<T> mean(const tensor<T>& x) {
  return mean(x, std::vector<index_t>{});
}
template <Element T, std::integral D>
tensor<T> mean(const tensor<T>& x, D dim, bool keepdim = false) {
  return mean(x, std::vector<index_t>{static_cast<index_t>(dim)}, keepdim);
}

/// Max over `dims` (all dims when empty): the gradient flows to the maximal elements (see
/// fusegrad/ops/max.hpp).
template <Element T>
tensor<T> max(const tensor<T>& x, const std::vector<index_t>& dims, bool keepdim = false) {
  const auto mask = detail::reduce_mask("max", x.shape(), dims);
  tensor<T> y = detail::reduce_values(detail::reduce_op::max, x, mask, keepdim);
  if (detail::active_recorder<T>()) [[unlikely]]
    return y;  // traced: the tracer derives the backward
  if (detail::needs_grad(x)) {
    detail::record<T>(
        dims.empty() ? "MaxBackward1" : "MaxBackward0", {x}, {&y}, {x, y},
        [mask](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
          const shape& from = s[0].shape();
          tensor<T> hit = detail::max_hits(s[0], detail::unreduce(s[1], from, mask));
          auto* rec = detail::active_recorder<T>();  // a traced backward (compiled autograd)
          tensor<T> count = detail::max_count(rec ? rec->reduce(detail::reduce_op::sum, hit, mask, true)
                                                  : detail::reduce_keepdim(hit, mask, detail::reduce_op::sum));
          return std::vector<tensor<T>>{tensor<T>(detail::unreduce(g[0], from, mask) * hit / count)};
        },
        std::nullopt, detail::double_backward::supported);
  }
  return y;
}
template <Element T>
tensor<T> max(const tensor<T>& x) {
  return max(x, std::vector<index_t>{});
}
template <Element T, std::integral D>
tensor<T> max(const tensor<T>& x, D dim, bool keepdim = false) {
  return max(x, std::vector<index_t>{static_cast<index_t>(dim)}, keepdim);
}

/// logsumexp over an empty dim is -inf, the log of an empty sum, as PyTorch's (the stable form,
/// fusegrad/ops/softmax.hpp, takes a max there, which has nothing to take it of); otherwise the
/// stable form itself.
template <Element T>
tensor<T> logsumexp(const tensor<T>& x, index_t dim, bool keepdim = false) {
  if (x.dim() > 0 && x.shape()[normalize_dim("logsumexp", dim, x.shape().size())] == 0)
    return log(sum(exp(x), dim, keepdim));
  return fusegrad::logsumexp<tensor<T>>(x, dim, keepdim);
}

}  // namespace fusegrad
