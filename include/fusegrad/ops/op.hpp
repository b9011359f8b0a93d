#pragma once
/// \file fusegrad/ops/op.hpp
/// What an op is. Each op header of `ops/` holds one op: a struct with
///   - `name` and `grad_fn` (PyTorch's node name, e.g. "CosBackward0"),
///   - `value(v)` (or `value(a, b)`) written once for scalars and `fusegrad::simd<T>` batches,
///   - optionally `derivative(x, y, g)` (or `da(a, b, y, g)` and `db(...)`): the backward rule
///     written over any algebra of values (eager tensors, expression types and IR values all
///     run the very same rule), and `uses_input` / `uses_output` flags saying which forward
///     values the rule reads (so eager mode saves only those),
/// and its public functions (`fg::cos(x)`), written once over the `Operand` concept: they call
/// `apply_op(op, x...)`, which each representation overloads for its values. Op headers include
/// only `core/` and other op headers: no tensors, no tape. Users write their own element-wise
/// ops the same way and call them with `fusegrad::apply_op`.

#include <bit>
#include <cmath>
#include <concepts>
#include <string_view>
#include <type_traits>

#include "fusegrad/core/operand.hpp"
#include "fusegrad/core/simd.hpp"

namespace fusegrad {

/// An element-wise op with one operand for element type `T` (see this header's comment).
template <class Op, class T>
concept UnaryOp = Element<T> && requires(const Op& op, T x, simd<T> b) {
  { Op::name } -> std::convertible_to<std::string_view>;
  { op.value(x) } -> std::convertible_to<T>;
  { op.value(b) } -> std::convertible_to<simd<T>>;
};

/// An element-wise op with two operands for element type `T` (see this header's comment).
template <class Op, class T>
concept BinaryOp = Element<T> && requires(const Op& op, T x, simd<T> b) {
  { Op::name } -> std::convertible_to<std::string_view>;
  { op.value(x, x) } -> std::convertible_to<T>;
  { op.value(b, b) } -> std::convertible_to<simd<T>>;
};

/// A plain `float` or `double` where an op function takes an operand: a constant (a maturity
/// `T` captured by a transformed function, in `fg::sqrt(T)`). The op's own `value` computes
/// it, the definition every representation runs, so `fg::exp(x)` on a number has the bits of
/// `fg::exp` on an operand holding that number in the scalar form of the transforms.
template <class X>
concept Number = Element<std::remove_cvref_t<X>>;
/// What the element-wise op functions (`fg::sqrt`, `fg::exp`, ...) accept: an operand, or a
/// number.
template <class X>
concept OperandOrNumber = Operand<X> || Number<X>;

template <Element T, class Op>
requires UnaryOp<Op, T>
constexpr T apply_op(const Op& op, T x) { return op.value(x); }
template <Element T, class Op>
requires BinaryOp<Op, T>
constexpr T apply_op(const Op& op, T a, T b) { return op.value(a, b); }

/// An op that declares what one element of it costs: `static constexpr double cost`, in loads
/// of one element streamed from memory (see `detail::op_cost`). Every op of the op list
/// (ops/list.hpp) must: a built-in op without it would silently count as cheap arithmetic
/// and change the save/recompute plans of every graph that uses it.
template <class Op>
concept DeclaresCost = std::same_as<decltype(Op::cost), const double>;

namespace detail {
template <class Op, class V>
concept has_unary_derivative = requires(const Op& op, const V& v) {
  op.derivative(v, v, v);
};
template <class Op, class V>
concept has_binary_derivative = requires(const Op& op, const V& v) {
  op.da(v, v, v, v);
  op.db(v, v, v, v);
};
/// Whether `Op` has a derivative rule over values `V`. Results of ops without one
/// (comparisons, `step`, `sign`) never require grad: on the tape, in the tracer.
template <class Op, class V>
concept has_derivative = has_unary_derivative<Op, V> || has_binary_derivative<Op, V>;
template <class Op>
constexpr bool uses_input() {
  if constexpr (requires { Op::uses_input; }) return Op::uses_input;
  else return true;
}
template <class Op>
constexpr bool uses_output() {
  if constexpr (requires { Op::uses_output; }) return Op::uses_output;
  else return true;
}

/// What computing one element of `Op` costs, in loads of one element streamed from memory:
/// `Op::cost` where the op declares it (every op of the op list does: `DeclaresCost`), else,
/// for a user's op, an arithmetic op's 0.3 of a load. The cost-based save/recompute plan
/// (partition/plan.hpp) weighs recomputing a value against saving it with these;
/// `bench/bench_op_costs.cpp` measures them (docs/performance.md).
template <class Op>
constexpr double op_cost() {
  if constexpr (requires { Op::cost; }) return Op::cost;
  else return 0.3;
}
/// The integer unit of costs in plans: 1/16 of a streamed load (two bits below the point).
inline constexpr int cost_units_per_load = 16;
/// `op_cost<Op>()` in `cost_units_per_load` units.
template <class Op>
constexpr int op_cost_units() {
  // NOLINTNEXTLINE(bugprone-incorrect-roundings): costs are small and positive; std::lround is not constexpr
  return static_cast<int>(op_cost<Op>() * cost_units_per_load + 0.5);
}
/// An op costing this much (3 streamed loads per element, in the plan's units) or more is slow:
/// its latency (tens of cycles per batch) is what a batch waits for.
inline constexpr int slow_op_cost = 3 * cost_units_per_load;
/// Whether `Op` is slow (`slow_op_cost`).
template <class Op>
constexpr bool slow_op() {
  return op_cost_units<Op>() >= slow_op_cost;
}

/// Whether `Op` has a sibling: another op on the same operand whose value comes out of the same
/// work (`sin` and `cos`: one reduction of the argument gives both). Such an op names it
/// (`using sibling = cos_op;`) and gives
///   - `with_sibling(v)`: `{Op's value, the sibling's value}` of a scalar or a batch, each with
///     the bits of the op's own `value`,
///   - `derivative_with_sibling(x, y, s, g)`: its `derivative` reading the sibling's value `s`
///     of the same operand instead of computing it (`derivative` calls it with `s` computed),
///   - `sibling_cost`: what the second value costs once the first is computed, as `cost`.
/// An evaluator that meets both ops on one operand in one loop (fg::compile's fused kernels,
/// fg::jit's programs, the span engine's forward and backward) computes them together, and the
/// plans count a value whose sibling the backward computes anyway as costing `sibling_cost` to
/// recompute.
template <class Op>
concept has_sibling = requires {
  typename Op::sibling;
};
/// Whether ops `A` and `B` are siblings (see `has_sibling`).
template <class A, class B>
constexpr bool siblings() {
  if constexpr (has_sibling<A>) return std::is_same_v<typename A::sibling, B>;
  else return false;
}
/// What a value of op `Op` costs once its sibling's value is computed (the sibling's
/// `sibling_cost`), in `cost_units_per_load` units; `op_cost_units` without a sibling.
template <class Op>
constexpr int cost_beside_sibling() {
  // NOLINTNEXTLINE(bugprone-incorrect-roundings): costs are small and positive; std::lround is not constexpr
  if constexpr (has_sibling<Op>) return static_cast<int>(Op::sibling::sibling_cost * cost_units_per_load + 0.5);
  else return op_cost_units<Op>();
}

/// Whether a unary op's derivative reads its one scalar only as the last argument of
/// `Op::derivative_by(x, y, g, s)` (a static function: it cannot see the member; `derivative`
/// calls it with the member), so that the scalar may be given as a value of another kind (a
/// 0-d tensor: compiled autograd makes it an input of the captured graph, and a changed scalar
/// is a new input value, not a new graph). `s` times or over a tensor rounds as the scalar op
/// does (one IEEE operation either way). Other ops' scalars are constants of their rules.
template <class Op>
constexpr bool scalar_is_input() {
  if constexpr (requires { Op::scalar_is_input; }) return Op::scalar_is_input;
  else return false;
}

/// The constant an op with state holds (its one scalar), or zero.
template <Element T, class Op>
T op_scalar(const Op& op) {
  if constexpr (std::is_empty_v<Op>) return T{};
  else {
    static_assert(sizeof(Op) == sizeof(T) && std::is_trivially_copyable_v<Op>,
                  "fusegrad: an op in the IR's op table with state must hold exactly one scalar of the "
                  "element type");
    return std::bit_cast<T>(op);
  }
}

}  // namespace detail

}  // namespace fusegrad
