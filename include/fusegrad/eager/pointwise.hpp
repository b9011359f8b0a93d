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

namespace fusegrad {

namespace detail {
/// Sums `g` down to `target` (the inverse of broadcasting); recorded only in a create_graph
/// backward.
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
  tensor<T> r = reduce_keepdim(g, mask, reduce_op::sum);
  tensor<T> y = alias(r, target, contiguous_strides(target), 0);
  if (needs_grad(g)) [[unlikely]]  // a create_graph backward: the sum is differentiated again
    record<T>("SumBackward1", {g}, {&y}, {},
              [from = s](const std::vector<tensor<T>>&, std::vector<tensor<T>>& gy) {
                return std::vector<tensor<T>>{gy[0].expand(from)};
              },
              std::nullopt, double_backward::supported);
  return y;
}
/// The `params` of an op's tape node (`record`): its scalar and `extra` when the op's state is
/// that scalar (every op of the op table), none otherwise (the node is not collected).
template <Element T, class Op, class... A>
std::optional<std::uint64_t> op_params(const Op& op, const A&... extra) {
  if constexpr (std::is_empty_v<Op> || ops::TableOp<Op, T>) return params_of(type_id<Op>(), op_scalar<T>(op), extra...);
  else return std::nullopt;
}
}  // namespace detail

/// Applies an element-wise op to an eager tensor, recording its backward rule on the tape.
template <Element T, UnaryOp<T> Op>
tensor<T> apply_op(const Op& op, const tensor<T>& x) {
  if constexpr (ops::TableOp<Op, T>)
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      return r->pointwise(ops::table_index<Op, T>, detail::op_scalar<T>(op), x, nullptr);
  tensor<T> y = detail::map(op, x);
  if constexpr (detail::has_unary_derivative<Op, tensor<T>>) {
    if (detail::needs_grad(x)) {
      std::vector<tensor<T>> saved{detail::uses_input<Op>() ? x : tensor<T>{},
                                   detail::uses_output<Op>() ? y : tensor<T>{}};
      detail::record<T>(Op::grad_fn, {x}, {&y}, std::move(saved),
                        [op](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
                          return std::vector<tensor<T>>{tensor<T>(op.derivative(s[0], s[1], g[0]))};
                        },
                        detail::op_params<T>(op), detail::double_backward::supported);
    }
  }
  return y;
}

/// Applies a broadcasting element-wise op to two eager tensors, recording its backward.
template <Element T, BinaryOp<T> Op>
tensor<T> apply_op(const Op& op, const tensor<T>& a, const tensor<T>& b) {
  if constexpr (ops::TableOp<Op, T>)
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      return r->pointwise(ops::table_index<Op, T>, detail::op_scalar<T>(op), a, &b);
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
          },
          detail::op_params<T>(op, ga, gb), detail::double_backward::supported);  // sa, sb: the key holds the inputs' shapes
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
