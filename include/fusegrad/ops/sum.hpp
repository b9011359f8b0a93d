#pragma once
/// \file fusegrad/ops/sum.hpp
/// Sum over all elements (a 0-d result) or over given dims (optionally keeping them).
#include "fusegrad/ops/reduce_common.hpp"

namespace fusegrad {

/// Sum over `dims` (all dims when empty); reduced dims are dropped unless `keepdim`.
template <Element T>
tensor<T> sum(const tensor<T>& x, const std::vector<index_t>& dims, bool keepdim = false) {
  const auto mask = detail::reduce_mask("sum", x.shape(), dims);
  tensor<T> y = detail::reduce_values(detail::reduce_op::sum, x, mask, keepdim);
  if (detail::active_recorder<T>()) [[unlikely]]
    return y;  // traced: the tracer derives the backward
  detail::record_layout(std::string_view(dims.empty() ? "SumBackward0" : "SumBackward1"), x, y,
                        [from = x.shape(), mask](const tensor<T>& g) { return detail::unreduce(g, from, mask); });
  return y;
}
/// Sum of all elements, as a 0-d tensor.
template <Element T> tensor<T> sum(const tensor<T>& x) { return sum(x, std::vector<index_t>{}); }
/// Sum over one dim.
template <Element T, std::integral D> tensor<T> sum(const tensor<T>& x, D dim, bool keepdim = false) {
  return sum(x, std::vector<index_t>{static_cast<index_t>(dim)}, keepdim);
}

}  // namespace fusegrad
