#pragma once
/// \file fusegrad/eager/grad_sum.hpp
/// How gradients are summed: computed, or recorded in a traced backward (compiled autograd).

#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/ops/table.hpp"

namespace fusegrad {

namespace detail {

/// a + b, element-wise: how gradients are summed.
struct accumulate_values {
  template <class V>
  V value(const V& a, const V& b) const {
    return a + b;
  }
};

/// a + b for gradients: computed, or recorded when a tracer is active (compiled autograd).
template <Element T>
tensor<T> add_grads(const tensor<T>& a, const tensor<T>& b) {
  if (auto* r = active_recorder<T>()) [[unlikely]]
    return r->pointwise(ops::table_index<ops::add_op, T>, T{}, a, &b);
  if (is_grad_enabled() && (a.requires_grad() || b.requires_grad())) [[unlikely]]
    return a + b;  // a create_graph backward: the sum is recorded
  return zip("backward", accumulate_values{}, a, b);
}

}  // namespace detail

}  // namespace fusegrad
