#pragma once
/// \file fusegrad/expr/backprop.hpp
/// Reverse-mode differentiation on the canonical forward graph (AOTAutograd's joint graph).
///
/// The adjoint of each forward node is an expression: the sum of the contributions of the
/// nodes that use it. A contribution is the user's node's own derivative rule (the one eager
/// mode runs) called on expression values: forward values are `fwd_ref<K>`, the user's
/// adjoint is `adj_ref<P>`. Expressions therefore stay as small as one rule, whatever the
/// depth of the graph, and every forward value is computed once.
///
/// Broadcasting: an adjoint may be broader than its node (the reduction over broadcast dims
/// is pushed down, which is exact for element-wise rules); it is summed to the node's shape
/// (`sumto`) where that matters: before a reduction's or a matmul's rule, where adjoints of
/// several users meet, and for the inputs' gradients.

#include "fusegrad/expr/tree.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/max.hpp"
#include "fusegrad/ops/mul.hpp"

namespace fusegrad::detail {

/// "No gradient": the additive identity of adjoints.
struct zero_t {};

template <class A, class B>
constexpr auto add_adjoint(const A& a, const B& b) {
  if constexpr (std::is_same_v<A, zero_t>) return b;
  else if constexpr (std::is_same_v<B, zero_t>) return a;
  else return a + b;
}

/// `add_adjoint` into an accumulator whose first contribution is known only at run time
/// (`has`): the first is assigned, later ones added, so the bits (a -0 included) are those of
/// `add_adjoint` on a growing sum.
template <class A, class G>
constexpr void add_adjoint_to(A& acc, bool& has, const G& g) {
  acc = has ? A(acc + g) : A(g);
  has = true;
}

constexpr zero_t fold_add() { return {}; }
template <class A, class... R>
constexpr auto fold_add(const A& a, const R&... r) {
  return add_adjoint(a, fold_add(r...));
}

template <std::size_t J, int C0, int C1, int C2>
inline constexpr std::size_t nth_id = static_cast<std::size_t>(J == 0 ? C0 : (J == 1 ? C1 : C2));

/// The contribution of node `e` (canonical id P, operand ids C0..C2) to its operand in slot S.
template <std::size_t P, std::size_t S, int C0, int C1, int C2, Element T, class E>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): one if-constexpr branch per expression kind
constexpr auto contribution(const E& e) {
  using G = adj_ref<P, T>;
  const G g{};
  [[maybe_unused]] const fwd_ref<static_cast<std::size_t>(C0 < 0 ? 0 : C0), T> x0{};
  [[maybe_unused]] const fwd_ref<static_cast<std::size_t>(C1 < 0 ? 0 : C1), T> x1{};
  [[maybe_unused]] const fwd_ref<P, T> y{};
  if constexpr (is_pointwise_v<E> && arity_v<E> == 1) {
    if constexpr (requires { e.op.derivative(x0, y, g); }) return e.op.derivative(x0, y, g);
    else return zero_t{};
  } else if constexpr (is_pointwise_v<E> && arity_v<E> == 2) {
    if constexpr (requires { e.op.da(x0, x1, y, g); }) {
      if constexpr (S == 0) return e.op.da(x0, x1, y, g);
      else return e.op.db(x0, x1, y, g);
    } else {
      return zero_t{};
    }
  } else if constexpr (is_reduce_v<E>) {
    return []<detail::reduce_op Kind, reduce_axis Axis, class A>(const reduce_expr<Kind, Axis, A>& r, const G& gg) {
      constexpr auto ia = static_cast<std::size_t>(C0);
      using GR = sumto_expr<P, G>;
      const GR gr{{}, gg};
      if constexpr (Kind == detail::reduce_op::sum || Kind == detail::reduce_op::mean) {
        return unreduce_expr<Kind, Axis, ia, GR>{{}, gr, r.keepdim};
      } else {
        const fwd_ref<ia, T> xa{};
        const fwd_ref<P, T> yr{};
        auto mask = max_hits(xa, unreduce_expr<detail::reduce_op::sum, Axis, ia, fwd_ref<P, T>>{{}, yr, r.keepdim});
        auto count = max_count(reduce_expr<detail::reduce_op::sum, Axis, decltype(mask)>{{}, mask, true});
        return unreduce_expr<detail::reduce_op::sum, Axis, ia, GR>{{}, gr, r.keepdim} * mask /
               unreduce_expr<detail::reduce_op::sum, Axis, ia, decltype(count)>{{}, count, true};
      }
    }(e, g);
  } else if constexpr (is_matmul_v<E>) {
    static_assert(!E::ta, "fusegrad::compile: a forward matmul never transposes its first operand");
    using GM = sumto_expr<P, G>;
    const GM gm{{}, g};
    if constexpr (S == 0) return matmul_expr<GM, fwd_ref<static_cast<std::size_t>(C1), T>, false, !E::tb>{{}, gm, {}};
    else if constexpr (!E::tb)
      return matmul_expr<fwd_ref<static_cast<std::size_t>(C0), T>, GM, true, false>{{}, {}, gm};
    else return matmul_expr<GM, fwd_ref<static_cast<std::size_t>(C0), T>, true, false>{{}, gm, {}};
  } else if constexpr (is_custom_v<E>) {
    return [&]<class F, class Fwd, class... Args>(std::type_identity<custom_expr<F, Fwd, Args...>>) {
      if constexpr (S >= sizeof...(Args)) {
        return zero_t{};  // the gradient never flows through F::forward
      } else {
        return [&]<std::size_t... J>(std::index_sequence<J...>) {
          auto saved = [&] {
            if constexpr (requires { F::setup_context(fwd_ref<nth_id<J, C0, C1, C2>, T>{}..., y); })
              return F::setup_context(fwd_ref<nth_id<J, C0, C1, C2>, T>{}..., y);
            else return std::tuple{fwd_ref<nth_id<J, C0, C1, C2>, T>{}...};
          }();
          auto grads = F::backward(std::as_const(saved), g);
          if constexpr (sizeof...(Args) == 1) return grads;
          else return std::get<S>(grads);
        }
        (std::index_sequence_for<Args...>{});
      }
    }(std::type_identity<E>{});
  } else {
    return zero_t{};  // leaves
  }
}

}  // namespace fusegrad::detail
