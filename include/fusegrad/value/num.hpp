#pragma once
/// \file fusegrad/value/num.hpp
/// Plain numbers as operands: `num<V>` holds a `float`, a `double` or a SIMD batch
/// `fg::simd<T>`, and fusegrad's op functions (`cos`, `*`, `pow`, custom ops...) accept it:
/// `apply_op` calls the op's own `value`, with nothing allocated and nothing recorded. The
/// functional transforms (fusegrad/functional/) evaluate expressions on `num` values, and each
/// op's derivative rule, written over any algebra of values, runs on them unchanged. Every
/// operation is `constexpr` where the op's value is (arithmetic), so a gradient of a
/// polynomial is a constant expression.

#include <type_traits>
#include <utility>

#include "fusegrad/core/operand.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/ops/function.hpp"
#include "fusegrad/ops/op.hpp"

namespace fusegrad {

/// A `float`, a `double` or a batch `fg::simd<T>` as an operand of fusegrad's ops.
template <class V>
struct num {
  static_assert(Element<detail::lane_type_t<V>>, "fusegrad::num holds a float, a double or a SIMD batch of them");
  using element_type = detail::lane_type_t<V>;
  V v{};
};
template <class V>
num(V) -> num<V>;

template <class V>
struct operand_traits<num<V>> {
  static constexpr bool value = true;
  using element_type = typename num<V>::element_type;
};

/// Each op rounds on its own, as the eager kernels round it (one op per loop): the compiler
/// may not contract it with the next one (a multiply and an add into one fused multiply-add),
/// so the span engine's values and gradients keep eager's bits. On a scalar (the scalar form
/// of the transforms) too: GCC contracts by the uses a product has where it is inlined, so
/// `fg::grad(f)(x)` and `fg::value_and_grad(f)(x).second` (whose value the caller may or may
/// not read) gave different last bits at -O2 and -O3; rounded op by op, a call's bits do not
/// depend on where it is inlined. (It costs the 2-D Rosenbrock gradient its FMAs: see
/// docs/functional.md, "Scalars: straight-line code, `constexpr`".)
template <class V, class Op>
requires UnaryOp<Op, typename num<V>::element_type>
constexpr num<V> apply_op(const Op& op, const num<V>& x) {
  num<V> r{op.value(x.v)};
  detail::round_here(r.v);
  return r;
}
template <class V, class Op>
requires BinaryOp<Op, typename num<V>::element_type>
constexpr num<V> apply_op(const Op& op, const num<V>& a, const num<V>& b) {
  num<V> r{op.value(a.v, b.v)};
  detail::round_here(r.v);
  return r;
}

/// Whether an op's value on `num<V>` is worth computing with its sibling's (`has_sibling`):
/// on batches, where one reduction serves both; a scalar's `std::sin` and `std::cos` are two
/// library calls either way.
template <class Op, class V>
concept pairs_with_sibling = detail::has_sibling<Op> && !detail::is_scalar_v<V>;

/// `{op's value, its sibling's value}` on one operand, each rounded on its own as `apply_op`
/// rounds it (the same bits as the two ops apart).
template <class V, class Op>
requires pairs_with_sibling<Op, V>
inline std::pair<num<V>, num<V>> apply_with_sibling(const Op& op, const num<V>& x) {
  auto [a, b] = op.with_sibling(x.v);
  num<V> ra{a}, rb{b};
  detail::round_here(ra.v);
  detail::round_here(rb.v);
  return {ra, rb};
}

/// A custom op (`fg::function<F>`) on numbers: its `forward`, run on them.
template <class F, class V, class... Xs>
constexpr auto apply_function(function_tag<F>, const num<V>& x, const Xs&... xs) {
  return F::forward(x, xs...);
}

namespace detail {
/// Zero of the same kind of value as `x`.
template <class V>
constexpr num<V> zero_like(const num<V>&) {
  return {V(typename num<V>::element_type(0))};
}
}  // namespace detail

}  // namespace fusegrad
