#pragma once
/// \file fusegrad/nn/parameters.hpp
/// Named parameters, the modules' `state_dict()` and `load_state_dict()` (PyTorch's, with
/// `strict=True`): a module names its parameters (`"weight"`, `"bias"`; `nn::sequential`
/// prefixes each layer's with its index, `"0.weight"`), its state dict is those names with the
/// parameter tensors themselves (their storage, as PyTorch's), and loading one copies values
/// into the parameters after checking that the names are the same set and every shape
/// matches. `nn::save(path, m.state_dict())` and `nn::load(path, m.named_parameters())`
/// (state_dict.hpp) put them in a file.
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fusegrad/core/grad_mode.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad::nn {

/// Parameters by name, in the module's order.
template <Element T>
using named_tensors = std::vector<std::pair<std::string, tensor<T>>>;

/// Copies the values of state dict `sd` into the parameters `params` (a module's
/// `named_parameters()`): every name of one must be in the other, once, with the same shape.
/// Everything is checked before any parameter is written, so a failed load changes nothing;
/// the error names the keys missing from `sd`, those it has in excess, or the first shape that
/// differs. The copy is not recorded on the tape.
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): each mismatch named by its own error
void load_state_dict(const named_tensors<T>& params, const named_tensors<T>& sd) {
  constexpr std::string_view op = "nn::load_state_dict";
  auto find = [op](const named_tensors<T>& v, const std::string& name) -> const tensor<T>* {
    const tensor<T>* r = nullptr;
    for (const auto& [n, t] : v)
      if (n == name) {
        if (r) fusegrad::detail::fail(op, "the name '", name, "' appears twice; expected each name once");
        r = &t;
      }
    return r;
  };
  std::string missing, unexpected;
  for (const auto& [n, t] : params)
    if (!find(sd, n)) missing += (missing.empty() ? "'" : ", '") + n + "'";
  for (const auto& [n, t] : sd)
    if (!find(params, n)) unexpected += (unexpected.empty() ? "'" : ", '") + n + "'";
  if (!missing.empty() || !unexpected.empty())
    fusegrad::detail::fail(op, "missing keys [", missing, "], unexpected keys [", unexpected,
                           "]; expected the module's parameter names");
  std::vector<tensor<T>> values;
  for (const auto& [n, p] : params) {
    const tensor<T>& v = *find(sd, n);
    if (!v.defined() || v.shape() != p.shape())
      fusegrad::detail::fail(op, "'", n, "' has shape ",
                             v.defined() ? to_string(v.shape()) : std::string("(undefined)"), "; expected ",
                             to_string(p.shape()));
    if (!p.is_contiguous())
      fusegrad::detail::fail(op, "parameter '", n, "' is a non-contiguous view; expected a contiguous tensor");
    values.push_back(v.contiguous());
  }
  no_grad ng;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const tensor<T>& p = params[k].second;
    if (p.numel() == 0 || p.data() == values[k].data()) continue;  // its own state dict: nothing to copy
    std::memcpy(p.data(), values[k].data(), static_cast<std::size_t>(p.numel()) * sizeof(T));
    p.impl()->store->bump_version();
  }
}

}  // namespace fusegrad::nn
