#pragma once
/// \file fusegrad/eager/function.hpp
/// Custom differentiable ops, the counterpart of `torch.autograd.Function`.
///
/// A custom op is a struct of static templates, written once over any algebra of values:
/// \code
/// struct cosine {
///   static constexpr std::string_view name = "CosineBackward";
///   static auto forward(const auto& x) { return fg::cos(x); }
///   static auto setup_context(const auto& x, const auto& /*out*/) { return fg::save_for_backward(x); }
///   static auto backward(const auto& saved, const auto& grad) {
///     const auto& [x] = saved;
///     return -fg::sin(x) * grad;
///   }
/// };
/// auto y = fg::function<cosine>::apply(x);
/// \endcode
/// `forward` computes the output from the inputs (its inner ops are not recorded);
/// `setup_context(inputs..., output)` returns what backward needs (optional: all inputs are
/// saved when it is absent); `backward(saved, grad)` returns one gradient per input (a single
/// value, or a `std::tuple` of them; an undefined tensor means "no gradient").

#include <tuple>
#include <utility>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/expr/expr.hpp"

namespace fusegrad {

/// Packs the values `backward` will need; returns them as a tuple (structured bindings work).
template <class... Vs>
auto save_for_backward(const Vs&... vs) {
  return std::tuple<Vs...>(vs...);
}

/// What a custom differentiable op must provide (see fusegrad/eager/function.hpp).
template <class F>
concept CustomFunction = requires {
  { F::name } -> std::convertible_to<std::string_view>;
};

namespace detail {
template <class X>
inline constexpr bool is_tuple_v = false;
template <class... Xs>
inline constexpr bool is_tuple_v<std::tuple<Xs...>> = true;

template <Element T, class Tuple, std::size_t... I>
Tuple tuple_from(const std::vector<tensor<T>>& v, std::index_sequence<I...>) {
  return Tuple(v[I]...);
}
}  // namespace detail

template <CustomFunction F>
struct function {
  /// Inside `fg::compile`: an expression whose value is `F::forward(args...)` (fused like any
  /// other op) and whose derivative is `F::backward`.
  template <class X0, class... Xs>
    requires(!Tensor<X0>) && requires(const X0& x0, const Xs&... xs) { F::forward(x0, xs...); }
  static constexpr auto apply(const X0& x0, const Xs&... xs) {
    auto y = F::forward(x0, xs...);
    return custom_expr<F, decltype(y), X0, Xs...>{{}, {x0, xs...}, y};
  }

  /// Runs `F::forward` on eager tensors and records one node named `F::name`.
  template <Element T, std::same_as<tensor<T>>... Rest>
  static tensor<T> apply(const tensor<T>& first, const Rest&... rest) {
    static_assert(requires { F::forward(first, rest...); },
                  "fusegrad::function<F>::apply: F needs a static forward(inputs...) callable with "
                  "these tensors");
    tensor<T> out;
    {
      no_grad guard;
      auto r = F::forward(first, rest...);
      static_assert(std::is_convertible_v<decltype(r), tensor<T>>,
                    "fusegrad::function<F>: forward must return one tensor of the inputs' element type");
      out = tensor<T>(r);
      if (out.is_same(first) || (out.is_same(rest) || ...)) out = out.detach();
    }
    if (!detail::needs_grad(first, rest...)) return out;
    auto saved = [&] {
      if constexpr (requires { F::setup_context(first, rest..., out); }) return F::setup_context(first, rest..., out);
      else return save_for_backward(first, rest...);
    }();
    using saved_t = decltype(saved);
    static_assert(detail::is_tuple_v<saved_t>,
                  "fusegrad::function<F>: setup_context must return fusegrad::save_for_backward(...)");
    std::vector<tensor<T>> saved_vec = std::apply(
        [](const auto&... s) {
          static_assert((std::same_as<std::remove_cvref_t<decltype(s)>, tensor<T>> && ...),
                        "fusegrad::function<F>: save_for_backward takes tensors only; keep other "
                        "values as constants in F");
          return std::vector<tensor<T>>{s...};
        },
        saved);
    constexpr std::size_t n_in = 1 + sizeof...(Rest);
    detail::record<T>(F::name, {first, rest...}, {&out}, std::move(saved_vec),
                      [](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
                        auto st = detail::tuple_from<T, saved_t>(s, std::make_index_sequence<std::tuple_size_v<saved_t>>{});
                        auto r = F::backward(std::as_const(st), std::as_const(g[0]));
                        std::vector<tensor<T>> grads;
                        if constexpr (detail::is_tuple_v<decltype(r)>) {
                          static_assert(std::tuple_size_v<decltype(r)> == n_in,
                                        "fusegrad::function<F>: backward must return one gradient per input");
                          std::apply([&](const auto&... x) { (grads.push_back(tensor<T>(x)), ...); }, r);
                        } else {
                          static_assert(n_in == 1,
                                        "fusegrad::function<F>: backward of an op with several inputs must "
                                        "return a std::tuple with one gradient per input");
                          grads.push_back(tensor<T>(r));
                        }
                        return grads;
                      });
    return out;
  }
};

}  // namespace fusegrad
