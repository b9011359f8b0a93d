#pragma once
/// \file fusegrad/nn/update.hpp
/// The loop every optimizer's step runs: each parameter that has a gradient, its values and
/// its gradient's (contiguous) handed to the update, then its version bumped (a tape that
/// saved the parameter refuses the stale copy).

#include <cstddef>
#include <string_view>
#include <vector>

#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/eager/views.hpp"

namespace fusegrad::detail {
/// What an optimizer `op` can update, checked when it is made (PyTorch's checks, and the ones
/// an in-place update of contiguous values needs): every parameter a defined leaf (one that
/// does not require grad is never updated, as in PyTorch), contiguous, and listed once.
template <Element T>
void check_params(std::string_view op, const std::vector<tensor<T>>& params) {
  for (std::size_t k = 0; k < params.size(); ++k) {
    const auto& p = params[k];
    if (!p.defined()) fail(op, "parameter ", k, " is an undefined tensor; expected a tensor");
    if (!p.is_leaf())
      fail(op, "parameter ", k, " of shape ", to_string(p.shape()), " is not a leaf (it has a grad_fn ",
           p.grad_fn_name(), "); expected leaf tensors: can't optimize a non-leaf tensor");
    if (!p.is_contiguous())
      fail(op, "parameter ", k, " of shape ", to_string(p.shape()),
           " is a non-contiguous view; expected contiguous tensors");
    for (std::size_t j = 0; j < k; ++j)
      if (params[j].raw_impl() == p.raw_impl())
        fail(op, "parameters ", j, " and ", k, " are the same tensor; expected each parameter once");
  }
}

/// Calls `update(k, p, g, n)` for every parameter `k` with a gradient: `p` its `n` values (to
/// update in place), `g` its gradient's.
template <Element T, class F>
void update_params(std::vector<tensor<T>>& params, F&& update) {
  for (std::size_t k = 0; k < params.size(); ++k) {
    auto& p = params[k];
    const tensor<T> g = p.grad();
    if (!g.defined()) continue;
    const tensor<T> gc = g.contiguous();  // kept alive while the update reads it
    update(k, p.data(), static_cast<const T*>(gc.data()), p.numel());
    p.impl()->store->bump_version();
  }
}
}  // namespace fusegrad::detail
