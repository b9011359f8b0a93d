#pragma once
/// \file fusegrad/functional/args.hpp
/// The symbols a functional transform (`fg::grad`, `fg::jvp`, ...) calls the user's function
/// with: `scalar_arg<I, T>` for a `float`/`double` argument, `span_arg<I, T>` for a contiguous
/// range of them (`std::array`, `std::span`, `std::vector`, a tensor's elements). They are
/// expressions (fusegrad/expr/expr.hpp): fusegrad's op functions build expression types from
/// them, which the transforms evaluate, on numbers, SIMD batches or duals, forward and
/// backward, with each op's own rules. A `span_arg` stands for the elements
/// `[offset, offset + count)` of its argument: `fg::slice(x, offset, count)` views a part of
/// it (`x[i + 1] - x[i]` over a vector is `slice(x, 1, n - 1) - slice(x, 0, n - 1)`).

#include <cstddef>
#include <cstdint>

#include "fusegrad/core/error.hpp"
#include "fusegrad/expr/expr.hpp"

namespace fusegrad {

/// Argument `I` of a transformed function, a scalar.
template <std::size_t I, Element T>
struct scalar_arg : symbolic {
  using element_type = T;
  static constexpr std::size_t index = I;
};

/// Argument `I` of a transformed function, a contiguous range: its elements
/// `[offset, offset + count)`, element-wise.
template <std::size_t I, Element T>
struct span_arg : symbolic {
  using element_type = T;
  static constexpr std::size_t index = I;
  index_t offset = 0, count = 0;
  // The copy is written field by field on purpose: as an aggregate, GCC built a symbol with two
  // 8-byte stores and copied it into each expression node as one 16-byte block (and nodes
  // into nodes at other offsets), loads that store forwarding cannot serve; they cost a
  // third of a 10-element `value_and_grad` (bench_functional: 130-140 -> 100 ns).
  constexpr span_arg() = default;
  constexpr span_arg(index_t o, index_t c) noexcept : offset(o), count(c) {}
  constexpr span_arg(const span_arg& o) noexcept : symbolic(), offset(o.offset), count(o.count) {}
  constexpr span_arg& operator=(const span_arg&) = default;
  constexpr index_t size() const { return count; }
};

/// The number of elements `x` stands for.
template <std::size_t I, Element T>
constexpr index_t size(const span_arg<I, T>& x) {
  return x.count;
}

/// Elements `[offset, offset + count)` of `x` (e.g. `slice(x, 1, size(x) - 1)`: all but the
/// first).
template <std::size_t I, Element T>
constexpr span_arg<I, T> slice(const span_arg<I, T>& x, index_t offset, index_t count) {
  if (offset < 0 || count < 0 || offset + count > x.count)
    detail::fail("slice", "elements [", offset, ", ", offset + count, ") of an argument of ", x.count,
         " elements; expected 0 <= offset and offset + count <= ", x.count);
  return {x.offset + offset, count};
}

/// A constant inside a transformed function's expression (a seed, a zero gradient): it has a
/// value and no gradient.
template <Element T>
struct constant_arg : symbolic {
  using element_type = T;
  T value{};
};

/// A scalar statistic of a range argument that its own kernel computes in one pass (`Rule`:
/// the normal log-density of `x` with scalar `mu` and `sigma`, functional/normal.hpp): the
/// range `x` and the statistic's scalar parameters (expressions of scalars, no ranges).
template <class Rule, std::size_t I, Element T, class M, class S>
struct range_stat_expr : symbolic {
  using element_type = T;
  span_arg<I, T> x;
  operands<M, S> args;
};

namespace detail {
template <class R, std::size_t I, class T, class M, class S>
inline constexpr bool is_expr_v<range_stat_expr<R, I, T, M, S>> = true;
template <class T> inline constexpr bool is_expr_v<constant_arg<T>> = true;
template <std::size_t I, class T> inline constexpr bool is_expr_v<scalar_arg<I, T>> = true;
template <std::size_t I, class T> inline constexpr bool is_expr_v<span_arg<I, T>> = true;
}  // namespace detail

}  // namespace fusegrad
