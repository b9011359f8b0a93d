#pragma once
/// \file fusegrad/ops/function.hpp
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
/// On eager tensors `backward` runs with recording on in a create_graph backward, so a
/// backward written with fusegrad's ops is differentiable again (double backward). One that
/// is not (it reads raw values, or detaches) declares
/// `static constexpr bool once_differentiable = true;`: a second backward through it then
/// throws instead of returning a gradient that misses its terms (PyTorch's
/// `@once_differentiable`).
///
/// Like the built-in ops' functions, `function<F>::apply` is written once: it calls
/// `apply_function(function_tag<F>{}, args...)`, which each representation overloads (eager
/// tensors record one tape node, eager/function.hpp; expressions become a `custom_expr` that
/// fuses, expr/expr.hpp).

#include <string_view>
#include <tuple>
#include <type_traits>

#include "fusegrad/core/operand.hpp"

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

/// Whether custom op `F` declares its backward not differentiable (`once_differentiable`).
template <class F>
inline constexpr bool once_differentiable = [] {
  if constexpr (requires { F::once_differentiable; }) return static_cast<bool>(F::once_differentiable);
  else return false;
}();

/// Names custom op `F` in `apply_function` calls (found through `F`'s associated namespaces).
template <class F>
struct function_tag {};

namespace detail {
template <class X>
inline constexpr bool is_tuple_v = false;
template <class... Xs>
inline constexpr bool is_tuple_v<std::tuple<Xs...>> = true;
}  // namespace detail

template <CustomFunction F>
struct function {
  /// `F` applied to operands (eager tensors, expressions): the representation's `apply_function`.
  template <Operand X0, Operand... Xs>
  static constexpr auto apply(const X0& x0, const Xs&... xs) {
    return apply_function(function_tag<F>{}, x0, xs...);
  }
};

}  // namespace fusegrad
