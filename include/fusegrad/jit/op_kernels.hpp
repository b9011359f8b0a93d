#pragma once
/// \file fusegrad/jit/op_kernels.hpp
/// The tile kernel of every op of the op table, by its index: what a program's loop
/// instruction calls (the kernels of the compile-time fused backend, compiled once for all
/// graphs).

#include <array>
#include <bit>
#include <type_traits>

#include "fusegrad/core/type_list.hpp"
#include "fusegrad/loops/tile.hpp"
#include "fusegrad/ops/op.hpp"

namespace fusegrad::ir {

namespace detail {
using fusegrad::detail::type_list;

/// Runs op `Op` (its constant `s`) over `n` elements with the tile kernel the compile-time
/// fused backend uses.
template <class Op, Element T>
void op_kernel(T s, const T* a, const T* b, T* out, index_t n) {
  if constexpr (std::is_empty_v<Op>) fusegrad::detail::tile_op(Op{}, a, b, out, n);
  else fusegrad::detail::tile_op(std::bit_cast<Op>(s), a, b, out, n);
}

template <Element T>
using kernel_fn = void (*)(T, const T*, const T*, T*, index_t);

template <Element T, class... Ops>
constexpr std::array<kernel_fn<T>, sizeof...(Ops)> kernel_table(type_list<Ops...>) {
  return {&op_kernel<Ops, T>...};
}

/// Every op's cost per element (`op_cost_units`), by its index: the cost-based plan's weights.
template <class... Ops>
constexpr std::array<int, sizeof...(Ops)> cost_table(type_list<Ops...>) {
  return {fusegrad::detail::op_cost_units<Ops>()...};
}
}  // namespace detail

}  // namespace fusegrad::ir
