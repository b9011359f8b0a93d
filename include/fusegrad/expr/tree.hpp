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

namespace fusegrad::detail {

/// The joint tree: forward outputs and backward outputs side by side (not a node itself).
template <class... Roots>
struct joint {
  std::tuple<Roots...> roots;
};

template <class E> struct children_of { using type = std::tuple<>; };
template <class Op, class... A> struct children_of<expr_node<Op, A...>> { using type = std::tuple<A...>; };
template <reduce_kind_t R, reduce_axis X, class A> struct children_of<reduce_expr<R, X, A>> { using type = std::tuple<A>; };
template <std::size_t K, class A> struct children_of<sumto_expr<K, A>> { using type = std::tuple<A>; };
template <reduce_kind_t R, reduce_axis X, std::size_t K, class A>
struct children_of<unreduce_expr<R, X, K, A>> { using type = std::tuple<A>; };
template <class A, class B, bool TA, bool TB> struct children_of<matmul_expr<A, B, TA, TB>> { using type = std::tuple<A, B>; };

template <class E> inline constexpr bool is_leaf_v = false;
template <leaf_kind L, std::size_t I, class T> inline constexpr bool is_leaf_v<leaf_expr<L, I, T>> = true;
template <class E> inline constexpr bool is_pointwise_v = false;
template <class Op, class... A> inline constexpr bool is_pointwise_v<expr_node<Op, A...>> = true;
template <class E> inline constexpr bool is_reduce_v = false;
template <reduce_kind_t R, reduce_axis X, class A> inline constexpr bool is_reduce_v<reduce_expr<R, X, A>> = true;
template <class E> inline constexpr bool is_sumto_v = false;
template <std::size_t K, class A> inline constexpr bool is_sumto_v<sumto_expr<K, A>> = true;
template <class E> inline constexpr bool is_unreduce_v = false;
template <reduce_kind_t R, reduce_axis X, std::size_t K, class A>
inline constexpr bool is_unreduce_v<unreduce_expr<R, X, K, A>> = true;
template <class E> inline constexpr bool is_matmul_v = false;
template <class A, class B, bool TA, bool TB> inline constexpr bool is_matmul_v<matmul_expr<A, B, TA, TB>> = true;
template <class... R> struct children_of<joint<R...>> { using type = std::tuple<R...>; };
template <class F, class Fwd, class... A> struct children_of<custom_expr<F, Fwd, A...>> { using type = std::tuple<A..., Fwd>; };
template <class E> inline constexpr bool is_custom_v = false;
template <class F, class Fwd, class... A> inline constexpr bool is_custom_v<custom_expr<F, Fwd, A...>> = true;

template <class E> using children_t = typename children_of<E>::type;
template <class E> inline constexpr bool is_joint_v = false;
template <class... R> inline constexpr bool is_joint_v<joint<R...>> = true;
template <class E> inline constexpr std::size_t arity_v = std::tuple_size_v<children_t<E>>;

/// Child `I` of a node object.
template <std::size_t I, class E>
const auto& child(const E& e) {
  if constexpr (is_custom_v<E>) {
    if constexpr (I + 1 == std::tuple_size_v<typename children_of<E>::type>) return e.fwd;
    else return std::get<I>(e.args);
  } else if constexpr (requires { e.args; }) return std::get<I>(e.args);
  else if constexpr (requires { e.roots; }) return std::get<I>(e.roots);
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
  }(std::make_index_sequence<arity_v<E>>{}) + own;
}
template <class... R>
constexpr std::size_t joint_size() { return (std::size_t{0} + ... + tree_size<R>()); }

/// Post-order index of child `I`'s subtree start, for a subtree starting at `Base`.
template <class E, std::size_t Base, std::size_t I>
constexpr std::size_t child_base() {
  return []<std::size_t... J>(std::index_sequence<J...>) {
    return (Base + ... + tree_size<std::tuple_element_t<J, children_t<E>>>());
  }(std::make_index_sequence<I>{});
}

/// Post-order index of the root of a subtree of type `E` starting at `Base`.
template <class E, std::size_t Base>
inline constexpr std::size_t index_of = Base + tree_size<E>() - 1;

/// True when a subtree carries no run-time constants: its type alone identifies its value,
/// so equal types are one value (structural sharing by type identity).
template <class E>
constexpr bool pure() {
  if constexpr (is_leaf_v<E>) return true;
  else if constexpr (is_reduce_v<E> || is_unreduce_v<E>) return false;  // run-time keepdim flag
  else {
    bool own = true;
    if constexpr (is_pointwise_v<E>) own = std::is_empty_v<decltype(std::declval<E>().op)>;
    return own && []<std::size_t... I>(std::index_sequence<I...>) {
      return (true && ... && pure<std::tuple_element_t<I, children_t<E>>>());
    }(std::make_index_sequence<arity_v<E>>{});
  }
}

/// Whether input `I` occurs in the tree.
template <std::size_t I, class E>
constexpr bool contains_sym() {
  if constexpr (is_leaf_v<E>) {
    return std::is_same_v<E, sym<I, typename E::element_type>>;
  } else {
    return []<std::size_t... J>(std::index_sequence<J...>) {
      return (false || ... || contains_sym<I, std::tuple_element_t<J, children_t<E>>>());
    }(std::make_index_sequence<arity_v<E>>{});
  }
}

/// The node with post-order index `K` in a tree starting at `Base`: its type and its object.
template <class E, std::size_t Base, std::size_t K>
constexpr auto locate() {
  if constexpr (!is_joint_v<E> && K == index_of<E, Base>) {
    return std::type_identity<E>{};
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      constexpr std::size_t which = ((K >= child_base<E, Base, I>() &&
                                      K < child_base<E, Base, I>() + tree_size<std::tuple_element_t<I, children_t<E>>>()
                                          ? I : 0) + ... + 0);
      return locate<std::tuple_element_t<which, children_t<E>>, child_base<E, Base, which>(), K>();
    }(std::make_index_sequence<arity_v<E>>{});
  }
}
template <class E, std::size_t K>
using node_at_t = typename decltype(locate<E, 0, K>())::type;

template <std::size_t K, std::size_t Base, class E>
const auto& get_node(const E& e) {
  if constexpr (!is_joint_v<E> && K == index_of<E, Base>) {
    return e;
  } else {
    constexpr std::size_t which = []<std::size_t... I>(std::index_sequence<I...>) {
      return ((K >= child_base<E, Base, I>() &&
               K < child_base<E, Base, I>() + tree_size<std::tuple_element_t<I, children_t<E>>>() ? I : 0) + ... + 0);
    }(std::make_index_sequence<arity_v<E>>{});
    return get_node<K, child_base<E, Base, which>()>(child<which>(e));
  }
}

}  // namespace fusegrad::detail
