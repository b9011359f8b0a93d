#pragma once
/// \file fusegrad/eager/lines.hpp
/// The lines of a tensor along one dim, the loop shape of the eager ops that are not
/// element-wise (scans, `prod`, `flip`): where each line starts and its stride, a tensor as
/// contiguous lines, and a shape with one dim reduced.

#include <string_view>
#include <utility>

#include "fusegrad/eager/tensor.hpp"

namespace fusegrad::detail {

/// The lines of a tensor of shape `s` along dim `d`: `outer` blocks of `n` elements, `inner`
/// apart; line (o, i) starts at o * n * inner + i.
struct lines {
  index_t outer = 1, n = 1, inner = 1;
  lines(const shape& s, std::size_t d) {
    for (std::size_t k = 0; k < s.size(); ++k) (k < d ? outer : k == d ? n : inner) *= s[k];
  }
  template <class F>
  void each(F f) const {  // f(first element, stride)
    for (index_t o = 0; o < outer; ++o)
      for (index_t i = 0; i < inner; ++i) f(o * n * inner + i, inner);
  }
};

/// `x` as a contiguous tensor viewed with one dim (a 0-d tensor becomes [1]).
template <Element T>
std::pair<tensor<T>, std::size_t> line_input(std::string_view op, const tensor<T>& x, index_t dim) {
  const tensor<T> c = x.detach().contiguous();
  if (x.dim() == 0) return {c.reshape({1}), 0};
  return {c, normalize_dim(op, dim, x.dim())};
}

/// The reduced shape of `s` over dim `d`.
inline shape drop_dim(const shape& s, std::size_t d, bool keepdim) {
  shape r = s;
  if (s.empty()) return r;
  if (keepdim) r[d] = 1;
  else r.erase(r.begin() + static_cast<std::ptrdiff_t>(d));
  return r;
}

}  // namespace fusegrad::detail
