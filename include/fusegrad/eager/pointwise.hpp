#pragma once
/// \file fusegrad/eager/pointwise.hpp
/// How an op definition (value, SIMD value, derivative rule: see fusegrad/ops/op.hpp) runs on
/// eager tensors: `apply_op` computes with the op's tile kernel and records its rule on the tape.

#include <concepts>
#include <string_view>

#include <bit>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/ops/op.hpp"
#include "fusegrad/ops/table.hpp"
#include "fusegrad/ops/user_ops.hpp"
#include "fusegrad/loops/tile.hpp"

namespace fusegrad {

namespace detail {
/// The `params` of an op's tape node (`record`): its scalar and `extra` when the op's state is
/// that scalar (every op of the op table), none otherwise (the node is not collected).
template <Element T, class Op, class... A>
std::optional<std::uint64_t> op_params(const Op& op, const A&... extra) {
  if constexpr (std::is_empty_v<Op> || ops::TableOp<Op, T> || ops::TraceableUserOp<Op, T>)
    return params_of(type_id<Op>(), op_scalar<T>(op), extra...);
  else return std::nullopt;
}

/// User op `Op` rebuilt from a node's scalar (its one scalar of state, or none).
template <class Op, Element T>
Op user_op_from(T s) {
  if constexpr (std::is_empty_v<Op>) return Op{};
  else return std::bit_cast<Op>(s);
}
template <class Op, Element T>
void user_op_kernel(T s, const T* a, const T* b, T* out, index_t n) {
  tile_op(user_op_from<Op>(s), a, b, out, n);
}
template <class Op, Element T>
tensor<T> user_op_eager(T s, const tensor<T>& a, const tensor<T>* b) {
  if constexpr (BinaryOp<Op, T>) return apply_op(user_op_from<Op>(s), a, *b);
  else return apply_op(user_op_from<Op>(s), a);
}
template <class Op, Element T>
tensor<T> user_op_rule(T s, int operand, const tensor<T>& a, const tensor<T>* b, const tensor<T>& y,
                       const tensor<T>& g) {
  const Op op = user_op_from<Op>(s);
  if constexpr (has_unary_derivative<Op, tensor<T>>) return tensor<T>(op.derivative(a, y, g));
  else if constexpr (has_binary_derivative<Op, tensor<T>>)
    return tensor<T>(operand == 0 ? op.da(a, *b, y, g) : op.db(a, *b, y, g));
  else return tensor<T>{};
}
/// What the run-time IR knows of user op `Op` (fusegrad/ops/user_ops.hpp): one object per op
/// and element type, whose address is the op's identity.
template <class Op, Element T>
inline const ops::user_op<T> user_op_of{Op::name,
                                        BinaryOp<Op, T>,
                                        !std::is_empty_v<Op>,
                                        has_derivative<Op, tensor<T>>,
                                        op_cost_units<Op>(),
                                        &user_op_kernel<Op, T>,
                                        &user_op_eager<Op, T>,
                                        &user_op_rule<Op, T>};
/// The IR's number of user op `Op`, given on first use.
template <class Op, Element T>
int user_op_number() {
  static const int k = ops::user_op_index(user_op_of<Op, T>);
  return k;
}
}  // namespace detail

/// Applies an element-wise op to an eager tensor, recording its backward rule on the tape.
template <Element T, UnaryOp<T> Op>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the op with its backward rule's lambda
tensor<T> apply_op(const Op& op, const tensor<T>& x) {
  if constexpr (ops::TableOp<Op, T>)
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      return r->pointwise(ops::table_index<Op, T>, detail::op_scalar<T>(op), x, nullptr);
  if constexpr (ops::TraceableUserOp<Op, T>)  // traced and fused as a built-in is
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      return r->pointwise(detail::user_op_number<Op, T>(), detail::op_scalar<T>(op), x, nullptr);
  if constexpr (!ops::TableOp<Op, T>) detail::realize_for_op("the op", Op::name, x);
  tensor<T> y = detail::map(op, x);
  if constexpr (detail::has_unary_derivative<Op, tensor<T>>) {
    if (detail::needs_grad(x)) {
      constexpr bool saves = detail::uses_input<Op>() || detail::uses_output<Op>();
      // A scalar the derivative reads as an argument (x * s, x / s; those it does not read:
      // x + s, ...) is not a constant of the node's fingerprint: compiled autograd's capture
      // passes it as a 0-d tensor after the saved ones (an input of the captured graph).
      constexpr bool scalar_input = detail::scalar_is_input<Op>();
      constexpr std::size_t nsaved = saves ? 2 : 0;
      std::vector<tensor<T>> saved;  // nothing saved, nothing allocated (neg, the scalar ops)
      if constexpr (saves)
        saved = {detail::uses_input<Op>() ? x : tensor<T>{}, detail::uses_output<Op>() ? y : tensor<T>{}};
      auto n = detail::record<T>(
          Op::grad_fn, {x}, {&y}, std::move(saved),
          [op](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
            const tensor<T> none;
            if constexpr (scalar_input)
              if (s.size() > nsaved) [[unlikely]]
                return std::vector<tensor<T>>{
                    tensor<T>(Op::derivative_by(saves ? s[0] : none, saves ? s[1] : none, g[0], s[nsaved]))};
            return std::vector<tensor<T>>{tensor<T>(op.derivative(saves ? s[0] : none, saves ? s[1] : none, g[0]))};
          },
          scalar_input ? std::optional<std::uint64_t>(detail::params_of(detail::type_id<Op>()))
                       : detail::op_params<T>(op),
          detail::double_backward::supported);
      if constexpr (scalar_input) static_cast<detail::saving_node<T>&>(*n).set_scalar_input(detail::op_scalar<T>(op));
    }
  }
  return y;
}

/// Applies a broadcasting element-wise op to two eager tensors, recording its backward.
template <Element T, BinaryOp<T> Op>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the op with its backward rule's lambda
tensor<T> apply_op(const Op& op, const tensor<T>& a, const tensor<T>& b) {
  if constexpr (ops::TableOp<Op, T>)
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      return r->pointwise(ops::table_index<Op, T>, detail::op_scalar<T>(op), a, &b);
  if constexpr (ops::TraceableUserOp<Op, T>)
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      return r->pointwise(detail::user_op_number<Op, T>(), detail::op_scalar<T>(op), a, &b);
  if constexpr (!ops::TableOp<Op, T>) detail::realize_for_op("the op", Op::name, a, b);
  tensor<T> y = detail::zip(Op::name, op, a, b);
  if constexpr (detail::has_binary_derivative<Op, tensor<T>>) {
    if (detail::needs_grad(a, b)) {
      const bool ga = a.requires_grad(), gb = b.requires_grad();
      constexpr bool saves = detail::uses_input<Op>() || detail::uses_output<Op>();
      std::vector<tensor<T>> saved;  // nothing saved, nothing allocated (add, sub)
      if constexpr (saves)
        saved = {detail::uses_input<Op>() ? a : tensor<T>{}, detail::uses_input<Op>() ? b : tensor<T>{},
                 detail::uses_output<Op>() ? y : tensor<T>{}};
      // The rule holds no shapes: its node sums each gradient to its input's shape (the
      // inverse of broadcasting; `saving_node::set_sums_to_inputs`).
      auto n = detail::record<T>(
          Op::grad_fn, {a, b}, {&y}, std::move(saved),
          [op, ga, gb](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
            const tensor<T> none;
            const tensor<T>& s0 = saves ? s[0] : none;
            const tensor<T>& s1 = saves ? s[1] : none;
            const tensor<T>& s2 = saves ? s[2] : none;
            std::vector<tensor<T>> r(2);
            if (ga) r[0] = tensor<T>(op.da(s0, s1, s2, g[0]));
            if (gb) r[1] = tensor<T>(op.db(s0, s1, s2, g[0]));
            return r;
          },
          detail::op_params<T>(op, ga, gb), detail::double_backward::supported);  // the key holds the inputs' shapes
      static_cast<detail::saving_node<T>&>(*n).set_sums_to_inputs();
    }
  }
  return y;
}

/// Two tensors of different element types: fusegrad never promotes implicitly.
template <Element T, Element U, class Op>
requires(!std::same_as<T, U>) tensor<T> apply_op(const Op&, const tensor<T>&, const tensor<U>&) {
  static_assert(std::same_as<T, U>,
                "fusegrad: both operands of a binary op must have the same element type "
                "(no implicit float/double promotion); convert one side first");
  return {};
}

}  // namespace fusegrad
