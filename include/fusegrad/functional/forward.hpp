#pragma once
/// \file fusegrad/functional/forward.hpp
/// Forward mode and what composes from it: `fg::jvp` (tangents pushed through the same
/// expression, with each op's one rule: functional/../value/dual.hpp), `fg::hvp`
/// (forward over reverse: the gradient evaluated on duals, one pass, no Hessian formed),
/// `fg::hessian` (an `hvp` per direction) and `fg::jacobian` (a `jvp` per input direction),
/// and `fg::vjp` (reverse mode with a given cotangent).

#include <array>
#include <span>
#include <tuple>
#include <vector>

#include "fusegrad/functional/grad.hpp"

namespace fusegrad {

namespace detail::fn {
template <class X>
constexpr auto as_tuple(const X& x) {
  if constexpr (requires { std::tuple_size<X>::value; } && !range_source<X>::value) return x;
  else return std::tuple<const X&>{x};
}
/// How a pullback keeps a primal: scalars and views by value, other ranges by reference.
template <class A>
using kept_t = std::conditional_t<Element<A> || std::ranges::view<A>, A, const A&>;

/// A scalar argument with its tangent, as the dual the scalar form runs on (an argument
/// passed through stays as it is).
template <class V, class A, class Tn>
constexpr auto tangent_of(const A& a, const Tn& t) {
  if constexpr (kind_v<A> == arg_kind::pass) return a;
  else if constexpr (std::is_same_v<Tn, no_tangent>) return dual<V>{arg_value<V>(a), zero_like(arg_value<V>(a))};
  else return dual<V>{arg_value<V>(a), arg_value<V>(t)};
}

/// Argument `K`'s tangent from those of the selected arguments (`argnums` order): its own,
/// or none.
template <std::size_t K, std::size_t... I, class Tn>
constexpr decltype(auto) tangent_for(argnums_t<I...>, const Tn& t) {
  constexpr std::size_t j = [] {
    std::size_t r = sizeof...(I), q = 0;
    ((I == K && r == sizeof...(I) ? r = q : 0, ++q), ...);
    return r;
  }();
  if constexpr (j == sizeof...(I)) return no_tangent{};
  else return (std::get<j>(t));
}
template <std::size_t N, class Nums, class Tn>
constexpr auto full_tangents(Nums nums, const Tn& t) {
  return [&]<std::size_t... K>(std::index_sequence<K...>) {
    return std::tuple<decltype(tangent_for<K>(nums, t))...>{tangent_for<K>(nums, t)...};
  }
  (std::make_index_sequence<N>{});
}

/// vjp's pullback on the scalar form: the gradient of `ybar · f` at `x...` (a tuple when
/// there are several arguments).
template <std::uint64_t All, class T, class F, class Yb, class... A>
auto scalar_pullback(const F& f, const Yb& ybar, const A&... x) {
  return std::apply(
      [](const auto&... g) {
        if constexpr (sizeof...(g) == 1) return (g, ...);
        else return std::tuple{g...};
      },
      scalar_value_and_grad<All>(f, static_cast<T>(ybar), x...).second);
}

/// Points `gout[i]` at the gradient of each range argument `i`: its holder, sized as the range.
template <class T, class H, class... A>
void point_range_gradients(T** gout, H& holders, const A&... x) {
  const std::tuple<const A&...> xs{x...};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          using Ai = std::tuple_element_t<I, std::tuple<A...>>;
          if constexpr (kind_v<Ai> == arg_kind::range)
            gout[I] = out_span<std::remove_cvref_t<decltype(std::get<I>(holders))>, T>(
                          "vjp", std::get<I>(holders), range_source<Ai>::size(std::get<I>(xs)))
                          .data();
        }(),
        ...);
  }
  (std::index_sequence_for<A...>{});
}

/// vjp's pullback of an element-wise output: the cotangent `ybar` (as long as the output)
/// pushed back to the arguments `A...` (ranges: `gout`; scalars: `sadj`).
template <std::uint64_t All, class Vs, class... A, class E, class Slots, class Yb>
void elementwise_pullback(const E& e, const Slots& slots, const Yb& ybar, typename kind<Vs>::elem** gout, Vs* sadj) {
  const index_t m = output_length("vjp", e);
  if (range_source<Yb>::size(ybar) != m)
    detail::fail("vjp", "a cotangent of ", range_source<Yb>::size(ybar), " elements for an output of ", m,
                 "; expected as many as the output");
  index_t gsize[sizeof...(A)] = {};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((gsize[I] =
          [&] {
            if constexpr (kind_v<std::tuple_element_t<I, std::tuple<A...>>> == arg_kind::range)
              return std::get<I>(slots).size;
            else return index_t{0};
          }()),
     ...);
  }
  (std::index_sequence_for<A...>{});
  output_backward<All, Vs>("vjp", e, slots, gout, gsize, sadj, range_source<Yb>::data(ybar));
}

/// vjp's pullback on the span engine: the gradients of `ybar · f` at `x...` (`e`: `f`'s
/// expression there), in holders (a tuple when there are several arguments).
template <class T, class E, class Yb, class... A>
auto span_pullback(const E& e, const Yb& ybar, const A&... x) {
  using Vs = num<T>;
  constexpr std::uint64_t all = (std::uint64_t{1} << sizeof...(A)) - 1;
  const std::tuple slots{make_slot<Vs>(x, no_tangent{})...};
  auto holders = std::tuple{grad_holder<T>(x)...};
  T* gout[sizeof...(A)] = {};
  Vs sadj[sizeof...(A)]{};
  point_range_gradients(gout, holders, x...);
  if constexpr (info<E>::elementwise) elementwise_pullback<all, Vs, A...>(e, slots, ybar, gout, sadj);
  else span_run<true, all, Vs>("vjp", e, slots, lift<Vs>(static_cast<T>(ybar)), gout, sadj, nullptr, nullptr);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          if constexpr (kind_v<std::tuple_element_t<I, std::tuple<A...>>> != arg_kind::range)
            std::get<I>(holders) = sadj[I].v;
        }(),
        ...);
  }
  (std::index_sequence_for<A...>{});
  if constexpr (sizeof...(A) == 1) return std::move(std::get<0>(holders));
  else return holders;
}
}  // namespace detail::fn

/// `{f(primals...), the derivative of f at primals in the direction tangents}` (JAX's
/// `jax.jvp`). `primals` and `tangents`: tuples (or single arguments) of scalars and ranges;
/// a tangent of a range is a range of its length. A scalar output gives two numbers; an
/// element-wise output two vectors (or, with `jvp_into`, writes them).
template <class F, class P, class Tn>
constexpr auto jvp(const F& f, const P& primals, const Tn& tangents) {
  using namespace detail::fn;
  return std::apply(
      [&](const auto&... a) {
        return std::apply(
            [&](const auto&... t) {
              static_assert(sizeof...(a) == sizeof...(t), "fusegrad::jvp: give one tangent per primal");
              using T = elem_t<std::remove_cvref_t<decltype(a)>...>;
              if constexpr (!span_form<F, std::remove_cvref_t<decltype(a)>...>()) {
                using V = typename decltype(value_kind<T, std::remove_cvref_t<decltype(a)>...>())::type;
                auto y = scalar_value_and_grad<0>(f, T(1), tangent_of<V>(a, t)...).first;
                return std::pair{unwrap(y.p), unwrap(y.t)};
              } else {
                using Vs = dual<num<T>>;
                const auto e = expression<T>(f, a...);
                const std::tuple slots{make_slot<Vs>(a, t)...};
                if constexpr (!info<std::remove_cvref_t<decltype(e)>>::elementwise) {
                  const Vs y = span_run<false, 0, Vs>("jvp", e, slots, Vs{}, nullptr, nullptr, nullptr, nullptr);
                  return std::pair{y.p.v, y.t.v};
                } else {
                  const index_t n = output_length("jvp", e);
                  std::pair<std::vector<T>, std::vector<T>> r{std::vector<T>(static_cast<std::size_t>(n)),
                                                              std::vector<T>(static_cast<std::size_t>(n))};
                  T* y[2] = {r.first.data(), r.second.data()};
                  output_forward<Vs>("jvp", e, slots, y);
                  return r;
                }
              }
            },
            as_tuple(tangents));
      },
      as_tuple(primals));
}

/// `fg::jvp` with tangents for the arguments in `argnums` only (`tangents`: one per selected
/// argument, in `argnums` order); the others are data: no tangent, none given (a range of
/// observations needs no zero vector of its length).
template <class F, std::size_t... I, class P, class Tn>
constexpr auto jvp(const F& f, argnums_t<I...> nums, const P& primals, const Tn& tangents) {
  using namespace detail::fn;
  using Pt = std::remove_cvref_t<decltype(as_tuple(primals))>;
  using Tt = std::remove_cvref_t<decltype(as_tuple(tangents))>;
  static_assert(std::tuple_size_v<Tt> == sizeof...(I), "fusegrad::jvp: give one tangent per argument in argnums");
  return [&]<std::size_t... K>(std::index_sequence<K...>) {
    if constexpr (!check_selected<argnums_t<I...>::mask, std::remove_cvref_t<std::tuple_element_t<K, Pt>>...>())
      return;  // (its static_assert says why)
    else return jvp(f, primals, full_tangents<sizeof...(K)>(nums, as_tuple(tangents)));
  }
  (std::make_index_sequence<std::tuple_size_v<Pt>>{});
}

/// `{f(primals...), pullback}` (JAX's `jax.vjp`): `pullback(ybar)` is the gradient of
/// `ybar · f` with respect to every argument (a tuple when there are several); `ybar` is a
/// number for a scalar output, a range for an element-wise one. The pullback holds the
/// primals (scalars and views by value, other ranges by reference: they must outlive it) and recomputes the forward
/// values it needs; nothing is saved.
template <class F, class... A>
auto vjp(const F& f, const A&... a) {
  using namespace detail::fn;
  using T = elem_t<A...>;
  using Vs = num<T>;
  constexpr std::uint64_t all = (std::uint64_t{1} << sizeof...(A)) - 1;
  const auto e = expression<T>(f, a...);
  using E = std::remove_cvref_t<decltype(e)>;
  auto pullback = [f, args = std::tuple<kept_t<A>...>(a...)](const auto& ybar) {
    return std::apply(
        [&](const auto&... x) {
          const auto e = expression<T>(f, x...);
          if constexpr (!span_form<F, A...>()) return scalar_pullback<all, T>(f, ybar, x...);
          else return span_pullback<T>(e, ybar, x...);
        },
        args);
  };
  if constexpr (!span_form<F, A...>()) {
    return std::pair{scalar_value_and_grad<0>(f, T(1), a...).first, pullback};
  } else {
    const std::tuple slots{make_slot<Vs>(a, no_tangent{})...};
    if constexpr (!info<E>::elementwise) {
      return std::pair{span_run<false, 0, Vs>("vjp", e, slots, Vs{}, nullptr, nullptr, nullptr, nullptr).v, pullback};
    } else {
      std::vector<T> y(static_cast<std::size_t>(output_length("vjp", e)));
      T* yo[1] = {y.data()};
      output_forward<Vs>("vjp", e, slots, yo);
      return std::pair{std::move(y), pullback};
    }
  }
}

/// The Hessian of `f` (a function of one scalar or range, and of arguments passed through)
/// times `v`, without forming the Hessian: the gradient evaluated on duals (forward over
/// reverse), one pass.
template <class F>
struct hvp_fn {
  F f;
  /// `H(x) v`: a number for a scalar `x`; for a range, an array or vector.
  template <class X, class Vt, class... R>
  constexpr auto operator()(const X& x, const Vt& v, const R&... rest) const {
    using namespace detail::fn;
    using T = elem_t<X, R...>;
    if constexpr (!span_form<F, X, R...>()) {
      using V = typename decltype(value_kind<T, X, R...>())::type;
      const auto g = scalar_value_and_grad<1>(f, T(1), dual<V>{arg_value<V>(x), arg_value<V>(v)}, rest...).second;
      return unwrap(std::get<0>(g).t);
    } else if constexpr (kind_v<X> != arg_kind::range) {
      return run(x, v, nullptr, rest...);
    } else {
      auto out = grad_holder<T>(x);
      into(out)(x, v, rest...);
      return out;
    }
  }
  /// Writes `H(x) v` to `out` (a `std::span<T>`-like range of x's length); allocates nothing.
  template <class O>
  auto into(O&& out) const {
    return [self = *this, out = std::tuple<O>(std::forward<O>(out))](const auto& x, const auto& v,
                                                                     const auto&... rest) mutable {
      using namespace detail::fn;
      using X = std::remove_cvref_t<decltype(x)>;
      using T = elem_t<X, std::remove_cvref_t<decltype(rest)>...>;
      self.run(x, v, out_span<std::remove_cvref_t<O>, T>("hvp", std::get<0>(out), range_source<X>::size(x)).data(),
               rest...);
    };
  }

 private:
  /// The span engine on duals: `H(x) v` to `hv` for a range `x`, returned for a scalar one.
  template <class X, class Vt, class... R>
  auto run(const X& x, const Vt& v, detail::fn::elem_t<X, R...>* hv, const R&... rest) const {
    using namespace detail::fn;
    using T = elem_t<X, R...>;
    using Vs = dual<num<T>>;
    const auto e = expression<T>(f, x, rest...);
    static_assert(!info<std::remove_cvref_t<decltype(e)>>::elementwise,
                  "fusegrad::hvp: the function must return one scalar (reduce an element-wise result with "
                  "fg::sum or fg::mean)");
    const std::tuple slots{make_slot<Vs>(x, v, "hvp"), make_slot<Vs>(rest, no_tangent{})...};
    constexpr std::size_t NA = 1 + sizeof...(rest);
    T* gout[NA * 2] = {};
    gout[1] = hv;
    Vs sadj[NA]{};
    span_run<true, 1, Vs>("hvp", e, slots, lift<Vs>(T(1)), gout, sadj, nullptr, nullptr);
    return sadj[0].t.v;
  }
};
template <class F>
constexpr hvp_fn<F> hvp(F f) {
  return {f};
}

/// The Hessian of `f`, a function of one scalar or range (and of arguments passed through):
/// a number, or for a range of n elements an n x n matrix (row-major: `std::array` of rows
/// for a `std::array`, a vector of n * n otherwise), one `hvp` per row.
template <class F>
struct hessian_fn {
  F f;
  template <class X, class... R>
  constexpr auto operator()(const X& x, const R&... rest) const {
    using namespace detail::fn;
    using T = elem_t<X, R...>;
    if constexpr (kind_v<X> != arg_kind::range) {
      return hvp_fn<F>{f}(x, T(1), rest...);
    } else if constexpr (requires { std::tuple_size<X>::value; }) {
      constexpr std::size_t N = std::tuple_size_v<X>;
      std::array<std::array<T, N>, N> h{};
      std::array<T, N> dir{};
      for (std::size_t i = 0; i < N; ++i) {
        dir[i] = T(1);
        hvp_fn<F>{f}.into(h[i])(x, dir, rest...);
        dir[i] = T(0);
      }
      return h;
    } else {
      const auto n = static_cast<std::size_t>(range_source<X>::size(x));
      std::vector<T> h(n * n);
      into(h)(x, rest...);
      return h;
    }
  }
  /// Writes the n x n Hessian (row-major) to `out`; allocates a direction of n elements.
  template <class O>
  auto into(O&& out) const {
    return [f = f, out = std::tuple<O>(std::forward<O>(out))](const auto& x, const auto&... rest) mutable {
      using namespace detail::fn;
      using X = std::remove_cvref_t<decltype(x)>;
      using T = elem_t<X, std::remove_cvref_t<decltype(rest)>...>;
      const index_t n = range_source<X>::size(x);
      std::span<T> o = out_span<std::remove_cvref_t<O>, T>("hessian", std::get<0>(out), n * n);
      std::vector<T> dir(static_cast<std::size_t>(n));
      for (index_t i = 0; i < n; ++i) {
        dir[static_cast<std::size_t>(i)] = T(1);
        std::span<T> row = o.subspan(static_cast<std::size_t>(i * n), static_cast<std::size_t>(n));
        hvp_fn<F>{f}.into(row)(x, dir, rest...);
        dir[static_cast<std::size_t>(i)] = T(0);
      }
    };
  }
};
template <class F>
constexpr hessian_fn<F> hessian(F f) {
  return {f};
}

/// The Jacobian of `f`, a function of one range `x` (and of arguments passed through) with an
/// element-wise output of m elements or a scalar one (m = 1): an m x n matrix, row-major (a
/// vector), one `jvp` per column.
template <class F>
struct jacobian_fn {
  F f;
  template <class X, class... R>
  auto operator()(const X& x, const R&... rest) const {
    using namespace detail::fn;
    using T = elem_t<X, R...>;
    const index_t n = range_source<X>::size(x);
    std::vector<T> dir(static_cast<std::size_t>(n)), jac;
    index_t m = -1;
    for (index_t j = 0; j < n; ++j) {
      dir[static_cast<std::size_t>(j)] = T(1);
      const auto col = jvp(f, std::tuple<const X&, const R&...>(x, rest...),
                           std::tuple<const std::vector<T>&, decltype((void)sizeof(R), no_tangent{})...>(
                               dir, ((void)rest, no_tangent{})...))
                           .second;
      dir[static_cast<std::size_t>(j)] = T(0);
      if constexpr (requires { col.size(); }) {
        if (m < 0) m = static_cast<index_t>(col.size()), jac.resize(static_cast<std::size_t>(m * n));
        for (index_t i = 0; i < m; ++i) jac[static_cast<std::size_t>(i * n + j)] = col[static_cast<std::size_t>(i)];
      } else {
        if (m < 0) m = 1, jac.resize(static_cast<std::size_t>(n));
        jac[static_cast<std::size_t>(j)] = col;
      }
    }
    return jac;
  }
};
template <class F>
constexpr jacobian_fn<F> jacobian(F f) {
  return {f};
}

}  // namespace fusegrad
