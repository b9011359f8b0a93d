#pragma once
/// \file fusegrad/nn/update.hpp
/// The loop every optimizer's step runs: each parameter that has a gradient, its values and
/// its gradient's (contiguous) handed to the update, then its version bumped (a tape that
/// saved the parameter refuses the stale copy).

#include <cstddef>
#include <vector>

#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/eager/views.hpp"

namespace fusegrad::detail {
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
