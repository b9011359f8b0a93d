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
#include "fusegrad/ops/table.hpp"
#include "fusegrad/ops/user_ops.hpp"

namespace fusegrad::detail::jit {

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

/// Both values of a unary op with a sibling (`has_sibling`: sin and cos from one reduction)
/// over `n` elements: the op's into `out`, its sibling's into `sib`.
template <Element T>
using sibling_kernel_fn = void (*)(const T* a, T* out, T* sib, index_t n);
template <class Op, Element T>
void op_sibling_kernel(const T* a, T* out, T* sib, index_t n) {
  fusegrad::detail::tile_sibling_kernel(Op{}, a, out, sib, n);
}
/// Of an op: its sibling's number in the table and the kernel computing both (-1 and null: none).
template <Element T>
struct sibling_entry {
  int op = -1;
  sibling_kernel_fn<T> kernel = nullptr;
};
template <Element T, class Op>
constexpr sibling_entry<T> sibling_entry_of() {
  if constexpr (fusegrad::detail::has_sibling<Op> && std::is_empty_v<Op>)
    return {ops::table_index<typename Op::sibling, T>, &op_sibling_kernel<Op, T>};
  else return {};
}
template <Element T, class... Ops>
constexpr std::array<sibling_entry<T>, sizeof...(Ops)> sibling_table(type_list<Ops...>) {
  return {sibling_entry_of<T, Ops>()...};
}

/// The tile kernel of op number `op`: a built-in's from the table, a user op's from its record.
template <Element T>
kernel_fn<T> kernel_of(int op) {
  static constexpr auto kernels = kernel_table<T>(ops::table<T>{});
  if (op >= 0 && op < ops::table_size<T>) return kernels[static_cast<std::size_t>(op)];
  return ops::user_op_at<T>(op, "jit").kernel;
}
/// The cost per element of op number `op` (`op_cost_units`).
template <Element T>
int cost_of(int op) {
  static constexpr auto costs = cost_table(ops::table<T>{});
  if (op >= 0 && op < ops::table_size<T>) return costs[static_cast<std::size_t>(op)];
  return ops::user_op_at<T>(op, "jit").cost;
}
/// Op number `op`'s sibling and the kernel computing both (none for a user's op).
template <Element T>
sibling_entry<T> sibling_of(int op) {
  static constexpr auto siblings = sibling_table<T>(ops::table<T>{});
  if (op >= 0 && op < ops::table_size<T>) return siblings[static_cast<std::size_t>(op)];
  return {};
}
/// What op number `op` costs once its sibling's value is computed (`cost_beside_sibling`).
template <Element T>
int sibling_cost_of(int op) {
  static constexpr auto costs = []<class... Ops>(type_list<Ops...>) {
    return std::array<int, sizeof...(Ops)>{fusegrad::detail::cost_beside_sibling<Ops>()...};
  }(ops::table<T>{});
  if (op >= 0 && op < ops::table_size<T>) return costs[static_cast<std::size_t>(op)];
  return cost_of<T>(op);
}
}  // namespace fusegrad::detail::jit
