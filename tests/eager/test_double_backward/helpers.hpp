#pragma once

// Double backward on the eager tape: `fg::autograd::grad` and `backward({.create_graph = true})`
// return gradients that are on the tape themselves.
//  - every differentiable op of the registry: gradgradcheck, i.e. gradcheck of the function
//    x -> <grad f(x), w>, whose analytic derivative is the double backward;
//  - second derivatives against closed forms;
//  - the structure ops' and matmul's backward rules differentiated again;
//  - rules that are not differentiable give a clear error when a second backward reaches them;
//  - autograd::grad's own contract (no .grad() written, unused inputs, hooks, errors).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "opinfo/harness.hpp"
#include "opinfo/references.hpp"
#include "opinfo/registry.hpp"
#include "opinfo/structured.hpp"

namespace {
using namespace opinfo;
using td = fg::tensor<double>;

/// Fixed weights of a shape (the direction the gradient is projected on).
inline td weights(const fg::shape& s, double seed) {
  std::vector<double> v(static_cast<std::size_t>(count(s)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5 + 0.37 * std::sin(seed + 1.3 * static_cast<double>(i));
  return fg::from_vector<double>(v, s);
}

/// x -> sum_k <d sum(f(x)) / d x_k, w_k>: its gradient is the Hessian of sum(f) times w.
template <class F>
auto projected_gradient(F f) {
  return [f](const auto&... xs) {
    fg::enable_grad on;  // gradcheck's finite differences run under no_grad: this needs the first gradient
    std::vector<td> in{xs...};
    const td y = fg::sum(f(xs...));
    const auto g = fg::autograd::grad({y}, in, {.create_graph = true, .allow_unused = true});
    td s = y * 0.0;
    for (std::size_t k = 0; k < in.size(); ++k)
      if (g[k].defined()) s = s + fg::sum(g[k] * weights(in[k].shape(), static_cast<double>(k)));
    return s;
  };
}

template <std::size_t N>
std::vector<shapes<N>> small_shape_classes() {
  auto same = [](fg::shape s) {
    shapes<N> r;
    r.fill(s);
    return r;
  };
  std::vector<shapes<N>> r = {same({}), same({1}), same({7}), same({3, 4}), same({0})};
  if constexpr (N == 2) {
    r.push_back({fg::shape{3, 1}, fg::shape{1, 4}});
    r.push_back({fg::shape{4}, fg::shape{}});
  } else if constexpr (N == 3) {
    r.push_back({fg::shape{3, 1}, fg::shape{1, 4}, fg::shape{}});
  }
  return r;
}

constexpr fg::gradcheck_options second{.eps = 1e-6, .atol = 1e-5, .rtol = 1e-4};

inline td vec(std::vector<double> v) { return fg::from_vector<double>(std::move(v)).requires_grad(true); }
}  // namespace
