#pragma once
/// \file fusegrad/nn/linear.hpp
/// A minimal module layer: `nn::linear` (PyTorch's `torch.nn.Linear`, with its named parameters
/// and state dict), `nn::sgd` (with momentum and weight decay) and `nn::mse_loss`.

#include <cmath>
#include <vector>

#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/matmul.hpp"
#include "fusegrad/eager/reduce.hpp"
#include "fusegrad/nn/parameters.hpp"
#include "fusegrad/nn/update.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad::nn {

/// y = x wᵀ + b with weight [out, in] and bias [out], initialised like PyTorch:
/// uniform in ±1/sqrt(in), deterministic for a seed.
template <Element T>
class linear {
 public:
  linear(index_t in_features, index_t out_features, bool bias = true, std::uint64_t seed = 0) {
    if (in_features <= 0 || out_features <= 0)
      detail::fail("nn::linear", "got in_features = ", in_features, ", out_features = ", out_features,
                   "; expected both > 0");
    const T bound = T(1) / std::sqrt(static_cast<T>(in_features));
    weight = rand<T>({out_features, in_features}, seed, -bound, bound).requires_grad(true);
    if (bias) this->bias = rand<T>({out_features}, seed + 1, -bound, bound).requires_grad(true);
  }
  [[nodiscard]] tensor<T> operator()(const tensor<T>& x) const { return fusegrad::linear(x, weight, bias); }
  [[nodiscard]] std::vector<tensor<T>> parameters() const {
    return bias.defined() ? std::vector<tensor<T>>{weight, bias} : std::vector<tensor<T>>{weight};
  }
  /// `{"weight", weight}` and, with a bias, `{"bias", bias}` (PyTorch's names).
  [[nodiscard]] named_tensors<T> named_parameters() const {
    named_tensors<T> r{{"weight", weight}};
    if (bias.defined()) r.emplace_back("bias", bias);
    return r;
  }
  /// The named parameters themselves (their storage, as PyTorch's `state_dict()`).
  [[nodiscard]] named_tensors<T> state_dict() const { return named_parameters(); }
  /// Copies `sd`'s values into the parameters (see nn/parameters.hpp).
  void load_state_dict(const named_tensors<T>& sd) const { nn::load_state_dict(named_parameters(), sd); }
  tensor<T> weight, bias;
};

/// Stochastic gradient descent, PyTorch's update: g += weight_decay p; with momentum,
/// b = momentum b + g (b = g at the first step) and g = b; then p -= lr g.
template <Element T>
class sgd {
 public:
  sgd(std::vector<tensor<T>> params, T lr, T momentum = T(0), T weight_decay = T(0))
      : params_(std::move(params)), lr_(lr), momentum_(momentum), wd_(weight_decay), buf_(params_.size()) {
    if (!(lr >= 0) || !(momentum >= 0) || !(weight_decay >= 0))
      detail::fail("nn::sgd", "lr = ", lr, ", momentum = ", momentum, ", weight_decay = ", weight_decay,
                   "; expected values >= 0");
    detail::check_params("nn::sgd", params_);
  }
  /// Updates every parameter that has a gradient, in place.
  void step() {
    fusegrad::detail::update_params(params_,
                                    [this](std::size_t k, T* __restrict pd, const T* __restrict gd, index_t n) {
                                      if (momentum_ == T(0) && wd_ == T(0)) {
                                        for (index_t i = 0; i < n; ++i) pd[i] -= lr_ * gd[i];
                                        return;
                                      }
                                      auto& b = buf_[k];
                                      const bool first = b.empty();
                                      if (first) b.resize(static_cast<std::size_t>(n));
                                      for (index_t i = 0; i < n; ++i) {
                                        T d = gd[i] + wd_ * pd[i];
                                        if (momentum_ != T(0)) {
                                          T& bi = b[static_cast<std::size_t>(i)];
                                          bi = first ? d : momentum_ * bi + d;
                                          d = bi;
                                        }
                                        pd[i] -= lr_ * d;
                                      }
                                    });
  }
  /// Resets every parameter's gradient.
  void zero_grad() {
    for (auto& p : params_) p.zero_grad();
  }

 private:
  std::vector<tensor<T>> params_;
  T lr_, momentum_, wd_;
  std::vector<std::vector<T>> buf_;
};

/// Mean squared error, mean((a - b)^2).
template <Element T>
tensor<T> mse_loss(const tensor<T>& a, const tensor<T>& b) {
  const tensor<T> d = a - b;
  return mean(tensor<T>(d * d));
}

}  // namespace fusegrad::nn
