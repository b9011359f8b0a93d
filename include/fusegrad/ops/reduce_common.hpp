#pragma once
/// \file fusegrad/ops/reduce_common.hpp
/// Dim handling shared by the reductions `sum`, `mean` and `max`.

#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/views.hpp"

namespace fusegrad::detail {

/// One flag per dim of `s`: true where `dims` reduces (all dims when `dims` is empty).
inline std::vector<bool> reduce_mask(std::string_view op, const shape& s, const std::vector<index_t>& dims) {
  std::vector<bool> m(s.size(), dims.empty());
  for (index_t d : dims) {
    const std::size_t dd = normalize_dim(op, d, s.size());
    if (s.empty()) continue;
    if (m[dd]) fail(op, "dim ", dd, " appears twice in the reduced dims; expected distinct dims");
    m[dd] = true;
  }
  return m;
}

/// The shape after reducing `mask`'s dims: kept with size 1, or dropped.
inline shape reduced_shape(const shape& s, const std::vector<bool>& mask, bool keepdim) {
  shape r;
  for (std::size_t d = 0; d < s.size(); ++d) {
    if (!mask[d]) r.push_back(s[d]);
    else if (keepdim) r.push_back(1);
  }
  return r;
}

/// Number of elements folded into each result element.
inline index_t reduced_count(const shape& s, const std::vector<bool>& mask) {
  index_t n = 1;
  for (std::size_t d = 0; d < s.size(); ++d)
    if (mask[d]) n *= s[d];
  return n;
}

/// Throws unless `op` over `mask`'s dims of a value of shape `s` is defined: a max needs at
/// least one element to reduce (PyTorch's rule). Eager reductions, the tracer and compiled
/// graphs' shape inference all check here.
inline void check_reduction(reduce_op op, const shape& s, const std::vector<bool>& mask) {
  if (op == reduce_op::max && reduced_count(s, mask) == 0)
    fail("max", "cannot reduce a tensor of shape ", to_string(s), " over an empty dim; expected a non-empty reduction");
}

/// Broadcasts a reduced gradient `g` (shaped `reduced_shape(.., keepdim)`) back to `from`.
template <Element T>
tensor<T> unreduce(const tensor<T>& g, const shape& from, const std::vector<bool>& mask) {
  if (auto* r = active_recorder<T>()) [[unlikely]]
    return r->expand(g, from, mask);
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
  tensor<T> r = reduce_keepdim(x, mask, op == reduce_op::max ? reduce_kind::max : reduce_kind::sum);
  if (op == reduce_op::mean) r = map(ops::div_scalar_op<T>{static_cast<T>(n)}, r);
  const shape out = reduced_shape(x.shape(), mask, keepdim);
  return alias(r, out, contiguous_strides(out), 0);
}

}  // namespace fusegrad::detail
