#pragma once
/// \file fusegrad/eager/function.hpp
/// Custom differentiable ops (fusegrad/ops/function.hpp) on eager tensors: `F::forward` runs
/// without recording, and one tape node named `F::name` runs `F::backward`.

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/ops/function.hpp"
#include "fusegrad/ops/user_ops.hpp"

namespace fusegrad {

namespace detail {
template <Element T, class Tuple, std::size_t... I>
Tuple tuple_from(const std::vector<tensor<T>>& v, std::index_sequence<I...>) {
  return Tuple(v[I]...);
}

/// What `F::setup_context` saves (without one: every input), as it returns it.
template <CustomFunction F, Element T, class... Rest>
auto saved_tuple(const tensor<T>& first, const Rest&... rest, const tensor<T>& out) {
  if constexpr (requires { F::setup_context(first, rest..., out); }) return F::setup_context(first, rest..., out);
  else return save_for_backward(first, rest...);
}
template <CustomFunction F, Element T, class... Rest>
using saved_tuple_t = decltype(saved_tuple<F, T, Rest...>(
    std::declval<const tensor<T>&>(), std::declval<const Rest&>()..., std::declval<const tensor<T>&>()));

/// The same, as a list.
template <CustomFunction F, Element T, class... Rest>
std::vector<tensor<T>> saved_list(const tensor<T>& first, const Rest&... rest, const tensor<T>& out) {
  auto saved = saved_tuple<F, T, Rest...>(first, rest..., out);
  static_assert(is_tuple_v<decltype(saved)>,
                "fusegrad::function<F>: setup_context must return fusegrad::save_for_backward(...)");
  return std::apply(
      [](const auto&... s) {
        static_assert((std::same_as<std::remove_cvref_t<decltype(s)>, tensor<T>> && ...),
                      "fusegrad::function<F>: save_for_backward takes tensors only; keep other "
                      "values as constants in F");
        return std::vector<tensor<T>>{s...};
      },
      saved);
}

/// `F::backward` on saved tensors in a list: one gradient per input.
template <CustomFunction F, Element T, std::size_t NIn, class Saved>
std::vector<tensor<T>> run_backward(const std::vector<tensor<T>>& s, const tensor<T>& g) {
  auto st = tuple_from<T, Saved>(s, std::make_index_sequence<std::tuple_size_v<Saved>>{});
  auto r = F::backward(std::as_const(st), g);
  std::vector<tensor<T>> grads;
  if constexpr (is_tuple_v<decltype(r)>) {
    static_assert(std::tuple_size_v<decltype(r)> == NIn,
                  "fusegrad::function<F>: backward must return one gradient per input");
    std::apply([&](const auto&... x) { (grads.push_back(tensor<T>(x)), ...); }, r);
  } else {
    static_assert(NIn == 1,
                  "fusegrad::function<F>: backward of an op with several inputs must "
                  "return a std::tuple with one gradient per input");
    grads.push_back(tensor<T>(r));
  }
  return grads;
}
}  // namespace detail

/// The run-time IR's record of `F` (ops/user_ops.hpp): its backward on a list of saved tensors,
/// and the whole function on computed inputs.
template <CustomFunction F, Element T, class... Rest>
inline const ops::user_function<T> user_function_of{
    F::name, static_cast<int>(1 + sizeof...(Rest)),
    [](const std::vector<tensor<T>>& s, const tensor<T>& g) {
      return detail::run_backward<F, T, 1 + sizeof...(Rest), detail::saved_tuple_t<F, T, Rest...>>(s, g);
    },
    [](const std::vector<tensor<T>>& in) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return apply_function(function_tag<F>{}, in[0], in[1 + I]...);
      }
      (std::make_index_sequence<sizeof...(Rest)>{});
    }};

/// Runs `F::forward` on eager tensors and records one node named `F::name`. Under the run-time
/// tracer the forward's ops are recorded as any eager code is, and its output is a `custom`
/// node whose gradient `F::backward` gives (fg::jit and compiled autograd).
template <CustomFunction F, Element T, std::same_as<tensor<T>>... Rest>
tensor<T> apply_function(function_tag<F>, const tensor<T>& first, const Rest&... rest) {
  static_assert(
      requires { F::forward(first, rest...); },
      "fusegrad::function<F>::apply: F needs a static forward(inputs...) callable with "
      "these tensors");
  if (auto* r = detail::active_recorder<T>()) [[unlikely]] {
    static const int fn = ops::user_function_index(user_function_of<F, T, Rest...>);
    const tensor<T> value(F::forward(first, rest...));
    return r->custom(fn, value, {first, rest...},
                     [&](const tensor<T>& out) { return detail::saved_list<F, T, Rest...>(first, rest..., out); });
  }
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
  using saved_t = detail::saved_tuple_t<F, T, Rest...>;
  std::vector<tensor<T>> saved_vec = detail::saved_list<F, T, Rest...>(first, rest..., out);
  constexpr std::size_t n_in = 1 + sizeof...(Rest);
  detail::record<T>(
      F::name, {first, rest...}, {&out}, std::move(saved_vec),
      [](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& g) {
        return detail::run_backward<F, T, n_in, saved_t>(s, g[0]);
      },
      // Collectable by default: the rule reads the saved tensors and nothing else.
      detail::params_of(detail::type_id<F>()),  // F::backward holds no state; two functions of one name stay apart
      // F::backward is written with fusegrad's ops: in a create_graph backward they record,
      // so it is differentiable again unless F says it is not (PyTorch's once_differentiable).
      once_differentiable<F> ? detail::double_backward::unsupported : detail::double_backward::supported);
  return out;
}

}  // namespace fusegrad
