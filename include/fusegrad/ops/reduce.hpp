#pragma once
/// \file fusegrad/ops/reduce.hpp
/// The reductions `sum`, `mean` and `max` as ops: their kinds and the rules on dims and
/// shapes every representation shares (which dims a call reduces, the result's shape, when a
/// reduction is undefined).

#include <cstdint>
#include <string_view>
#include <vector>

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/shape.hpp"

namespace fusegrad::detail {

/// A reduction's kind.
enum class reduce_op : std::uint8_t { sum, mean, max };

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

}  // namespace fusegrad::detail
