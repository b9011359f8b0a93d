#pragma once
/// \file fusegrad/eager/function.hpp
/// Custom differentiable ops (fusegrad/ops/function.hpp) on eager tensors: `F::forward` runs
/// without recording, and one tape node named `F::name` runs `F::backward`.

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/ops/function.hpp"

namespace fusegrad {

namespace detail {
template <Element T, class Tuple, std::size_t... I>
Tuple tuple_from(const std::vector<tensor<T>>& v, std::index_sequence<I...>) {
  return Tuple(v[I]...);
}
}  // namespace detail

/// Runs `F::forward` on eager tensors and records one node named `F::name`.
template <CustomFunction F, Element T, std::same_as<tensor<T>>... Rest>
tensor<T> apply_function(function_tag<F>, const tensor<T>& first, const Rest&... rest) {
  static_assert(requires { F::forward(first, rest...); },
                "fusegrad::function<F>::apply: F needs a static forward(inputs...) callable with "
                "these tensors");
  if constexpr ((std::same_as<Rest, tensor<T>> && ...)) detail::realize_for_op("fg::function", F::name, first, rest...);
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
                    },
                    // Collectable by default: the rule reads the saved tensors and nothing else.
                    detail::params_of(detail::type_id<F>()),  // F::backward holds no state; two functions of one name stay apart
                    // F::backward is written with fusegrad's ops: in a create_graph backward they record,
                    // so it is differentiable again unless F says it is not (PyTorch's once_differentiable).
                    once_differentiable<F> ? detail::double_backward::unsupported : detail::double_backward::supported);
  return out;
}

}  // namespace fusegrad
