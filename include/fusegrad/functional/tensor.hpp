#pragma once
/// \file fusegrad/functional/tensor.hpp
/// `fg::tensor<T>` arguments of the functional transforms: a contiguous tensor is a range of
/// its elements (row-major), read in place; the gradients come back as new tensors of the
/// argument's shape. Nothing is recorded on the tape: the transforms work under `no_grad`
/// and on tensors that do not require grad, and the results require none.

#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/functional/call.hpp"

namespace fusegrad {

template <Element T>
struct range_source<tensor<T>> {
  static constexpr bool value = true;
  using element_type = T;
  /// The elements (a non-contiguous view is refused with an error naming it).
  static const T* data(const tensor<T>& a) { return a.data(); }
  static index_t size(const tensor<T>& a) { return a.numel(); }
  /// A tensor of `a`'s shape, to hold its gradient (`data()` gives where to write).
  static tensor<T> make_like(const tensor<T>& a) { return detail::empty<T>(a.shape(), "grad"); }
};

}  // namespace fusegrad
