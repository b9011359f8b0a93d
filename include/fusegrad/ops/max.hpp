#pragma once
/// \file fusegrad/ops/max.hpp
/// Max over all elements or over one dim (values only). The gradient flows to the maximal
/// elements, split evenly between ties (PyTorch's `amax` rule). An empty reduction throws.
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/sum.hpp"

namespace fusegrad {

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
                        tensor<T> hit = eq(s[0], detail::unreduce(s[1], from, mask));
                        auto* rec = detail::active_recorder<T>();  // a traced backward (compiled autograd)
                        tensor<T> count = rec ? rec->reduce(detail::reduce_op::sum, hit, mask, true)
                                              : detail::reduce_keepdim(hit, mask, detail::reduce_kind::sum);
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
