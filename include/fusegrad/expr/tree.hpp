#pragma once
/// \file fusegrad/expr/tree.hpp
/// Walking expression trees at compile time: children, sizes, post-order indices, purity.
///
/// Every node of a (joint) expression tree has a post-order index: children come first,
/// left to right, then the node. Those indices name forward values (`fwd_ref<K>`), and the
/// graph table (graph.hpp) is built from them.

#include <tuple>
#include <type_traits>

#include "fusegrad/expr/expr.hpp"
#include "fusegrad/core/type_list.hpp"

namespace fusegrad::detail {

/// One root of a joint tree.
template <std::size_t I, class X>
struct joint_root {
  X value;
};
template <class Seq, class... Roots>
struct joint_roots;
template <std::size_t... I, class... Roots>
struct joint_roots<std::index_sequence<I...>, Roots...> : joint_root<I, Roots>... {};

/// The joint tree: forward outputs and backward outputs side by side (not a node itself).
/// A flat aggregate of its roots (a joint tree has dozens: std::tuple's recursive storage and
/// constrained constructors cost the compiler far more).
template <class... Roots>
struct joint : joint_roots<std::index_sequence_for<Roots...>, Roots...> {};

/// A joint tree of `roots`.
template <class... Roots>
constexpr joint<Roots...> make_joint_of(const Roots&... roots) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) { return joint<Roots...>{{joint_root<I, Roots>{roots}...}}; }
  (std::index_sequence_for<Roots...>{});
}

/// Root `I` of a joint tree.
template <std::size_t I, class X>
constexpr const X& root(const joint_root<I, X>& r) {
  return r.value;
}

template <class E>
struct children_of {
  using type = std::tuple<>;
};
template <class Op, class... A>
struct children_of<expr_node<Op, A...>> {
  using type = std::tuple<A...>;
};
template <detail::reduce_op R, reduce_axis X, class A>
struct children_of<reduce_expr<R, X, A>> {
  using type = std::tuple<A>;
};
template <std::size_t K, class A>
struct children_of<sumto_expr<K, A>> {
  using type = std::tuple<A>;
};
template <detail::reduce_op R, reduce_axis X, std::size_t K, class A>
struct children_of<unreduce_expr<R, X, K, A>> {
  using type = std::tuple<A>;
};
template <class A, class B, bool TA, bool TB>
struct children_of<matmul_expr<A, B, TA, TB>> {
  using type = std::tuple<A, B>;
};

template <class E>
inline constexpr bool is_leaf_v = false;
template <leaf_kind L, std::size_t I, class T>
inline constexpr bool is_leaf_v<leaf_expr<L, I, T>> = true;
template <class E>
inline constexpr bool is_pointwise_v = false;
template <class Op, class... A>
inline constexpr bool is_pointwise_v<expr_node<Op, A...>> = true;
template <class E>
inline constexpr bool is_reduce_v = false;
template <detail::reduce_op R, reduce_axis X, class A>
inline constexpr bool is_reduce_v<reduce_expr<R, X, A>> = true;
template <class E>
inline constexpr bool is_sumto_v = false;
template <std::size_t K, class A>
inline constexpr bool is_sumto_v<sumto_expr<K, A>> = true;
template <class E>
inline constexpr bool is_unreduce_v = false;
template <detail::reduce_op R, reduce_axis X, std::size_t K, class A>
inline constexpr bool is_unreduce_v<unreduce_expr<R, X, K, A>> = true;
template <class E>
inline constexpr bool is_matmul_v = false;
template <class A, class B, bool TA, bool TB>
inline constexpr bool is_matmul_v<matmul_expr<A, B, TA, TB>> = true;
template <class... R>
struct children_of<joint<R...>> {
  using type = std::tuple<R...>;
};
template <class F, class Fwd, class... A>
struct children_of<custom_expr<F, Fwd, A...>> {
  using type = std::tuple<A..., Fwd>;
};
template <class E>
inline constexpr bool is_custom_v = false;
template <class F, class Fwd, class... A>
inline constexpr bool is_custom_v<custom_expr<F, Fwd, A...>> = true;

template <class E>
using children_t = typename children_of<E>::type;
template <class E>
inline constexpr bool is_joint_v = false;
template <class... R>
inline constexpr bool is_joint_v<joint<R...>> = true;
template <class E>
inline constexpr std::size_t arity_v = std::tuple_size_v<children_t<E>>;

/// Child `I` of a node object.
template <std::size_t I, class E>
constexpr const auto& child(const E& e) {
  if constexpr (is_custom_v<E>) {
    if constexpr (I + 1 == std::tuple_size_v<typename children_of<E>::type>) return e.fwd;
    else return operand<I>(e.args);
  } else if constexpr (requires { e.args; }) return operand<I>(e.args);
  else if constexpr (is_joint_v<E>) return root<I>(e);
  else if constexpr (requires { e.a; }) {
    if constexpr (I == 0) return e.a;
    else return e.b;
  } else return e.arg;
}

/// Number of nodes of a tree (the joint wrapper itself is not counted).
template <class E>
constexpr std::size_t tree_size() {
  constexpr std::size_t own = is_joint_v<E> ? 0 : 1;
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (std::size_t{0} + ... + tree_size<std::tuple_element_t<I, children_t<E>>>());
  }
  (std::make_index_sequence<arity_v<E>>{}) + own;
}

/// Addresses of every node of a tree object, in post-order (the order of the constexpr
/// tables): how the evaluators reach the run-time constants of a node without one template
/// instantiation per tree position.
template <class E>
void collect_addresses(const E& e, const void** out, std::size_t& pos) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (collect_addresses(child<I>(e), out, pos), ...); }
  (std::make_index_sequence<arity_v<E>>{});
  if constexpr (!is_joint_v<E>) out[pos++] = &e;
}

}  // namespace fusegrad::detail
