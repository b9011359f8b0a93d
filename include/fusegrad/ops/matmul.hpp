#pragma once
/// \file fusegrad/ops/matmul.hpp
/// Matrix products as ops: the rules on shapes every representation shares (eager
/// `matmul`/`linear` in eager/matmul.hpp, and `fg::compile`'s matrix products: one definition,
/// so all accept the same shapes with the same errors).

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/shape.hpp"

namespace fusegrad::detail {

/// The checks of `matmul(a, b)` on the operands' shapes (eager `matmul`, and `fg::compile`'s
/// matrix products: one definition, so both accept the same shapes with the same errors).
inline void check_matmul(const shape& a, const shape& b) {
  if (a.empty() || b.empty())
    fail("matmul", "both arguments need at least 1 dim, got shapes ", to_string(a), " and ", to_string(b));
  const index_t ka = a.back(), kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (ka != kb)
    fail("matmul", "shapes ", to_string(a), " and ", to_string(b), " cannot be multiplied (", ka, " != ", kb,
         "); expected a.size(-1) == b.size(", b.size() == 1 ? "0" : "-2", ")");
}

/// The checks of `linear(x, w)` on the input's and the weight's shapes (eager and compiled).
inline void check_linear(const shape& x, const shape& w) {
  if (w.size() != 2 || x.empty() || x.back() != w[1])
    fail("linear", "input of shape ", to_string(x), " and weight of shape ", to_string(w),
         " do not fit; expected input [..., in] and weight [out, in]");
}

}  // namespace fusegrad::detail
