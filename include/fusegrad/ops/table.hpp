#pragma once
/// \file fusegrad/ops/table.hpp
/// The built-in element-wise ops as a type list, expanded from their one list in
/// ops/list.hpp (which includes their headers): the run-time IR names a node's op by its index here, eager ops tell a
/// tracer which op they are by it, and the precompiled runtime (fusegrad/runtime.hpp)
/// instantiates each.

#include <cstddef>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/type_list.hpp"
#include "fusegrad/ops/list.hpp"

namespace fusegrad::detail {
/// `type_list<Ts...>` of `void, Ts...`: the op list's entries each bring their leading comma.
template <class, class... Ts>
using type_list_after_void = type_list<Ts...>;
}  // namespace fusegrad::detail

namespace fusegrad::ops {

/// Every built-in element-wise op, in one list (ops/list.hpp): a run-time IR node names its op
/// by its index here, and the precompiled runtime instantiates each. Ops with state hold
/// exactly one scalar of the element type (the node's `scalar`).
#define FUSEGRAD_OP_TABLE_ENTRY(arity, form, op) , FUSEGRAD_OP_TYPE(form, op, T)
template <Element T>
using table = detail::type_list_after_void<void FUSEGRAD_OP_LIST(FUSEGRAD_OP_TABLE_ENTRY)>;
#undef FUSEGRAD_OP_TABLE_ENTRY

/// Index of `Op` in `table<T>` (-1 for ops not in it, e.g. a user's own).
template <class Op, Element T>
inline constexpr int table_index = detail::type_index<Op>(table<T>{});

/// An op of `table<T>` (the run-time IR can hold it).
// clang-format 14 misreads a parenthesis after && in a concept:
// clang-format off
template <class Op, class T>
concept TableOp = Element<T> && (table_index<Op, T> >= 0);
// clang-format on
}  // namespace fusegrad::ops
