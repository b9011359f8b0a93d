#pragma once
/// \file fusegrad/functional/grad.hpp
/// `fg::grad`, `fg::value_and_grad` (JAX's names and `argnums`), reverse mode.
///
/// \code
/// auto f = [](auto x, auto y) { return fg::sum(fg::cos(fg::cos(x)) * y); };
/// auto [v, gx] = fg::value_and_grad(f)(x, y);            // x, y: std::array / std::span / vector
/// double v = fg::value_and_grad(f, fg::argnums<0, 1>).into(gx, gy)(x, y);  // writes gx, gy
/// static_assert(fg::grad([](auto x) { return x * x * x; })(2.0) == 12.0);
/// \endcode
///
/// The function is written once, generically, with fusegrad's ops; the transform calls it on
/// symbols and evaluates the expression it returns, forward and backward, with each op's own
/// derivative rule (functional/eval.hpp). With scalar arguments that is straight-line code
/// (`constexpr` where the ops are); with ranges, one loop over the elements
/// (functional/engine.hpp). A transform's result can be transformed again: `fg::grad(fg::grad(f))`.

#include <array>
#include <span>
#include <utility>
#include <vector>

#include "fusegrad/functional/span_call.hpp"

namespace fusegrad {

namespace detail::fn {

template <std::size_t... I>
constexpr std::uint64_t mask_of(argnums_t<I...>) {
  return argnums_t<I...>::mask;
}
/// One entry per selected argument, in `argnums` order: the entry itself if one.
template <std::size_t... I, class Tuple>
constexpr auto pick(argnums_t<I...>, Tuple&& t) {
  if constexpr (sizeof...(I) == 1) return std::get<I...>(std::forward<Tuple>(t));
  else return std::tuple{std::get<I>(std::forward<Tuple>(t))...};
}

template <class O, class T>
std::span<T> out_span(std::string_view op, O& o, index_t size) {
  std::span<T> s = [&] {
    if constexpr (requires { std::span<T>(o); }) return std::span<T>(o);
    else
      return std::span<T>(const_cast<T*>(range_source<O>::data(o)), static_cast<std::size_t>(range_source<O>::size(o)));
  }();
  if (static_cast<index_t>(s.size()) != size)
    fail(op, "an output of ", s.size(), " elements for an argument of ", size, "; expected as many as the argument");
  return s;
}

/// A gradient the transform returns for argument `a`: `std::array` for a `std::array`, a
/// tensor for a tensor, a vector for other ranges, a number for a scalar.
template <class T, class A>
auto grad_holder(const A& a) {
  if constexpr (kind_v<A> != arg_kind::range) return T{};
  else if constexpr (requires { range_source<A>::make_like(a); }) return range_source<A>::make_like(a);
  else if constexpr (requires { std::tuple_size<A>::value; }) return std::array<T, std::tuple_size_v<A>>{};
  else return std::vector<T>(static_cast<std::size_t>(range_source<A>::size(a)));
}

/// Value and gradients, written to `outs` (one per selected argument: a range's gradient to a
/// `std::span<T>`-like output, a scalar's to a `T&`).
template <std::size_t... I, class F, class Outs, class... A>
auto value_and_grad_into(argnums_t<I...> nums, std::string_view op, const F& f, Outs& outs, const A&... a) {
  constexpr std::uint64_t mask = mask_of(nums);
  static_assert(check_selected<mask, A...>());  // (callers checked first; this one for its own use)
  using T = elem_t<A...>;
  using Vs = num<T>;
  constexpr std::size_t NA = sizeof...(A);
  const auto e = expression<T>(f, a...);
  static_assert(!info<std::remove_cvref_t<decltype(e)>>::elementwise,
                "fusegrad::grad: the function must return one scalar (reduce an element-wise result with "
                "fg::sum or fg::mean); for an element-wise result use fg::vjp or fg::jacobian");
  const std::tuple slots{make_slot<Vs>(a, no_tangent{})...};
  T* gout[NA] = {};
  Vs sadj[NA]{};
  const std::tuple<const A&...> args{a...};
  constexpr std::size_t sel[] = {I...};
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (
        [&] {
          constexpr std::size_t i = sel[J];
          using Ai = std::remove_cvref_t<std::tuple_element_t<i, std::tuple<A...>>>;
          if constexpr (kind_v<Ai> == arg_kind::range)
            gout[i] = out_span<std::remove_cvref_t<std::tuple_element_t<J, Outs>>, T>(
                          op, std::get<J>(outs), range_source<Ai>::size(std::get<i>(args)))
                          .data();
        }(),
        ...);
  }
  (std::make_index_sequence<sizeof...(I)>{});
  const T y = span_run<true, mask, Vs>(op, e, slots, lift<Vs>(T(1)), gout, sadj, nullptr, nullptr).v;
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (
        [&] {
          constexpr std::size_t i = sel[J];
          if constexpr (kind_v<std::tuple_element_t<i, std::tuple<A...>>> != arg_kind::range)
            std::get<J>(outs) = sadj[i].v;
        }(),
        ...);
  }
  (std::make_index_sequence<sizeof...(I)>{});
  return y;
}

}  // namespace detail::fn

/// `f`'s value and its gradient with respect to the arguments `Nums` (default: the first).
template <class F, class Nums>
struct value_and_grad_fn {
  F f;

  /// `{value, gradient}` (a tuple of gradients when several arguments are selected).
  template <class... A>
  [[gnu::always_inline]] constexpr auto operator()(const A&... a) const {
    using namespace detail::fn;
    constexpr std::uint64_t mask = mask_of(Nums{});
    if constexpr (!check_selected<mask, A...>()) return;  // (its static_assert says why)
    else if constexpr (!span_form<F, A...>()) {
      auto [v, g] = scalar_value_and_grad<mask>(f, elem_t<A...>(1), a...);
      return std::pair{v, pick(Nums{}, g)};
    } else {
      using T = elem_t<A...>;
      auto holders = std::tuple{grad_holder<T>(a)...};
      auto outs = [&]<std::size_t... I>(argnums_t<I...>) { return std::tie(std::get<I>(holders)...); }
      (Nums{});
      const T v = value_and_grad_into(Nums{}, "value_and_grad", f, outs, a...);
      return std::pair{v, pick(Nums{}, std::move(holders))};
    }
  }

  /// The same call, writing the gradients to `outs` (one per selected argument, in `argnums`
  /// order: `std::span<T>` for a range, `T&` for a scalar) and returning the value. Nothing
  /// is allocated.
  template <class... O>
  constexpr auto into(O&&... outs) const {
    return [f = f, outs = std::tuple<O...>(std::forward<O>(outs)...)](const auto&... a) mutable {
      using namespace detail::fn;
      constexpr std::uint64_t mask = mask_of(Nums{});
      if constexpr (!check_selected<mask, std::remove_cvref_t<decltype(a)>...>())
        return;  // (its static_assert says why)
      else if constexpr (!span_form<F, std::remove_cvref_t<decltype(a)>...>()) {
        const auto r = scalar_value_and_grad<mask>(f, elem_t<decltype(a)...>(1), a...);
        [&]<std::size_t... I>(argnums_t<I...>) {
          [&]<std::size_t... J>(std::index_sequence<J...>) { ((std::get<J>(outs) = std::get<I>(r.second)), ...); }
          (std::index_sequence_for<decltype(I)...>{});
        }
        (Nums{});
        return r.first;
      } else {
        return value_and_grad_into(Nums{}, "value_and_grad", f, outs, a...);
      }
    };
  }
};

/// `f`'s gradient with respect to the arguments `Nums` (default: the first).
template <class F, class Nums>
struct grad_fn {
  F f;
  template <class... A>
  [[gnu::always_inline]] constexpr auto operator()(const A&... a) const {
    return value_and_grad_fn<F, Nums>{f}(a...).second;
  }
  /// Writes the gradients to `outs` (see `value_and_grad_fn::into`).
  template <class... O>
  constexpr auto into(O&&... outs) const {
    return [inner = value_and_grad_fn<F, Nums>{f}.into(std::forward<O>(outs)...)](const auto&... a) mutable {
      (void)inner(a...);
    };
  }
};

/// `f`'s value and gradient, as a function of `f`'s arguments (JAX's `jax.value_and_grad`).
template <class F, std::size_t... I>
constexpr value_and_grad_fn<F, argnums_t<I...>> value_and_grad(F f, argnums_t<I...>) {
  return {f};
}
template <class F>
constexpr value_and_grad_fn<F, argnums_t<0>> value_and_grad(F f) {
  return {f};
}
/// `f`'s gradient, as a function of `f`'s arguments (JAX's `jax.grad`).
template <class F, std::size_t... I>
constexpr grad_fn<F, argnums_t<I...>> grad(F f, argnums_t<I...>) {
  return {f};
}
template <class F>
constexpr grad_fn<F, argnums_t<0>> grad(F f) {
  return {f};
}

}  // namespace fusegrad
