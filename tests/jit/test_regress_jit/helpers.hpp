#pragma once

// Regressions in fg::jit and compiled autograd.
//  - Reductions over nothing, over size-1 dims or with keepdim (0-d, [1], [1,1],
//    [1,3], [3,1] inputs; sum, mean, max; full and over dims) through fg::jit with static and
//    dynamic shapes, and through compiled autograd, against the eager path and gradcheck.
//  - Tensor hooks and retain_grad on intermediates of a jitted function behave as in
//    eager mode (generic and not, replacing the gradient or not, removed between calls).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_normwise;
using D = fg::tensor<double>;

namespace {

struct ca_off {  // compiled autograd off before and after a test
  ca_off() { fg::config().compiled_autograd = false; }
  ~ca_off() { fg::config().compiled_autograd = false; }
};

/// Distinct values (max has no ties), the same for a given seed and shape.
inline D input(const fg::shape& s, std::uint64_t seed) { return fg::rand<double>(s, seed, -2.0, 2.0); }

/// What a test function's hooks saw, in order (each a gradient's values).
using seen_t = std::vector<std::vector<double>>;

/// Runs `fn(x, seen)` (returning a scalar loss) eagerly and jitted (`jf`, which wraps the same
/// function) on copies of `x0`, backward from each; the gradients of x and what the hooks saw
/// must be equal. Returns the jitted x.grad().
template <class JF, class F>
D same_hooks_as_eager(const JF& jf, const F& fn, const D& x0) {
  seen_t seen_e, seen_j;
  D xe = x0.clone().requires_grad(true), xj = x0.clone().requires_grad(true);
  fn(xe, seen_e).backward();
  D out_j = jf(xj, seen_j);
  REQUIRE(!out_j.is_lazy());
  out_j.backward();
  REQUIRE(xe.grad().defined() == xj.grad().defined());
  if (xe.grad().defined()) CHECK(max_normwise(xe.grad(), xj.grad()) < 1e-12);
  REQUIRE(seen_e.size() == seen_j.size());
  for (std::size_t i = 0; i < seen_e.size(); ++i) {
    CAPTURE(i);
    REQUIRE(seen_e[i].size() == seen_j[i].size());
    for (std::size_t k = 0; k < seen_e[i].size(); ++k)
      CHECK(seen_j[i][k] == doctest::Approx(seen_e[i][k]).epsilon(1e-12));
  }
  return xj.grad();
}

}  // namespace
