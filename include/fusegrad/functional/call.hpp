#pragma once
/// \file fusegrad/functional/call.hpp
/// One evaluation of a transformed function: its arguments sorted into kinds (scalars,
/// ranges, values of an enclosing transform, arguments passed through), the symbols it is
/// called with, and the two ways its expression runs: the scalar form (every argument a
/// scalar: `fwd`/`back` on values, nothing else; `constexpr`) and the span engine
/// (functional/engine.hpp) as soon as one argument is a range.

#include <array>
#include <cstdint>
#include <ranges>
#include <span>
#include <tuple>
#include <type_traits>
#include <vector>

#include "fusegrad/functional/engine.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad {

/// Where a transform reads a range argument's elements: contiguous ranges of `float` or
/// `double` (`std::array`, `std::span`, `std::vector`, ...); other layers add their types
/// (tensors: functional/tensor.hpp).
template <class A>
struct range_source {
  static constexpr bool value = false;
};
template <class A>
requires std::ranges::contiguous_range<const A&> && std::ranges::sized_range<const A&> &&
    Element<std::remove_cv_t<std::ranges::range_value_t<const A&>>>
struct range_source<A> {
  static constexpr bool value = true;
  using element_type = std::remove_cv_t<std::ranges::range_value_t<const A&>>;
  static const element_type* data(const A& a) { return std::ranges::data(a); }
  static index_t size(const A& a) { return static_cast<index_t>(std::ranges::size(a)); }
};

/// Which arguments a transform differentiates (JAX's `argnums`): `fg::argnums<0, 2>`.
template <std::size_t... I>
struct argnums_t {
  static constexpr std::uint64_t mask = (std::uint64_t{0} | ... | (std::uint64_t{1} << I));
};
template <std::size_t... I>
inline constexpr argnums_t<I...> argnums{};

/// A range as data inside a transformed function (`fg::data(draws)`): it enters the
/// expression element-wise, as a range argument does, and is not differentiated (no gradient,
/// no tangent). Use it on a range the function captures (Monte Carlo draws, observations), or
/// pass it as an argument. It holds a pointer to the elements: the range must outlive the
/// transform's call.
template <class R>
requires range_source<std::remove_cvref_t<R>>::value auto data(R&& r) {
  static_assert(std::is_lvalue_reference_v<R> || std::ranges::borrowed_range<R>,
                "fusegrad::data: the range is a temporary and would dangle; name it first (fg::data holds a "
                "pointer to its elements)");
  using S = range_source<std::remove_cvref_t<R>>;
  return data_arg<typename S::element_type>{{}, S::data(r), 0, S::size(r)};
}

namespace detail::fn {

enum class arg_kind { pass, scalar, value, range };
template <class A>
constexpr arg_kind kind_of() {
  if constexpr (Element<A>) return arg_kind::scalar;
  else if constexpr (is_data_v<A>) return arg_kind::pass;  // `fg::data(z)` as an argument: handed on
  else if constexpr (range_source<A>::value) return arg_kind::range;
  else if constexpr (Operand<A>) return arg_kind::value;
  else return arg_kind::pass;
}
template <class A>
inline constexpr arg_kind kind_v = kind_of<std::remove_cvref_t<A>>();

template <class A>
constexpr auto elem_of() {
  using D = std::remove_cvref_t<A>;
  if constexpr (kind_v<D> == arg_kind::scalar) return std::type_identity<D>{};
  else if constexpr (kind_v<D> == arg_kind::range) return std::type_identity<typename range_source<D>::element_type>{};
  else if constexpr (kind_v<D> == arg_kind::value) return std::type_identity<element_of<D>>{};
  else return std::type_identity<void>{};
}
/// The element type the arguments share (`void` if none is differentiable).
template <class... A>
constexpr auto common_elem() {
  using L = std::tuple<typename decltype(elem_of<A>())::type...>;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    using First = decltype([] {
      if constexpr (((!std::is_void_v<std::tuple_element_t<I, L>>) || ...)) {
        constexpr std::size_t k = [] {
          std::size_t r = 0;
          ((std::is_void_v<std::tuple_element_t<I, L>> && r == I ? ++r : r), ...);
          return r;
        }();
        return std::type_identity<std::tuple_element_t<k, L>>{};
      } else return std::type_identity<void>{};
    }());
    using T = typename First::type;
    static_assert(((std::is_void_v<std::tuple_element_t<I, L>> || std::is_same_v<std::tuple_element_t<I, L>, T>)&&...),
                  "fusegrad: the arguments of a transformed function must share one element type (all float "
                  "or all double); convert one of them first");
    return std::type_identity<T>{};
  }
  (std::index_sequence_for<A...>{});
}
template <class... A>
using elem_t = typename decltype(common_elem<A...>())::type;

template <class... A>
inline constexpr bool any_range = ((kind_v<A> == arg_kind::range) || ...);

/// Whether every argument in `Mask` exists and can be differentiated; when not, its
/// `static_assert` says why. A caller writes `if constexpr (!check_selected<M, A...>()) return;
/// else ...`: evaluating it as a constant instantiates it at once, so its sentence is the first
/// error, and the discarded branch instantiates nothing that would add errors of its own
/// (`std::get` of a missing argument).
template <std::uint64_t Mask, class... A>
constexpr bool check_selected() {
  constexpr bool in_range = Mask >> sizeof...(A) == 0;
  static_assert(in_range,
                "fusegrad: argnums names an argument the function is not called with (argument numbers "
                "count from 0)");
  constexpr bool differentiable = []<std::size_t... I>(std::index_sequence<I...>) {
    return ((!(Mask & (std::uint64_t{1} << I)) || kind_v<A> != arg_kind::pass) && ...);
  }
  (std::index_sequence_for<A...>{});
  static_assert(!in_range || differentiable,
                "fusegrad: argnums selects an argument that cannot be differentiated: only float and "
                "double scalars, contiguous ranges of them (std::array, std::span, std::vector), "
                "fg::tensor and values of an enclosing transform can be");
  return in_range && differentiable;
}

/// The symbol argument `I` stands for in the function's expression.
template <std::size_t I, class T, class A>
constexpr decltype(auto) symbol(const A& a) {
  if constexpr (kind_v<A> == arg_kind::scalar || kind_v<A> == arg_kind::value) return scalar_arg<I, T>{};
  else if constexpr (kind_v<A> == arg_kind::range) return span_arg<I, T>{0, range_source<A>::size(a)};
  else return (a);
}
/// The function's expression, called on the symbols.
template <class T, class F, class... A>
constexpr auto expression(const F& f, const A&... a) {
  auto e = [&]<std::size_t... I>(std::index_sequence<I...>) { return f(symbol<I, T>(a)...); }
  (std::index_sequence_for<A...>{});
  if constexpr (Element<decltype(e)>) return constant_arg<T>{{}, e};  // it does not depend on its arguments
  else {
    static_assert(Expr<decltype(e)>,
                  "fusegrad: a transformed function must return a value computed with fusegrad's ops from "
                  "its arguments (one scalar, or one element-wise value over its range arguments)");
    return e;
  }
}

/// Whether `f` on `a...` runs on the span engine: with a range argument, and also with scalar
/// arguments only when its expression reads data (`fg::data`) or is an output built by
/// `fg::concat`.
template <class F, class... A>
constexpr bool span_form() {
  if constexpr (any_range<A...>) return true;
  else if constexpr (std::is_void_v<elem_t<A...>>) return false;
  else {
    using E = decltype(expression<elem_t<A...>>(std::declval<const F&>(), std::declval<const A&>()...));
    return reads_data<E>() || is_concat_v<E>;
  }
}

// ---- the scalar form ----------------------------------------------------------------------

/// The values of the scalar form's arguments (`V`: their kind).
template <class V, class Vals>
struct scalar_ctx {
  static constexpr bool hoisting = false;
  const Vals& vals;
  template <std::size_t I, class T>
  constexpr decltype(auto) leaf(const scalar_arg<I, T>&) const {
    return std::get<I>(vals);
  }
  template <Element T>
  constexpr auto constant(T x) const {
    return lift<V>(x);
  }
};

/// Adjoints of the scalar form, as a tuple whose types may grow (expressions).
template <std::uint64_t Mask, class Adj>
struct tuple_sink {
  static constexpr std::uint64_t mask = Mask;
  static constexpr bool reductions = false, hoisting = false;
  Adj adj;
  template <std::size_t I, class T, class G>
  constexpr auto leaf(const scalar_arg<I, T>&, const G& g) const {
    auto next = [&]<std::size_t... K>(std::index_sequence<K...>) {
      return std::tuple{[&]() -> decltype(auto) {
        if constexpr (K == I) return add_adjoint(std::get<K>(adj), g);
        else return std::get<K>(adj);
      }()...};
    }
    (std::make_index_sequence<std::tuple_size_v<Adj>>{});
    return tuple_sink<Mask, decltype(next)>{next};
  }
};

/// Adjoints of the scalar form kept in place, for values closed under `+` (numbers, duals):
/// nothing is copied as the backward walks. (GCC copied `tuple_sink`'s tuples as 16-byte
/// blocks and read their halves back, or built them from two 8-byte stores and read them as
/// one: store-forwarding stalls that made the 2-D Rosenbrock gradient at -O2 many times
/// slower than by hand.) `has[i]`: argument `i` has had a contribution (`add_adjoint_to`).
template <std::uint64_t Mask, class V>
struct array_sink {
  static constexpr std::uint64_t mask = Mask;
  static constexpr bool reductions = false, hoisting = false;
  V* adj;
  bool* has;
  template <std::size_t I, class T, class G>
  constexpr array_sink leaf(const scalar_arg<I, T>&, const G& g) const {
    if constexpr (!std::is_same_v<G, zero_t>) add_adjoint_to(adj[I], has[I], g);
    return *this;
  }
};
template <class V>
inline constexpr bool in_place_adjoints_v = false;
template <class X>
inline constexpr bool in_place_adjoints_v<num<X>> = true;
template <class X>
inline constexpr bool in_place_adjoints_v<dual<X>> = in_place_adjoints_v<X>;

/// The kind of value the scalar form computes with: that of the first argument of an
/// enclosing transform, else `num<T>`.
template <class T, class... A>
constexpr auto value_kind() {
  using L = std::tuple<std::remove_cvref_t<A>...>;
  constexpr std::size_t k = [] {
    std::size_t i = 0, r = sizeof...(A);
    ((kind_v<A> == arg_kind::value && r == sizeof...(A) ? (r = i, ++i) : ++i), ...);
    return r;
  }();
  if constexpr (k == sizeof...(A)) return std::type_identity<num<T>>{};
  else return std::type_identity<std::tuple_element_t<k, L>>{};
}

template <class V, class A>
constexpr auto arg_value(const A& a) {
  if constexpr (kind_v<A> == arg_kind::scalar) return lift<V>(a);
  else if constexpr (kind_v<A> == arg_kind::value) return a;
  else return pass_slot{};
}
/// A value of kind `V` as the user sees it: a number for `num<T>`.
template <class V>
constexpr auto unwrap(const V& v) {
  if constexpr (requires { v.v; }) return v.v;
  else return v;
}

/// `f`'s value and its adjoints (seeded with `seed`) for the arguments in `Mask`, in the
/// scalar form: a pair of the value and a tuple with one entry per selected argument.
template <std::uint64_t Mask, class F, class Seed, class... A>
[[gnu::always_inline]] constexpr auto scalar_value_and_grad(const F& f, const Seed& seed, const A&... a) {
  using T = elem_t<A...>;
  using V = typename decltype(value_kind<T, A...>())::type;
  const auto e = expression<T>(f, a...);
  const std::tuple vals{arg_value<V>(a)...};
  const scalar_ctx<V, decltype(vals)> c{vals};
  const auto v = fwd<0>(c, e);
  if constexpr (in_place_adjoints_v<V>) {
    V adj[sizeof...(A)]{};
    bool has[sizeof...(A)]{};
    (void)back<0>(array_sink<Mask, V>{adj, has}, e, v, lift<V>(seed));
    auto grads = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple{unwrap(has[I] ? adj[I] : lift<V>(T(0)))...};
    }
    (std::index_sequence_for<A...>{});
    return std::pair{unwrap(v.y), grads};
  }
  std::tuple<decltype((void)sizeof(A), zero_t{})...> none{};
  const auto s = back<0>(tuple_sink<Mask, decltype(none)>{none}, e, v, lift<V>(seed));
  auto grads = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple{[&] {
      if constexpr (std::is_same_v<std::tuple_element_t<I, decltype(s.adj)>, zero_t>) return unwrap(lift<V>(T(0)));
      else return unwrap(std::get<I>(s.adj));
    }()...};
  }
  (std::index_sequence_for<A...>{});
  return std::pair{unwrap(v.y), grads};
}

}  // namespace detail::fn
}  // namespace fusegrad
