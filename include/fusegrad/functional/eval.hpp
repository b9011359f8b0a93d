#pragma once
/// \file fusegrad/functional/eval.hpp
/// Evaluating an expression type (what the user's function returns when a transform calls it
/// on `scalar_arg`/`span_arg` symbols) on values, forward and backward. The tree's structure
/// is the type, so an evaluation is straight-line code the compiler sees whole. The values
/// are any operands: `num` (numbers, SIMD batches), `dual` (forward mode; a reverse pass on
/// duals is a Hessian-vector product) or expressions again (a backward evaluated on symbols
/// is the backward as an expression, which a second transform differentiates:
/// `fg::grad(fg::grad(f))`).
///
/// `fwd<B>(ctx, e)` returns a tree of values (`vt`: the node's value and its children's
/// trees); `back<B>(sink, e, values, g)` pushes the adjoint `g` of `e` down with each op's
/// own derivative rule and hands each leaf's share to the sink, which returns itself (a
/// handle to mutable sums) or its next state (a tuple of adjoints whose types grow). Subtrees
/// that reach no argument the sink wants are skipped. `B` numbers, in pre-order, the
/// reductions of element-wise expressions: their values come from the context (the span
/// engine sums them over the elements, functional/engine.hpp).

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "fusegrad/expr/backprop.hpp"
#include "fusegrad/functional/args.hpp"
#include "fusegrad/value/dual.hpp"

namespace fusegrad::detail::fn {

// ---- what a transform needs to know about an expression's type --------------------------

template <class E>
struct info {
  static_assert(dependent_false<E>,
                "fusegrad: the functional transforms (fg::grad, fg::jvp, ...) evaluate element-wise ops, "
                "fg::sum and fg::mean over all elements, and fg::function custom ops; this function uses "
                "something else (a matmul, a reduction over one dim, a max, or an fg::compile symbol)");
  static constexpr std::uint64_t args = 0;
  static constexpr bool elementwise = false;
  static constexpr int reds = 0;
};
template <class T>
struct info<constant_arg<T>> {
  static constexpr std::uint64_t args = 0;
  static constexpr bool elementwise = false;
  static constexpr int reds = 0;
};
template <std::size_t I, class T>
struct info<scalar_arg<I, T>> {
  static_assert(I < 64, "fusegrad: a transformed function takes at most 64 arguments");
  static constexpr std::uint64_t args = std::uint64_t{1} << I;
  static constexpr bool elementwise = false;
  static constexpr int reds = 0;
};
template <std::size_t I, class T>
struct info<span_arg<I, T>> {
  static_assert(I < 64, "fusegrad: a transformed function takes at most 64 arguments");
  static constexpr std::uint64_t args = std::uint64_t{1} << I;
  static constexpr bool elementwise = true;
  static constexpr int reds = 0;
};
template <std::size_t I, class T>
struct info<element_arg<I, T>> {
  static_assert(I < 64, "fusegrad: a transformed function takes at most 64 arguments");
  static constexpr std::uint64_t args = std::uint64_t{1} << I;
  static constexpr bool elementwise = false;
  static constexpr int reds = 0;
};
template <class T>
struct info<data_arg<T>> {
  static constexpr std::uint64_t args = 0;
  static constexpr bool elementwise = true;
  static constexpr int reds = 0;
};
template <class E>
inline constexpr bool is_concat_v = false;
template <class... P>
inline constexpr bool is_concat_v<concat_expr<P...>> = true;
/// An operand that is not an output built by `fg::concat` (whose parts the transforms run one by one).
template <class E>
constexpr bool not_concat() {
  static_assert(!is_concat_v<E>,
                "fusegrad::concat builds a transformed function's output: return it, and apply ops (and "
                "reductions) to its parts instead");
  return true;
}
template <class... P>
struct info<concat_expr<P...>> {
  static constexpr std::uint64_t args = (info<P>::args | ...);
  static constexpr bool elementwise = true;
  static constexpr int reds = 0;
};
template <class... A>
struct info_of_args {
  static_assert((not_concat<A>() && ...));
  static constexpr std::uint64_t args = (info<A>::args | ...);
  static constexpr bool elementwise = (info<A>::elementwise || ...);
  static constexpr int reds = (info<A>::reds + ...);
  static_assert(!elementwise || reds == 0,
                "fusegrad: the functional transforms do not evaluate a reduction inside an element-wise "
                "expression yet (e.g. x - mean(x)); take reductions of element-wise expressions of the "
                "arguments and scalars (fg::compile handles the general case)");
};
template <class Op, class... A>
struct info<expr_node<Op, A...>> : info_of_args<A...> {};
template <class F, class Fwd, class... A>
struct info<custom_expr<F, Fwd, A...>> : info_of_args<A...> {};
template <reduce_op K, reduce_axis X, class A>
struct info<reduce_expr<K, X, A>> {
  static_assert(not_concat<A>());
  static_assert(X == reduce_axis::all && K != reduce_op::max,
                "fusegrad: the functional transforms reduce with fg::sum and fg::mean over all elements; "
                "a reduction over one dim, or a max, needs fg::compile");
  static constexpr std::uint64_t args = info<A>::args;
  static constexpr bool elementwise = false;
  /// A reduction of an element-wise expression is summed over the elements (one of the span
  /// engine's reductions); a reduction of a scalar is that scalar.
  static constexpr bool real = info<A>::elementwise;
  static constexpr int reds = real ? 1 : info<A>::reds;
};

template <class R, std::size_t I, class T, class M, class S>
struct info<range_stat_expr<R, I, T, M, S>> {
  static_assert(!info<M>::elementwise && !info<S>::elementwise && info<M>::reds == 0 && info<S>::reds == 0,
                "fusegrad: a statistic of a range (fg::normal_lpdf(x, mu, sigma)) takes scalar parameters computed "
                "from scalar arguments; a parameter that reads a range or a reduction needs the general form");
  static constexpr std::uint64_t args = (std::uint64_t{1} << I) | info<M>::args | info<S>::args;
  static constexpr bool elementwise = false;
  static constexpr int reds = 0;
};

template <class E>
inline constexpr bool is_range_stat_v = false;
template <class R, std::size_t I, class T, class M, class S>
inline constexpr bool is_range_stat_v<range_stat_expr<R, I, T, M, S>> = true;

template <class E>
inline constexpr bool is_constant_v = false;
template <class T>
inline constexpr bool is_constant_v<constant_arg<T>> = true;
template <class E>
inline constexpr bool is_data_v = false;
template <class T>
inline constexpr bool is_data_v<data_arg<T>> = true;
template <class E>
inline constexpr bool is_element_v = false;
template <std::size_t I, class T>
inline constexpr bool is_element_v<element_arg<I, T>> = true;
/// The leaves a context loads (`c.leaf(x)`): arguments and data (which has no gradient: no sink
/// is handed it).
template <class E>
inline constexpr bool is_arg_v = false;
template <std::size_t I, class T>
inline constexpr bool is_arg_v<scalar_arg<I, T>> = true;
template <std::size_t I, class T>
inline constexpr bool is_arg_v<span_arg<I, T>> = true;
template <class T>
inline constexpr bool is_arg_v<data_arg<T>> = true;
template <class R>
inline constexpr reduce_op red_kind_v = reduce_op::sum;
template <reduce_op K, reduce_axis X, class A>
inline constexpr reduce_op red_kind_v<reduce_expr<K, X, A>> = K;
template <class E>
inline constexpr bool is_real_reduction_v = false;
template <reduce_op K, reduce_axis X, class A>
inline constexpr bool is_real_reduction_v<reduce_expr<K, X, A>> = info<reduce_expr<K, X, A>>::real;

/// A subexpression of scalars only (no range, no reduction) that depends on an argument:
/// inside an element-wise part it has one value for all elements, computed once, and its
/// adjoint is summed over the elements before its rules run, once (as eager broadcasting
/// does: the gradient of a broadcast operand is summed to its shape first).
template <class E>
inline constexpr bool hoistable_v =
    !is_arg_v<E> && !is_constant_v<E> && !info<E>::elementwise && info<E>::reds == 0 && info<E>::args != 0;

/// The children of an inner node, as a tuple type.
template <class E>
struct children {
  using type = std::tuple<>;
};
template <class Op, class... A>
struct children<expr_node<Op, A...>> {
  using type = std::tuple<A...>;
};
template <class F, class Fwd, class... A>
struct children<custom_expr<F, Fwd, A...>> {
  using type = std::tuple<A...>;
};
template <reduce_op K, reduce_axis X, class A>
struct children<reduce_expr<K, X, A>> {
  using type = std::tuple<A>;
};
template <class R, std::size_t I, class T, class M, class S>
struct children<range_stat_expr<R, I, T, M, S>> {  // (its range is not a child: the statistic reads it whole)
  using type = std::tuple<M, S>;
};
template <class E>
using children_t = typename children<E>::type;
/// Whether `E` reads data (`fg::data`): then the transforms run it on the span engine, also when
/// every argument is a scalar.
template <class E>
constexpr bool reads_data() {
  if constexpr (is_data_v<E>) return true;
  else if constexpr (is_concat_v<E>)
    return []<class... P>(std::type_identity<concat_expr<P...>>) {
      return (reads_data<P>() || ...);
    }(std::type_identity<E>{});
  else return []<std::size_t... K>(std::index_sequence<K...>) {
      return (false || ... || reads_data<std::tuple_element_t<K, typename children<E>::type>>());
    }
  (std::make_index_sequence<std::tuple_size_v<typename children<E>::type>>{});
}
template <class E>
inline constexpr std::size_t arity_v = std::tuple_size_v<children_t<E>>;
template <class E, std::size_t J>
using child_t = std::tuple_element_t<J, children_t<E>>;

template <std::size_t J, class E>
constexpr const auto& child(const E& e) {
  if constexpr (requires { e.arg; }) return e.arg;
  else return operand<J>(e.args);
}
/// The statistics of ranges (`range_stat_expr`) in `E`.
template <class E>
constexpr int range_stats() {
  return [&]<std::size_t... K>(std::index_sequence<K...>) {
    return (int{is_range_stat_v<E>} + ... + range_stats<child_t<E, K>>());
  }
  (std::make_index_sequence<arity_v<E>>{});
}
template <class E>
constexpr int marks();
template <class E>
constexpr int children_marks() {
  return [&]<std::size_t... K>(std::index_sequence<K...>) { return (0 + ... + marks<child_t<E, K>>()); }
  (std::make_index_sequence<arity_v<E>>{});
}
/// Marks: the nodes whose value comes from elsewhere, numbered in pre-order: each reduction
/// of an element-wise part (its value is summed over the elements), each hoistable
/// subexpression (`hoistable_v`; inside element-wise parts its value is computed once) and
/// each statistic of a range (its value computed before the passes; one inside a hoistable
/// subexpression keeps a number of its own).
template <class E>
constexpr int marks() {
  if constexpr (hoistable_v<E>) {
    if constexpr (is_range_stat_v<E> || range_stats<E>() == 0) return 1;
    else return std::max(1, children_marks<E>());
  } else if constexpr (is_real_reduction_v<E>) return 1 + marks<child_t<E, 0>>();
  else return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return (0 + ... + marks<child_t<E, K>>());
    }
  (std::make_index_sequence<arity_v<E>>{});
}
/// The number of the first mark in child `J` of `E`, when `E`'s is `B`.
template <class E, std::size_t J>
constexpr int child_base(int b) {
  return [&]<std::size_t... K>(std::index_sequence<K...>) {
    return b + (is_real_reduction_v<E> ? 1 : 0) + (0 + ... + marks<child_t<E, K>>());
  }
  (std::make_index_sequence<J>{});
}

// ---- forward -----------------------------------------------------------------------------

/// A node's value and its children's value trees (`operands`, expr/expr.hpp): plain
/// aggregates, built in place (a tuple's constructors copied every subtree at every level:
/// quadratic, and out of line).
template <class Y, class... K>
struct vt {
  Y y;
  [[no_unique_address]] operands<K...> k;
};
/// A unary node whose op has a sibling (`sin`, `cos`), evaluated with it (`apply_with_sibling`):
/// `s` is the sibling's value, which the backward reads instead of computing it.
template <class Y, class K0>
struct vt_sib {
  Y y;
  operands<K0> k;
  Y s;
};
template <std::size_t J, class V>
constexpr const auto& kid(const V& v) {
  return operand<J>(v.k);
}

/// `x` as a value of kind `V` (numbers, batches, duals with a zero tangent; for an
/// expression kind, a constant expression).
template <class V, Element T>
constexpr auto lift(T x) {
  if constexpr (requires(V v) { v.v; }) return V{decltype(V{}.v)(x)};
  else if constexpr (requires(V v) {
                       v.p;
                       v.t;
                     })
    return V{lift<decltype(V{}.p)>(x), lift<decltype(V{}.p)>(T(0))};
  else return constant_arg<T>{{}, x};  // an expression
}

template <int B, class C, class E>
constexpr auto fwd(const C& c, const E& e);

/// What a statistic of a range (`range_stat_expr`) summed over its range (its kernel's
/// sums), and the range's length.
template <class T>
struct range_stat_rec {
  T s1, s2;
  index_t n;
};
template <class E>
struct range_rule;
template <class R, std::size_t I, class T, class M, class S>
struct range_rule<range_stat_expr<R, I, T, M, S>> {
  using type = R;
};
template <class Y>
inline constexpr bool plain_num_v = false;
template <Element T>
inline constexpr bool plain_num_v<num<T>> = true;
/// A range statistic's value from its sums and its scale parameter `s`. Numbers only: under
/// forward mode the statistic is not a kernel's (`span_run` refuses it with a sentence; the
/// other kinds give a placeholder here, so that the refusal is the one error).
template <class E, class T, class Y>
constexpr Y range_stat_value(const E&, const range_stat_rec<T>& st, const Y& s) {
  if constexpr (plain_num_v<Y>) return Y{range_rule<E>::type::value(st.n, std::array<T, 2>{st.s1, st.s2}, s.v)};
  else return Y{};
}
/// Its parameters' adjoints {mu's, sigma's} from the output's adjoint `g`.
template <class E, class T, class Y, class G>
constexpr auto range_stat_grads(const E&, const range_stat_rec<T>& st, const Y& s, const G& g) {
  if constexpr (plain_num_v<Y>) {
    const auto r = range_rule<E>::type::grads(st.n, std::array<T, 2>{st.s1, st.s2}, s.v, g.v);
    return std::pair<Y, Y>{Y{r[0]}, Y{r[1]}};
  } else {
    return std::pair<Y, Y>{};
  }
}

template <class E, class... Y>
constexpr auto node_value(const E& e, const Y&... y) {
  if constexpr (requires { e.op; }) return apply_op(e.op, y...);
  else if constexpr (requires { e.fwd; }) {
    return [&]<class F, class Fwd, class... A>(const custom_expr<F, Fwd, A...>&) { return F::forward(y...); }(e);
  } else return (y, ...);  // a sum or mean of one scalar is that scalar
}

/// Whether context `C` evaluates node `E` with its op's sibling: where a backward follows (the
/// span engine's passes that differentiate) and the operand `X` is a batch.
template <class C, class E, class X>
constexpr bool with_sibling() {
  if constexpr (requires {
                  requires C::backward;
                  std::declval<const E&>().op;
                })
    return requires(const E& e, const X& x) { apply_with_sibling(e.op, x); };
  else return false;
}

template <int B, class C, class E, std::size_t... J>
constexpr auto fwd_node(const C& c, const E& e, std::index_sequence<J...>) {
  static_assert(sizeof...(J) <= 3, "fusegrad: the functional transforms take custom ops of at most 3 operands");
  using R0 = vt<int, decltype(fwd<child_base<E, J>(B)>(c, child<J>(e)))...>;
  using Y = decltype(node_value(e, kid<J>(std::declval<const R0&>()).y...));
  vt<Y, decltype(fwd<child_base<E, J>(B)>(c, child<J>(e)))...> r{Y{}, {fwd<child_base<E, J>(B)>(c, child<J>(e))...}};
  r.y = node_value(e, kid<J>(r).y...);
  return r;
}
/// A unary node evaluated with its op's sibling (`vt_sib`).
template <int B, class C, class E>
constexpr auto fwd_sibling_node(const C& c, const E& e) {
  auto k = fwd<child_base<E, 0>(B)>(c, child<0>(e));
  const auto [y, s] = apply_with_sibling(e.op, k.y);
  // (built from its values: a node built first with placeholders and assigned after had the
  // whole tree zeroed in memory for every batch)
  return vt_sib<std::remove_cvref_t<decltype(y)>, decltype(k)>{y, {k}, s};
}
template <int B, class C, class E>
constexpr bool sibling_node() {
  if constexpr (arity_v<E> == 1) {
    using K = decltype(fwd<child_base<E, 0>(B)>(std::declval<const C&>(), child<0>(std::declval<const E&>())));
    return with_sibling<C, E, decltype(std::declval<const K&>().y)>();
  } else {
    return false;
  }
}

/// Which of the span engine's stages (functional/stages.hpp) node `E` is, where context `C`
/// reads its value tree instead of computing it (-1: none; other contexts stage nothing).
template <class C, class E>
constexpr int staged_in() {
  if constexpr (requires { C::template stage_of<E>; }) return C::template stage_of<E>;
  else return -1;
}

/// The value tree of `e` in context `c`: `c.leaf(arg)`, `c.constant(x)`,
/// `c.reduction<B>(r)` and, in contexts that hoist, `c.hoisted<B>(h)` give the leaves' values
/// (and, in the span engine's batches, `c.staged_tree<E>()` a stage's whole tree).
template <int B, class C, class E>
constexpr auto fwd(const C& c, const E& e) {
  if constexpr (is_constant_v<E>) return vt<decltype(c.constant(e.value))>{c.constant(e.value), {}};
  else if constexpr (is_arg_v<E>) return vt<decltype(c.leaf(e))>{c.leaf(e), {}};
  else if constexpr (C::hoisting && hoistable_v<E>)
    return vt<decltype(c.template hoisted<B>(e))>{c.template hoisted<B>(e), {}};
  else if constexpr (staged_in<C, E>() >= 0) return c.template staged_tree<E>();
  else if constexpr (is_element_v<E>) return vt<decltype(c.element(e))>{c.element(e), {}};
  else if constexpr (is_real_reduction_v<E>)
    return vt<decltype(c.template reduction<B>(e))>{c.template reduction<B>(e), {}};
  else if constexpr (is_range_stat_v<E>) {  // the statistics from the context; the value from them
    auto m = fwd<child_base<E, 0>(B)>(c, child<0>(e));
    auto s = fwd<child_base<E, 1>(B)>(c, child<1>(e));
    const auto& st = c.template range_stat<B>(e);
    using Y = decltype(m.y);
    return vt<Y, std::remove_cvref_t<decltype(st)>, decltype(m), decltype(s)>{range_stat_value(e, st, s.y), {st, m, s}};
  } else if constexpr (sibling_node<B, C, E>()) return fwd_sibling_node<B>(c, e);
  else return fwd_node<B>(c, e, std::make_index_sequence<arity_v<E>>{});
}

// ---- backward ----------------------------------------------------------------------------

template <class S, class E>
inline constexpr bool wanted = (info<E>::args & S::mask) != 0 || (S::reductions && info<E>::reds > 0);

/// The adjoint child `J` of `e` receives from `e`'s adjoint `g` (`zero_t`: none).
template <std::size_t J, class E, class VT, class G>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): one if-constexpr branch per expression kind
constexpr auto child_adjoint(const E& e, const VT& v, const G& g) {
  if constexpr (requires { e.op; }) {
    const auto& x0 = kid<0>(v).y;
    if constexpr (arity_v<E> == 1) {
      if constexpr (requires { v.s; }) return e.op.derivative_with_sibling(x0, v.y, v.s, g);  // (`vt_sib`)
      else if constexpr (requires { e.op.derivative(x0, v.y, g); }) return e.op.derivative(x0, v.y, g);
      else return zero_t{};
    } else {
      const auto& x1 = kid<1>(v).y;
      if constexpr (!requires { e.op.da(x0, x1, v.y, g); }) return zero_t{};
      else if constexpr (J == 0) return e.op.da(x0, x1, v.y, g);
      else return e.op.db(x0, x1, v.y, g);
    }
  } else if constexpr (requires { e.fwd; }) {
    return [&]<class F, class Fwd, class... A>(const custom_expr<F, Fwd, A...>&) {
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        auto saved = [&] {
          if constexpr (requires { F::setup_context(kid<K>(v).y..., v.y); })
            return F::setup_context(kid<K>(v).y..., v.y);
          else return std::tuple{kid<K>(v).y...};
        }();
        auto grads = F::backward(std::as_const(saved), g);
        if constexpr (sizeof...(A) == 1) return grads;
        else return std::get<J>(grads);
      }
      (std::index_sequence_for<A...>{});
    }(e);
  } else {
    return g;  // a sum or mean of one scalar
  }
}

template <int B, class S, class E, class VT, class G>
constexpr auto back(S s, const E& e, const VT& v, const G& g);

template <int B, std::size_t J, class S, class E, class VT, class G>
[[gnu::always_inline]] constexpr auto back_from(S s, const E& e, const VT& v, const G& g) {
  if constexpr (J == arity_v<E>) {
    return s;
  } else if constexpr (!wanted<S, child_t<E, J>>) {
    return back_from<B, J + 1>(s, e, v, g);
  } else {
    auto gj = child_adjoint<J>(e, v, g);
    if constexpr (std::is_same_v<decltype(gj), zero_t>) return back_from<B, J + 1>(s, e, v, g);
    else return back_from<B, J + 1>(back<child_base<E, J>(B)>(s, child<J>(e), kid<J>(v), gj), e, v, g);
  }
}

/// Pushes `g`, the adjoint of `e` (whose value tree is `v`), down to the leaves: `s.leaf(arg,
/// share)`, `s.reduction<B>(r, share)`. Returns the sink's next state.
template <int B, class S, class E, class VT, class G>
[[gnu::always_inline]] constexpr auto back(S s, const E& e, const VT& v, const G& g) {
  if constexpr (!wanted<S, E> || is_constant_v<E>) return s;
  else if constexpr (is_arg_v<E>) return s.leaf(e, g);
  else if constexpr (S::hoisting && hoistable_v<E>) return s.template hoisted<B>(e, g);
  else if constexpr (is_element_v<E>) return s.element(e, g);
  else if constexpr (is_real_reduction_v<E>) return s.template reduction<B>(e, g);
  else if constexpr (is_range_stat_v<E>) {
    // the parameters' adjoints in closed form, the range's through the sink (written whole)
    const auto [gm, gs] = range_stat_grads(e, kid<0>(v), kid<2>(v).y, g);
    auto s1 = back<child_base<E, 0>(B)>(s, child<0>(e), kid<1>(v), gm);
    auto s2 = back<child_base<E, 1>(B)>(s1, child<1>(e), kid<2>(v), gs);
    if constexpr ((info<std::remove_cvref_t<decltype(e.x)>>::args & S::mask) != 0)
      return s2.range_stat_x(e, kid<1>(v).y, kid<2>(v).y, g);
    else return s2;
  } else return back_from<B, 0>(s, e, v, g);
}

}  // namespace fusegrad::detail::fn
