#pragma once
/// \file fusegrad/core/operand.hpp
/// The customisation point every representation joins: what the op functions (`cos`, `+`,
/// `sum`, ...) accept. The op functions of `ops/` are written once over this concept and
/// dispatch through `apply_op(op, x...)`, which each representation overloads for its values
/// (eager tensors in `eager/`, expression types in `expr/`, run-time IR values in `ir/`).

#include <type_traits>

#include "fusegrad/core/element.hpp"

namespace fusegrad {

/// Customisation point: a value type the op functions accept. Each representation
/// specialises it for its value types (`static constexpr bool value = true;` and
/// `using element_type = T;`).
template <class X>
struct operand_traits {
  static constexpr bool value = false;
};

/// Something fusegrad's op functions accept: an eager tensor, an expression, a traced value.
template <class X>
concept Operand = operand_traits<std::remove_cvref_t<X>>::value;

/// The element type (`float` or `double`) of an operand.
template <Operand X>
using element_of = typename operand_traits<std::remove_cvref_t<X>>::element_type;

namespace detail {
/// `false`, spelled so that it depends on template arguments: a `static_assert` on it fires
/// only when its template is instantiated.
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace detail

}  // namespace fusegrad
