#pragma once
/// \file fusegrad/expr/expr.hpp
/// Compile-time expression types: what `fg::compile` gets when it calls the user's generic
/// function on symbolic inputs. A node stores only structure and the constants of its op
/// (e.g. the 2 of `x * 2`); inputs are symbols (`sym<I, T>`), so an expression can never
/// dangle: tensors are bound when the compiled function is called.
///
/// Every op function of fusegrad (`cos`, `*`, `sum`, `matmul`, ...) accepts expressions,
/// because expressions model the `Operand` concept and `apply_op` is overloaded for them:
/// the op structs of `ops/` are the same ones eager mode runs.

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/operand.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/ops/function.hpp"
#include "fusegrad/ops/op.hpp"
#include "fusegrad/ops/reduce.hpp"
#include "fusegrad/ops/step.hpp"

namespace fusegrad {

/// What every symbolic value shares: the operations that would need a concrete value.
/// A symbolic value has no `bool` and no `item()`: data-dependent control flow cannot be
/// captured at compile time, and using it is a compile error that says so.
struct symbolic {
  template <class U = void>
  float item() const {
    static_assert(detail::dependent_false<U>,
                  "fusegrad::compile: item() needs a concrete value, but inside fg::compile values "
                  "are symbolic (data-dependent control flow cannot be captured at compile time); "
                  "use the run-time tracer fg::jit for such functions");
    return 0;
  }
  // Not explicit: `const bool big = fg::mean(y) > 0.5;` (a comparison is a mask, a symbolic
  // value) must reach this message too. Only a conversion to bool deduces here, so no
  // arithmetic operator gains a built-in candidate.
  template <class B>
  requires std::same_as<B, bool>
  operator B() const {
    static_assert(detail::dependent_false<B>,
                  "fusegrad::compile: a symbolic value has no bool (data-dependent control flow "
                  "cannot be captured at compile time): a comparison is a mask, use it as one "
                  "(fg::where(x > 0.5, a, b)), or the run-time tracer fg::jit for such functions");
    return false;
  }
};

/// What a leaf of an expression stands for.
enum class leaf_kind : unsigned char {
  input,    ///< input I of the compiled function
  grad,     ///< the gradient flowing into output I (a backward input)
  forward,  ///< the value of canonical forward node I, as backward expressions read it
  adjoint   ///< the adjoint (gradient of the outputs) of canonical forward node I
};

/// A leaf of an expression: it names a value, it holds none.
template <leaf_kind Kind, std::size_t I, Element T>
struct leaf_expr : symbolic {
  using element_type = T;
  static constexpr leaf_kind kind = Kind;
  static constexpr std::size_t index = I;
};

template <std::size_t I, Element T>
using sym = leaf_expr<leaf_kind::input, I, T>;
template <std::size_t I, Element T>
using gsym = leaf_expr<leaf_kind::grad, I, T>;
template <std::size_t K, Element T>
using fwd_ref = leaf_expr<leaf_kind::forward, K, T>;
template <std::size_t K, Element T>
using adj_ref = leaf_expr<leaf_kind::adjoint, K, T>;

/// The operands of a node (and, in the functional transforms, the children of a value tree):
/// a plain aggregate of at most three, built in place. Cheaper to instantiate than a tuple,
/// which matters for compile time: every distinct subexpression is a distinct operand type.
template <class... Args>
struct operands;
template <>
struct operands<> {};
template <class A0>
struct operands<A0> {
  A0 first;
};
template <class A0, class A1>
struct operands<A0, A1> {
  A0 first;
  A1 second;
};
template <class A0, class A1, class A2>
struct operands<A0, A1, A2> {
  A0 first;
  A1 second;
  A2 third;
};
template <std::size_t I, class O>
constexpr const auto& operand(const O& o) {
  if constexpr (I == 0) return o.first;
  else if constexpr (I == 1) return o.second;
  else return o.third;
}

/// An element-wise op applied to one or two expressions.
template <class Op, class... Args>
struct expr_node : symbolic {
  using element_type = typename decltype(std::declval<operands<Args...>>().first)::element_type;
  Op op;
  operands<Args...> args;
};

/// The dims a reduction reduces (its kind: `detail::reduce_op`, ops/reduce.hpp).
enum class reduce_axis : unsigned char { all, last };

/// sum/mean/max over all dims or the last dim (`keepdim` is a run-time flag).
template <detail::reduce_op Kind, reduce_axis Axis, class Arg>
struct reduce_expr : symbolic {
  using element_type = typename Arg::element_type;
  Arg arg;
  bool keepdim = false;
};

/// Sums an adjoint down to the shape of canonical forward node `K` (the inverse of
/// broadcasting); a backward-only node that materialises its operand.
template <std::size_t K, class Arg>
struct sumto_expr : symbolic {
  using element_type = typename Arg::element_type;
  Arg arg;
};

/// Broadcasts the gradient of a reduction back over the reduction's input (canonical forward
/// node `K`); for `mean` it also divides by the reduced count. A backward-only node.
template <detail::reduce_op Kind, reduce_axis Axis, std::size_t K, class Arg>
struct unreduce_expr : symbolic {
  using element_type = typename Arg::element_type;
  Arg arg;
  bool keepdim = false;
};

/// `op_a(a) · op_b(b)` where op(X) flattens X to 2-D [rows, last] and transposes it when the
/// flag is set; without transposition `a` keeps its leading dims. An "extern" node: fusion
/// groups stop at it and it runs the library's matrix kernel.
template <class A, class B, bool TA, bool TB>
struct matmul_expr : symbolic {
  using element_type = typename A::element_type;
  static constexpr bool ta = TA, tb = TB;
  A a;
  B b;
};

/// A custom differentiable op (`fg::function<F>`) applied to expressions: its value is
/// `F::forward(args...)` (inlined and fused like built-in ops); its derivative is the user's
/// `F::backward`, called on expressions.
template <class F, class Fwd, class... Args>
struct custom_expr : symbolic {
  using element_type = typename Fwd::element_type;
  operands<Args...> args;
  Fwd fwd;
};

namespace detail {
template <class X>
inline constexpr bool is_expr_v = false;
template <class F, class Fwd, class... A>
inline constexpr bool is_expr_v<custom_expr<F, Fwd, A...>> = true;
template <leaf_kind L, std::size_t I, class T>
inline constexpr bool is_expr_v<leaf_expr<L, I, T>> = true;
template <class Op, class... A>
inline constexpr bool is_expr_v<expr_node<Op, A...>> = true;
template <detail::reduce_op R, reduce_axis X, class A>
inline constexpr bool is_expr_v<reduce_expr<R, X, A>> = true;
template <std::size_t K, class A>
inline constexpr bool is_expr_v<sumto_expr<K, A>> = true;
template <detail::reduce_op R, reduce_axis X, std::size_t K, class A>
inline constexpr bool is_expr_v<unreduce_expr<R, X, K, A>> = true;
template <class A, class B, bool TA, bool TB>
inline constexpr bool is_expr_v<matmul_expr<A, B, TA, TB>> = true;
}  // namespace detail

/// A compile-time expression (what fusegrad's ops return for symbolic operands).
template <class X>
concept Expr = detail::is_expr_v<std::remove_cvref_t<X>>;

template <Expr E>
struct operand_traits<E> {
  static constexpr bool value = true;
  using element_type = typename E::element_type;
};

// ---- op dispatch for expressions ------------------------------------------------------

template <Expr X, class Op>
requires UnaryOp<Op, typename X::element_type>
constexpr expr_node<Op, X> apply_op(const Op& op, const X& x) { return {{}, op, {x}}; }

template <Expr A, Expr B, class Op>
requires BinaryOp<Op, typename A::element_type>
constexpr expr_node<Op, A, B> apply_op(const Op& op, const A& a, const B& b) {
  static_assert(std::same_as<typename A::element_type, typename B::element_type>,
                "fusegrad: both operands of a binary op must have the same element type "
                "(no implicit float/double promotion); convert one side first");
  return {{}, op, {a, b}};
}

template <Expr X, Operand Y, class Op>
requires(!Expr<Y>) X apply_op(const Op&, const X& x, const Y&) {
  static_assert(detail::dependent_false<X>,
                "fusegrad::compile: a tensor captured inside a compiled function cannot be mixed "
                "with symbolic inputs; pass it as an argument of the compiled function instead");
  return x;
}
template <Expr X, Operand Y, class Op>
requires(!Expr<Y>) X apply_op(const Op&, const Y&, const X& x) {
  static_assert(detail::dependent_false<X>,
                "fusegrad::compile: a tensor captured inside a compiled function cannot be mixed "
                "with symbolic inputs; pass it as an argument of the compiled function instead");
  return x;
}

// ---- custom ops (fusegrad/ops/function.hpp) --------------------------------------

/// Inside `fg::compile`: an expression whose value is `F::forward(args...)` (fused like any
/// other op) and whose derivative is `F::backward`.
template <class F, Expr X0, class... Xs>
requires requires(const X0& x0, const Xs&... xs) { F::forward(x0, xs...); }
constexpr auto apply_function(function_tag<F>, const X0& x0, const Xs&... xs) {
  auto y = F::forward(x0, xs...);
  return custom_expr<F, decltype(y), X0, Xs...>{{}, {x0, xs...}, y};
}

namespace detail {
[[noreturn]] inline void only_last_dim(std::string_view op, index_t dim) {
  fail(op, "inside fg::compile a reduction runs over all dims or the last dim (-1); got dim ", dim,
       "; expected -1 (or call it without a dim)");
}
}  // namespace detail

template <Expr E>
constexpr reduce_expr<detail::reduce_op::sum, reduce_axis::all, E> sum(const E& e) {
  return {{}, e, false};
}
template <Expr E>
constexpr reduce_expr<detail::reduce_op::mean, reduce_axis::all, E> mean(const E& e) {
  return {{}, e, false};
}
template <Expr E>
constexpr reduce_expr<detail::reduce_op::max, reduce_axis::all, E> max(const E& e) {
  return {{}, e, false};
}
template <Expr E>
constexpr reduce_expr<detail::reduce_op::sum, reduce_axis::last, E> sum(const E& e, index_t dim, bool keepdim = false) {
  if (dim != -1) detail::only_last_dim("sum", dim);
  return {{}, e, keepdim};
}
template <Expr E>
constexpr reduce_expr<detail::reduce_op::mean, reduce_axis::last, E> mean(const E& e, index_t dim,
                                                                          bool keepdim = false) {
  if (dim != -1) detail::only_last_dim("mean", dim);
  return {{}, e, keepdim};
}
template <Expr E>
constexpr reduce_expr<detail::reduce_op::max, reduce_axis::last, E> max(const E& e, index_t dim, bool keepdim = false) {
  if (dim != -1) detail::only_last_dim("max", dim);
  return {{}, e, keepdim};
}

/// Matrix product inside `fg::compile`: `a` [..., k] times a 2-D `b` [k, n].
template <Expr A, Expr B>
constexpr matmul_expr<A, B, false, false> matmul(const A& a, const B& b) {
  return {{}, a, b};
}
/// `x wᵀ + b` inside `fg::compile` (x [..., in], w [out, in], b [out]).
template <Expr X, Expr W, Expr Bias>
constexpr auto linear(const X& x, const W& w, const Bias& b) {
  return matmul_expr<X, W, false, true>{{}, x, w} + b;
}
template <Expr X, Expr W>
constexpr matmul_expr<X, W, false, true> linear(const X& x, const W& w) {
  return {{}, x, w};
}

}  // namespace fusegrad
