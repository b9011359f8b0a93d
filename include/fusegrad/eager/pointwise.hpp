#pragma once
/// \file fusegrad/eager/pointwise.hpp
/// How an op definition (value, SIMD value, derivative rule) runs on eager tensors.
///
/// An element-wise op is a struct with
///   - `name` and `grad_fn` (PyTorch's node name, e.g. "CosBackward0"),
///   - `value(v)` (or `value(a, b)`) written once for scalars and `fusegrad::simd<T>` batches,
///   - optionally `derivative(x, y, g)` (or `da(a, b, y, g)` and `db(...)`): the backward rule
///     written over any algebra of values (eager tensors today; expression types and IR
///     values reuse the very same rule), and `uses_input` / `uses_output` flags saying
///     which forward values the rule reads (so eager mode saves only those).
/// Users write their own element-wise ops the same way and call them with `fusegrad::apply_op`.

#include <concepts>
#include <string_view>

#include <bit>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/ir/op_table.hpp"

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

namespace detail {
template <class Op, class V>
concept has_unary_derivative = requires(const Op& op, const V& v) { op.derivative(v, v, v); };
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

/// Sums `g` down to `target` (the inverse of broadcasting), without recording.
template <Element T>
tensor<T> sum_to(const tensor<T>& g, const shape& target) {
  if (g.shape() == target) return g;
  if (auto* r = active_recorder<T>()) [[unlikely]]
    return r->sum_to(g, target);
  const auto& s = g.shape();
  const std::size_t lead = s.size() - target.size();
  std::vector<bool> mask(s.size(), false);
  for (std::size_t d = 0; d < s.size(); ++d)
    mask[d] = d < lead || (target[d - lead] == 1 && s[d] != 1);
  tensor<T> r = reduce_keepdim(g, mask, reduce_kind::sum);
  return alias(r, target, contiguous_strides(target), 0);
}
}  // namespace detail

/// Applies an element-wise op to an eager tensor, recording its backward rule on the tape.
template <Element T, UnaryOp<T> Op>
tensor<T> apply_op(const Op& op, const tensor<T>& x) {
  if constexpr (ir::KnownOp<Op, T>)
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      return r->pointwise(ir::op_index<Op, T>, detail::op_scalar<T>(op), x, nullptr);
  tensor<T> y = detail::map(op, x);
  if constexpr (detail::has_unary_derivative<Op, tensor<T>>) {
    if (detail::needs_grad(x)) {
      std::vector<tensor<T>> saved{detail::uses_input<Op>() ? x : tensor<T>{},
                                   detail::uses_output<Op>() ? y : tensor<T>{}};
      detail::record<T>(Op::grad_fn, {x}, {&y}, std::move(saved),
                        [op](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
                          return std::vector<tensor<T>>{tensor<T>(op.derivative(s[0], s[1], g[0]))};
                        });
    }
  }
  return y;
}

/// Applies a broadcasting element-wise op to two eager tensors, recording its backward.
template <Element T, BinaryOp<T> Op>
tensor<T> apply_op(const Op& op, const tensor<T>& a, const tensor<T>& b) {
  if constexpr (ir::KnownOp<Op, T>)
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      return r->pointwise(ir::op_index<Op, T>, detail::op_scalar<T>(op), a, &b);
  tensor<T> y = detail::zip(Op::name, op, a, b);
  if constexpr (detail::has_binary_derivative<Op, tensor<T>>) {
    if (detail::needs_grad(a, b)) {
      const bool ga = a.requires_grad(), gb = b.requires_grad();
      std::vector<tensor<T>> saved{detail::uses_input<Op>() ? a : tensor<T>{},
                                   detail::uses_input<Op>() ? b : tensor<T>{},
                                   detail::uses_output<Op>() ? y : tensor<T>{}};
      detail::record<T>(
          Op::grad_fn, {a, b}, {&y}, std::move(saved),
          [op, ga, gb, sa = a.shape(), sb = b.shape()](const std::vector<tensor<T>>& s,
                                                       std::vector<tensor<T>>& g) {
            std::vector<tensor<T>> r(2);
            if (ga) r[0] = detail::sum_to(tensor<T>(op.da(s[0], s[1], s[2], g[0])), sa);
            if (gb) r[1] = detail::sum_to(tensor<T>(op.db(s[0], s[1], s[2], g[0])), sb);
            return r;
          });
    }
  }
  return y;
}

/// Two tensors of different element types: fusegrad never promotes implicitly.
template <Element T, Element U, class Op>
  requires(!std::same_as<T, U>)
tensor<T> apply_op(const Op&, const tensor<T>&, const tensor<U>&) {
  static_assert(std::same_as<T, U>,
                "fusegrad: both operands of a binary op must have the same element type "
                "(no implicit float/double promotion); convert one side first");
  return {};
}

}  // namespace fusegrad
