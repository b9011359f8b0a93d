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

#include "fusegrad/core/operand.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/ops/function.hpp"
#include "fusegrad/ops/op.hpp"

namespace fusegrad {

/// A `float`, a `double` or a batch `fg::simd<T>` as an operand of fusegrad's ops.
template <class V>
struct num {
  static_assert(Element<detail::lane_type_t<V>>,
                "fusegrad::num holds a float, a double or a SIMD batch of them");
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

template <class V, class Op>
  requires UnaryOp<Op, typename num<V>::element_type>
constexpr num<V> apply_op(const Op& op, const num<V>& x) {
  return {op.value(x.v)};
}
template <class V, class Op>
  requires BinaryOp<Op, typename num<V>::element_type>
constexpr num<V> apply_op(const Op& op, const num<V>& a, const num<V>& b) {
  return {op.value(a.v, b.v)};
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
