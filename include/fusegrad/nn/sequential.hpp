#pragma once
/// \file fusegrad/nn/sequential.hpp
/// `nn::sequential(layers...)`: callables applied in order (modules such as `nn::linear`, or
/// any function of a tensor, e.g. `[](auto x) { return fg::relu(x); }`), with `parameters()`
/// collecting the parameters of every layer that has them, in order, `named_parameters()`,
/// `state_dict()` and `load_state_dict()` (nn/parameters.hpp).
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/nn/parameters.hpp"

namespace fusegrad::nn {

template <class... Layers>
class sequential {
 public:
  explicit sequential(Layers... layers) : layers_(std::move(layers)...) {}

  template <class X>
  auto operator()(const X& x) const {
    return std::apply([&](const auto&... l) { return apply_all(x, l...); }, layers_);
  }
  /// The parameters of every layer with a `parameters()`, layer by layer.
  [[nodiscard]] auto parameters() const {
    using P = decltype(first_parameters());
    P r;
    std::apply([&](const auto&... l) { (append(r, l), ...); }, layers_);
    return r;
  }
  /// The named parameters of every layer with `named_parameters()`, each name prefixed with
  /// the layer's index (`"0.weight"`, `"2.bias"`: PyTorch's names for `nn.Sequential`).
  [[nodiscard]] auto named_parameters() const {
    named_tensors<element_of<typename decltype(first_parameters())::value_type>> r;
    std::size_t i = 0;
    std::apply([&](const auto&... l) { (append_named(r, l, i++), ...); }, layers_);
    return r;
  }
  /// The named parameters themselves (their storage, as PyTorch's `state_dict()`).
  [[nodiscard]] auto state_dict() const { return named_parameters(); }
  /// Copies `sd`'s values into the parameters (see nn/parameters.hpp).
  template <Element T>
  void load_state_dict(const named_tensors<T>& sd) const {
    nn::load_state_dict(named_parameters(), sd);
  }
  [[nodiscard]] const std::tuple<Layers...>& layers() const noexcept { return layers_; }

 private:
  template <class X>
  static auto apply_all(const X& x) {
    return x;
  }
  template <class X, class L, class... Rest>
  static auto apply_all(const X& x, const L& l, const Rest&... rest) {
    return apply_all(l(x), rest...);
  }
  template <class R, class L>
  static void append(R& r, const L& l) {
    if constexpr (requires { l.parameters(); })
      for (auto& p : l.parameters()) r.push_back(p);
  }
  template <class R, class L>
  static void append_named(R& r, const L& l, std::size_t i) {
    if constexpr (requires { l.named_parameters(); })
      for (auto& [n, p] : l.named_parameters()) r.emplace_back(std::to_string(i) + "." + n, p);
  }
  /// The parameter list type of the first layer that has parameters.
  auto first_parameters() const {
    return std::apply([](const auto&... l) { return pick(l...); }, layers_);
  }
  static std::vector<tensor<float>> pick() { return {}; }
  template <class L, class... Rest>
  static auto pick(const L& l, const Rest&... rest) {
    if constexpr (requires { l.parameters(); }) return decltype(l.parameters()){};
    else return pick(rest...);
  }
  std::tuple<Layers...> layers_;
};

}  // namespace fusegrad::nn
