#pragma once
/// \file fusegrad/functional/args.hpp
/// The symbols a functional transform (`fg::grad`, `fg::jvp`, ...) calls the user's function
/// with: `scalar_arg<I, T>` for a `float`/`double` argument, `span_arg<I, T>` for a contiguous
/// range of them (`std::array`, `std::span`, `std::vector`, a tensor's elements). They are
/// expressions (fusegrad/expr/expr.hpp): fusegrad's op functions build expression types from
/// them, which the transforms evaluate, on numbers, SIMD batches or duals, forward and
/// backward, with each op's own rules. A `span_arg` stands for the elements
/// `[offset, offset + count)` of its argument: `fg::slice(x, offset, count)` views a part of
/// it (`x[i + 1] - x[i]` over a vector is `slice(x, 1, n - 1) - slice(x, 0, n - 1)`), and
/// `x[i]` is one element, a scalar (`element_arg`), broadcast where it meets a range. A
/// `data_arg` is a range the function reads without differentiating it (`fg::data(draws)`).

#include <cstddef>
#include <cstdint>
#include <ranges>
#include <tuple>
#include <type_traits>

#include "fusegrad/core/error.hpp"
#include "fusegrad/expr/expr.hpp"

namespace fusegrad {

/// Argument `I` of a transformed function, a scalar.
template <std::size_t I, Element T>
struct scalar_arg : symbolic {
  using element_type = T;
  static constexpr std::size_t index = I;
};

/// A constant inside a transformed function's expression (a seed, a zero gradient, a number the
/// function computes from its captures): it has a value and no gradient.
template <Element T>
struct constant_arg : symbolic {
  using element_type = T;
  T value{};
};

/// Element `i` of range argument `I` (`x[i]`): a scalar of the function. Beside a range it is
/// broadcast, as a scalar argument is, and its gradient, summed over the elements, goes to
/// element `i` of the argument's gradient.
template <std::size_t I, Element T>
struct element_arg : symbolic {
  using element_type = T;
  static constexpr std::size_t index = I;
  index_t i = 0;
};

namespace detail {
[[noreturn]] inline void element_out_of_range(index_t i, index_t count) {
  fail("operator[]", "element ", i, " of a range of ", count, " elements; expected 0 <= i < ", count);
}
}  // namespace detail

/// Argument `I` of a transformed function, a contiguous range: its elements
/// `[offset, offset + count)`, element-wise.
template <std::size_t I, Element T>
struct span_arg : symbolic {
  using element_type = T;
  static constexpr std::size_t index = I;
  index_t offset = 0, count = 0;
  // The copy is written field by field on purpose: as an aggregate, GCC built a symbol with two
  // 8-byte stores and copied it into each expression node as one 16-byte block (and nodes
  // into nodes at other offsets), loads that store forwarding cannot serve; they stalled a
  // short `value_and_grad` for a large part of its time.
  constexpr span_arg() = default;
  constexpr span_arg(index_t o, index_t c) noexcept : offset(o), count(c) {}
  constexpr span_arg(const span_arg& o) noexcept : symbolic(), offset(o.offset), count(o.count) {}
  constexpr span_arg& operator=(const span_arg&) = default;
  constexpr index_t size() const { return count; }
  /// Element `i` (of the elements it stands for): a scalar, broadcast beside a range
  /// (`x[0] * x`: the first element times each).
  constexpr element_arg<I, T> operator[](index_t i) const {
    if (i < 0 || i >= count) detail::element_out_of_range(i, count);
    return {{}, offset + i};
  }
};

/// A range the function reads as data (`fg::data(z)`, functional/call.hpp): its elements
/// `[offset, offset + count)` enter the expression element-wise as an argument's do, and no
/// gradient or tangent is taken for them. It holds a pointer: the range must outlive the
/// transform's call.
template <Element T>
struct data_arg : symbolic {
  using element_type = T;
  const T* ptr = nullptr;
  index_t offset = 0, count = 0;
  constexpr index_t size() const { return count; }
  /// Element `i`: a constant of the function.
  constexpr constant_arg<T> operator[](index_t i) const {
    if (i < 0 || i >= count) detail::element_out_of_range(i, count);
    return {{}, ptr[offset + i]};
  }
};
template <Element T>
constexpr index_t size(const data_arg<T>& x) {
  return x.count;
}
/// Elements `[offset, offset + count)` of the data `x`.
template <Element T>
constexpr data_arg<T> slice(const data_arg<T>& x, index_t offset, index_t count) {
  if (offset < 0 || count < 0 || offset + count > x.count)
    detail::fail("slice", "elements [", offset, ", ", offset + count, ") of data of ", x.count,
                 " elements; expected 0 <= offset and offset + count <= ", x.count);
  return {{}, x.ptr, x.offset + offset, count};
}

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

/// A scalar statistic of a range argument that its own kernel computes in one pass (`Rule`:
/// the normal log-density of `x` with scalar `mu` and `sigma`, functional/normal.hpp): the
/// range `x` and the statistic's scalar parameters (expressions of scalars, no ranges).
template <class Rule, std::size_t I, Element T, class M, class S>
struct range_stat_expr : symbolic {
  using element_type = T;
  span_arg<I, T> x;
  operands<M, S> args;
};

/// A transformed function's output built from parts (`fg::concat(a, b, ...)`): element-wise
/// values of any lengths and scalars (one element each), one after another. It is an output
/// only: the transforms run it part by part, so no op takes it as an operand.
template <class... P>
struct concat_expr : symbolic {
  using element_type = typename std::tuple_element_t<0, std::tuple<P...>>::element_type;
  std::tuple<P...> parts;
};

namespace detail {
template <class R, std::size_t I, class T, class M, class S>
inline constexpr bool is_expr_v<range_stat_expr<R, I, T, M, S>> = true;
template <class T>
inline constexpr bool is_expr_v<constant_arg<T>> = true;
template <std::size_t I, class T>
inline constexpr bool is_expr_v<scalar_arg<I, T>> = true;
template <std::size_t I, class T>
inline constexpr bool is_expr_v<span_arg<I, T>> = true;
template <std::size_t I, class T>
inline constexpr bool is_expr_v<element_arg<I, T>> = true;
template <class T>
inline constexpr bool is_expr_v<data_arg<T>> = true;
template <class... P>
inline constexpr bool is_expr_v<concat_expr<P...>> = true;

/// The element type of `concat`'s parts: that of the first expression among them.
template <class... P>
constexpr auto concat_elem() {
  constexpr std::size_t k = [] {
    std::size_t i = 0, r = sizeof...(P);
    ((is_expr_v<P> && r == sizeof...(P) ? (r = i, ++i) : ++i), ...);
    return r;
  }();
  if constexpr (k == sizeof...(P)) return std::type_identity<void>{};
  else return std::type_identity<typename std::tuple_element_t<k, std::tuple<P...>>::element_type>{};
}
template <class T, class P>
constexpr auto concat_part(const P& p) {
  if constexpr (Element<P>) return constant_arg<T>{{}, static_cast<T>(p)};
  else return p;
}

/// A contiguous range of numbers that is not an operand (`std::vector`, `std::span`): captured by a
/// transformed function, it cannot meet the function's symbols without `fg::data`.
template <class R>
concept captured_range = !Operand<R> && std::ranges::contiguous_range<const R&> &&
                         Element<std::remove_cvref_t<std::ranges::range_value_t<const R&>>>;
}  // namespace detail

/// The output of a transformed function built from parts, one after another: element-wise
/// values of any lengths (`x`, `fg::sin(fg::slice(x, 1, 2))`, `x[0] * x`), scalars
/// (`x[0] * x[1]`, `fg::sum(x)`) and numbers, one element each. `fg::jvp`, `fg::vjp` and
/// `fg::jacobian` take it (a Jacobian of m outputs: the parts' lengths add up to m).
template <class... P>
requires((detail::is_expr_v<P> || Element<P>)&&...) constexpr auto concat(const P&... p) {
  using T = typename decltype(detail::concat_elem<P...>())::type;
  static_assert(!std::is_void_v<T>,
                "fusegrad::concat: give it at least one value computed from the function's arguments (numbers "
                "alone are a constant output)");
  return concat_expr<decltype(detail::concat_part<T>(p))...>{{}, {detail::concat_part<T>(p)...}};
}

// A range captured by a transformed function and used with its symbols: the sentence below, rather
// than a long list of operators that do not match.
#define FUSEGRAD_CAPTURED_RANGE_OP(OP)                                                                      \
  template <Expr E, detail::captured_range R>                                                               \
  E operator OP(const E& e, const R&) {                                                                     \
    static_assert(detail::dependent_false<R>,                                                               \
                  "fusegrad: a range captured by a transformed function is data: wrap it, fg::data(z), to " \
                  "use it with the function's arguments (no gradient is taken for it), or pass it as an "   \
                  "argument");                                                                              \
    return e;                                                                                               \
  }                                                                                                         \
  template <Expr E, detail::captured_range R>                                                               \
  E operator OP(const R& r, const E& e) {                                                                   \
    return e OP r;                                                                                          \
  }
FUSEGRAD_CAPTURED_RANGE_OP(+)
FUSEGRAD_CAPTURED_RANGE_OP(-)
FUSEGRAD_CAPTURED_RANGE_OP(*)
FUSEGRAD_CAPTURED_RANGE_OP(/)
#undef FUSEGRAD_CAPTURED_RANGE_OP

}  // namespace fusegrad
