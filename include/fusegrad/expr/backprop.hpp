#pragma once
/// \file fusegrad/expr/backprop.hpp
/// Reverse-mode differentiation at the type level (AOTAutograd's joint graph).
///
/// `backprop<I, Base>(e, g)` returns the expression of d(out)/d(input I) given the adjoint `g`
/// of `e`, by calling each op's own derivative rule (the one eager mode uses) on expression
/// values. Forward values enter the backward as the forward subexpressions themselves when
/// they are pure (so they merge with the forward by type identity), or as `fwd_ref<K>` when
/// they carry run-time constants. Inputs that do not reach the output give `zero_t`.

#include "fusegrad/expr/tree.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/add.hpp"

namespace fusegrad::detail {

/// "No gradient": the additive identity of adjoints.
struct zero_t {};

template <class A, class B>
auto add_adjoint(const A& a, const B& b) {
  if constexpr (std::is_same_v<A, zero_t>) return b;
  else if constexpr (std::is_same_v<B, zero_t>) return a;
  else return a + b;
}

inline zero_t fold_add() { return {}; }
template <class A, class... R>
auto fold_add(const A& a, const R&... r) {
  return add_adjoint(a, fold_add(r...));
}

/// The forward value of subtree `e` (rooted at post-order index `index_of<E, Base>`).
template <std::size_t Base, class E>
auto fwd(const E& e) {
  if constexpr (pure<E>()) return e;
  else return fwd_ref<index_of<E, Base>, typename E::element_type>{};
}

template <std::size_t I, std::size_t Base, class E, class G>
auto backprop(const E& e, const G& g);

/// Reductions: the adjoint is summed to the reduction's shape, then broadcast back over its
/// input (divided by the count for mean; masked to the maxima, split between ties, for max).
template <std::size_t I, std::size_t Base, reduce_kind_t Kind, reduce_axis Axis, class A, class G>
auto backprop_reduce(const reduce_expr<Kind, Axis, A>& e, const G& g) {
  using E = reduce_expr<Kind, Axis, A>;
  constexpr std::size_t self = index_of<E, Base>, ia = index_of<A, Base>;
  using GR = sumto_expr<self, G>;
  const GR gr{{}, g};
  if constexpr (Kind == reduce_kind_t::sum || Kind == reduce_kind_t::mean) {
    return backprop<I, Base>(e.arg, unreduce_expr<Kind, Axis, ia, GR>{{}, gr, e.keepdim});
  } else {
    auto fa = fwd<Base>(e.arg);
    auto y = fwd<Base>(e);
    auto mask = eq(fa, unreduce_expr<reduce_kind_t::sum, Axis, ia, decltype(y)>{{}, y, e.keepdim});
    reduce_expr<reduce_kind_t::sum, Axis, decltype(mask)> count{{}, mask, true};
    const auto ga = unreduce_expr<reduce_kind_t::sum, Axis, ia, GR>{{}, gr, e.keepdim} * mask /
                    unreduce_expr<reduce_kind_t::sum, Axis, ia, decltype(count)>{{}, count, true};
    return backprop<I, Base>(e.arg, ga);
  }
}

/// Custom ops: the user's setup_context/backward, called on forward expressions; the
/// gradient of each argument flows on into that argument (never through F::forward).
template <std::size_t I, std::size_t Base, class F, class Fwd, class... Args, class G>
auto backprop_custom(const custom_expr<F, Fwd, Args...>& e, const G& g) {
  using E = custom_expr<F, Fwd, Args...>;
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    auto fy = fwd<Base>(e);
    auto saved = [&] {
      if constexpr (requires { F::setup_context(fwd<child_base<E, Base, J>()>(std::get<J>(e.args))..., fy); })
        return F::setup_context(fwd<child_base<E, Base, J>()>(std::get<J>(e.args))..., fy);
      else
        return std::tuple{fwd<child_base<E, Base, J>()>(std::get<J>(e.args))...};
    }();
    auto grads = F::backward(std::as_const(saved), g);
    auto as_tuple = [&] {
      if constexpr (sizeof...(Args) == 1) return std::tuple{grads};
      else return grads;
    }();
    auto one = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      using AK = std::tuple_element_t<K, std::tuple<Args...>>;
      if constexpr (contains_sym<I, AK>())
        return backprop<I, child_base<E, Base, K>()>(std::get<K>(e.args), std::get<K>(as_tuple));
      else return zero_t{};
    };
    return fold_add(one(std::integral_constant<std::size_t, J>{})...);
  }(std::index_sequence_for<Args...>{});
}

template <std::size_t I, std::size_t Base, class E, class G>
auto backprop(const E& e, const G& g) {
  constexpr std::size_t self = index_of<E, Base>;
  if constexpr (!contains_sym<I, E>()) {
    return zero_t{};
  } else if constexpr (is_leaf_v<E>) {
    return g;  // sym<I>
  } else if constexpr (is_pointwise_v<E> && arity_v<E> == 1) {
    const auto& a = child<0>(e);
    if constexpr (requires { e.op.derivative(fwd<Base>(a), fwd<Base>(e), g); })
      return backprop<I, Base>(a, e.op.derivative(fwd<Base>(a), fwd<Base>(e), g));
    else
      return zero_t{};
  } else if constexpr (is_pointwise_v<E> && arity_v<E> == 2) {
    const auto& a = child<0>(e);
    const auto& b = child<1>(e);
    using A = std::remove_cvref_t<decltype(a)>;
    using B = std::remove_cvref_t<decltype(b)>;
    constexpr std::size_t base_b = child_base<E, Base, 1>();
    if constexpr (requires { e.op.da(fwd<Base>(a), fwd<base_b>(b), fwd<Base>(e), g); }) {
      auto ga = [&] {
        if constexpr (contains_sym<I, A>())
          return backprop<I, Base>(a, e.op.da(fwd<Base>(a), fwd<base_b>(b), fwd<Base>(e), g));
        else return zero_t{};
      }();
      auto gb = [&] {
        if constexpr (contains_sym<I, B>())
          return backprop<I, base_b>(b, e.op.db(fwd<Base>(a), fwd<base_b>(b), fwd<Base>(e), g));
        else return zero_t{};
      }();
      return add_adjoint(ga, gb);
    } else {
      return zero_t{};
    }
  } else if constexpr (is_reduce_v<E>) {
    return backprop_reduce<I, Base>(e, g);
  } else if constexpr (is_custom_v<E>) {
    return backprop_custom<I, Base>(e, g);
  } else if constexpr (is_matmul_v<E>) {
    using A = std::remove_cvref_t<decltype(e.a)>;
    using B = std::remove_cvref_t<decltype(e.b)>;
    static_assert(!E::ta, "fusegrad::compile: a forward matmul never transposes its first operand");
    constexpr std::size_t base_b = child_base<E, Base, 1>();
    using GM = sumto_expr<self, G>;
    const GM gm{{}, g};
    auto ga = [&] {
      if constexpr (contains_sym<I, A>()) {
        auto fb = fwd<base_b>(e.b);
        return backprop<I, Base>(e.a, matmul_expr<GM, decltype(fb), false, !E::tb>{{}, gm, fb});
      } else return zero_t{};
    }();
    auto gb = [&] {
      if constexpr (contains_sym<I, B>()) {
        auto fa = fwd<Base>(e.a);
        if constexpr (!E::tb) return backprop<I, base_b>(e.b, matmul_expr<decltype(fa), GM, true, false>{{}, fa, gm});
        else return backprop<I, base_b>(e.b, matmul_expr<GM, decltype(fa), true, false>{{}, gm, fa});
      } else return zero_t{};
    }();
    return add_adjoint(ga, gb);
  } else {
    static_assert(dependent_false<E>, "fusegrad::compile: this node kind cannot be differentiated");
  }
}

}  // namespace fusegrad::detail
