#pragma once
/// \file fusegrad/compile/eval_eager.hpp
/// Evaluates one canonical node of the joint graph on eager tensors (no tape recording): the
/// node-by-node interpreter behind the `aot_eager` backend, and the reference the fused
/// kernels are checked against.

#include "fusegrad/compile/analysis.hpp"
#include "fusegrad/ops/matmul.hpp"
#include "fusegrad/ops/max.hpp"
#include "fusegrad/ops/mean.hpp"
#include "fusegrad/ops/sum.hpp"

namespace fusegrad::detail {

/// The shape `s` reduced by `axis` with keepdim (all dims become 1, or the last one).
inline shape keepdim_shape(const shape& s, reduce_axis axis) {
  shape r = s;
  if (axis == reduce_axis::all) std::fill(r.begin(), r.end(), 1);
  else if (!r.empty()) r.back() = 1;
  return r;
}

/// op(X) for a matmul operand: 2-D view [rows, last], transposed if `t`.
template <Element T>
tensor<T> matmul_operand(const tensor<T>& x, bool flatten, bool t) {
  if (x.dim() == 0)
    fail("matmul", "a 0-d operand cannot be multiplied; expected at least 1 dim inside fg::compile");
  tensor<T> m = x;
  if (flatten || t) {
    const index_t last = x.shape().back();
    m = x.reshape({last == 0 ? 0 : x.numel() / last, last});
  }
  return t ? m.t() : m;
}

/// The shape of `matmul_values(a, b, ta, tb)` for operands of shapes `a` and `b` (at least 1-D).
inline shape matmul_values_shape(const shape& a, const shape& b, bool ta, bool tb) {
  const index_t lb = b.back(), rows_b = lb == 0 ? 0 : numel(b) / lb;
  const index_t cols = tb ? rows_b : lb;
  if (ta) return {a.back(), cols};
  if (a.size() == 1) return {cols};
  shape out(a.begin(), a.end() - 1);
  out.push_back(cols);
  return out;
}

/// op_a(a) · op_b(b) with the conventions of `matmul_expr` (a keeps leading dims unless
/// transposed, b is always a matrix).
template <Element T>
tensor<T> matmul_values(const tensor<T>& a, const tensor<T>& b, bool ta, bool tb) {
  no_grad guard;
  const tensor<T> B = matmul_operand(b, true, tb);
  if (ta) return mm(matmul_operand(a, true, true), B);
  if (a.dim() == 1) return matmul(a, B);
  const tensor<T> A = matmul_operand(a, true, false);
  if (A.shape()[1] != B.shape()[0])
    fail("matmul", "shapes ", to_string(a.shape()), " and ", to_string(b.shape()),
         " cannot be multiplied inside fg::compile; expected a [..., k] and b [k, n]");
  return mm(A, B).reshape(matmul_values_shape(a.shape(), b.shape(), ta, tb));
}

/// Whether node type `E` is an element-wise op of the IR's op table.
template <class E, Element T>
constexpr bool recordable_pointwise() {
  if constexpr (is_pointwise_v<E> && !is_custom_v<E>)
    return ir::KnownOp<std::remove_cvref_t<decltype(std::declval<const E&>().op)>, T>;
  else
    return false;
}

/// Element-wise node C (an op of the IR's op table) recorded into tracer `r`.
template <class A, std::size_t C, Element T>
tensor<T> record_pointwise(recorder<T>& r, const void* const* nodes, const std::vector<tensor<T>>& v) {
  using E = typename A::template node_t<C>;
  using Op = std::remove_cvref_t<decltype(std::declval<const E&>().op)>;
  constexpr auto ch = A::cg.children[C];
  const auto& op = A::template node<C>(nodes).op;
  const tensor<T>& a = v[static_cast<std::size_t>(ch[0])];
  if constexpr (arity_v<E> == 1) return r.pointwise(ir::op_index<Op, T>, op_scalar<T>(op), a, nullptr);
  else return r.pointwise(ir::op_index<Op, T>, op_scalar<T>(op), a, &v[static_cast<std::size_t>(ch[1])]);
}

/// Value of canonical node C of analysis A, from the values of its children. While a tracer
/// records (the backward of a compiled function inside a captured backward), the node is
/// recorded instead: pointwise ops, reductions and their adjoints as IR nodes, matmul as an
/// opaque call.
template <class A, std::size_t C, Element T>
tensor<T> eval_node(const void* const* nodes, const std::vector<tensor<T>>& v,
                    const std::vector<shape>& shapes, const std::vector<tensor<T>>& inputs,
                    const std::vector<tensor<T>>& grads) {
  using E = typename A::template node_t<C>;
  [[maybe_unused]] const E& e = A::template node<C>(nodes);
  constexpr auto ch = A::cg.children[C];
  auto arg = [&](int k) -> const tensor<T>& { return v[static_cast<std::size_t>(ch[static_cast<std::size_t>(k)])]; };
  if constexpr (is_leaf_v<E>) {
    if constexpr (std::is_same_v<E, sym<E::index, T>>) return inputs[E::index];
    else return grads[E::index];
  } else if constexpr (is_custom_v<E>) {
    return arg(static_cast<int>(arity_v<E>) - 1);
  } else if constexpr (is_pointwise_v<E>) {
    if constexpr (ir::KnownOp<std::remove_cvref_t<decltype(e.op)>, T>)
      if (auto* r = active_recorder<T>()) [[unlikely]]
        return record_pointwise<A, C, T>(*r, nodes, v);
    if constexpr (arity_v<E> == 1) return map(e.op, arg(0));
    else return zip(std::remove_cvref_t<decltype(e.op)>::name, e.op, arg(0), arg(1));
  } else if constexpr (is_reduce_v<E>) {
    no_grad guard;
    constexpr auto axis = []<reduce_kind_t K, reduce_axis X, class U>(std::type_identity<reduce_expr<K, X, U>>) {
      return std::pair{K, X};
    }(std::type_identity<E>{});
    const tensor<T>& x = arg(0);
    if (auto* r = active_recorder<T>()) [[unlikely]] {
      if (axis.second == reduce_axis::last && x.dim() == 0) fail("sum", "cannot reduce the last dim of a 0-d value inside fg::compile");
      std::vector<bool> mask(x.dim(), axis.second == reduce_axis::all);
      if (!mask.empty()) mask.back() = true;
      return r->reduce(axis.first == reduce_kind_t::sum ? reduce_op::sum : axis.first == reduce_kind_t::mean ? reduce_op::mean : reduce_op::max, x,
                       mask, e.keepdim);
    }
    if constexpr (axis.second == reduce_axis::all) {
      tensor<T> r = axis.first == reduce_kind_t::sum ? sum(x) : axis.first == reduce_kind_t::mean ? mean(x) : max(x);
      return e.keepdim ? r.reshape(keepdim_shape(x.shape(), reduce_axis::all)) : r;
    } else {
      if (x.dim() == 0) fail("sum", "cannot reduce the last dim of a 0-d value inside fg::compile");
      if constexpr (axis.first == reduce_kind_t::sum) return sum(x, -1, e.keepdim);
      else if constexpr (axis.first == reduce_kind_t::mean) return mean(x, -1, e.keepdim);
      else return max(x, -1, e.keepdim);
    }
  } else if constexpr (is_sumto_v<E>) {
    constexpr std::size_t K = []<std::size_t KK, class U>(std::type_identity<sumto_expr<KK, U>>) { return KK; }(std::type_identity<E>{});
    return sum_to(arg(0), shapes[K]);
  } else if constexpr (is_unreduce_v<E>) {
    constexpr auto info = []<reduce_kind_t R, reduce_axis X, std::size_t KK, class U>(std::type_identity<unreduce_expr<R, X, KK, U>>) {
      return std::tuple{R, X, KK};
    }(std::type_identity<E>{});
    const shape& to = shapes[std::get<2>(info)];
    if (auto* r = active_recorder<T>()) [[unlikely]] {
      std::vector<bool> mask(to.size(), std::get<1>(info) == reduce_axis::all);
      if (!mask.empty()) mask.back() = true;
      tensor<T> g = r->expand(arg(0), to, mask);
      if constexpr (std::get<0>(info) == reduce_kind_t::mean) {
        const index_t n = numel(to) / std::max<index_t>(numel(keepdim_shape(to, std::get<1>(info))), 1);
        const ops::div_scalar_op<T> div{static_cast<T>(n)};
        return r->pointwise(ir::op_index<ops::div_scalar_op<T>, T>, op_scalar<T>(div), g, nullptr);
      } else {
        return g;
      }
    }
    no_grad guard;
    tensor<T> g = arg(0).reshape(keepdim_shape(to, std::get<1>(info))).expand(to);
    if constexpr (std::get<0>(info) == reduce_kind_t::mean) {
      const index_t n = numel(to) / std::max<index_t>(numel(keepdim_shape(to, std::get<1>(info))), 1);
      return map(ops::div_scalar_op<T>{static_cast<T>(n)}, g);
    } else {
      return contiguous_copy(g);
    }
  } else {
    static_assert(is_matmul_v<E>);
    if (arg(0).dim() > 0 && arg(1).dim() > 0)
      return call_opaque<T>("matmul", matmul_values_shape(arg(0).shape(), arg(1).shape(), E::ta, E::tb),
                            [](const tensor<T>& a, const tensor<T>& b) { return matmul_values(a, b, E::ta, E::tb); }, arg(0), arg(1));
    return matmul_values(arg(0), arg(1), E::ta, E::tb);
  }
}

/// Records canonical node C into the active tracer (the backward of a compiled function
/// inside a captured backward). Element-wise nodes with an IR op are recorded directly, so a
/// traced backward never instantiates their eager kernels; every other node goes through
/// `eval_node`, which records it too.
template <class A, std::size_t C, Element T>
tensor<T> trace_node(recorder<T>& r, const void* const* nodes, const std::vector<tensor<T>>& v,
                     const std::vector<shape>& shapes, const std::vector<tensor<T>>& inputs,
                     const std::vector<tensor<T>>& grads) {
  using E = typename A::template node_t<C>;
  if constexpr (recordable_pointwise<E, T>()) return record_pointwise<A, C, T>(r, nodes, v);
  else return eval_node<A, C, T>(nodes, v, shapes, inputs, grads);
}

/// Records the canonical nodes flagged in `Active` (in order) into tracer `r`.
template <class A, auto Active, Element T>
void trace_nodes(recorder<T>& r, const void* const* nodes, std::vector<tensor<T>>& values,
                 std::vector<shape>& shapes, const std::vector<tensor<T>>& inputs, const std::vector<tensor<T>>& grads) {
  [&]<std::size_t... C>(std::index_sequence<C...>) {
    (
        [&] {
          if constexpr (Active[C]) {
            values[C] = trace_node<A, C, T>(r, nodes, values, shapes, inputs, grads);
            shapes[C] = values[C].shape();
          }
        }(),
        ...);
  }(std::make_index_sequence<A::M>{});
}

}  // namespace fusegrad::detail
