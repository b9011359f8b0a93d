#pragma once
/// \file fusegrad/ops/mean.hpp
/// Mean over all elements or over given dims (NaN for an empty reduction, like PyTorch).
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/reduce_common.hpp"

namespace fusegrad {

template <Element T>
tensor<T> mean(const tensor<T>& x, const std::vector<index_t>& dims, bool keepdim = false) {
  const auto mask = detail::reduce_mask("mean", x.shape(), dims);
  tensor<T> y = detail::reduce_values(detail::reduce_op::mean, x, mask, keepdim);
  if (detail::active_recorder<T>()) [[unlikely]]
    return y;  // traced: the tracer derives the backward
  const index_t n = detail::reduced_count(x.shape(), mask);
  detail::record_layout(std::string_view(dims.empty() ? "MeanBackward0" : "MeanBackward1"), x, y,
                        [from = x.shape(), mask, n](const tensor<T>& g) {
                          return detail::unreduce(tensor<T>(g / static_cast<T>(n)), from, mask);
                        });
  return y;
}
template <Element T> tensor<T> mean(const tensor<T>& x) { return mean(x, std::vector<index_t>{}); }
template <Element T, std::integral D> tensor<T> mean(const tensor<T>& x, D dim, bool keepdim = false) {
  return mean(x, std::vector<index_t>{static_cast<index_t>(dim)}, keepdim);
}

}  // namespace fusegrad
