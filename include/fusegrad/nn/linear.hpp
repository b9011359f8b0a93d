#pragma once
/// \file fusegrad/nn/linear.hpp
/// A minimal module layer: `nn::linear` (PyTorch's `torch.nn.Linear`), `nn::sgd` and
/// `nn::mse_loss`.

#include <cmath>
#include <vector>

#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/matmul.hpp"
#include "fusegrad/eager/reduce.hpp"
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
  tensor<T> weight, bias;
};

/// Plain stochastic gradient descent: p -= lr * p.grad() for every parameter.
template <Element T>
class sgd {
 public:
  sgd(std::vector<tensor<T>> params, T lr) : params_(std::move(params)), lr_(lr) {}
  /// Updates every parameter that has a gradient, in place.
  void step() {
    for (auto& p : params_) {
      const tensor<T> g = p.grad();
      if (!g.defined()) continue;
      T* __restrict pd = p.data();
      const T* __restrict gd = g.contiguous().data();
      for (index_t i = 0, n = p.numel(); i < n; ++i) pd[i] -= lr_ * gd[i];
      p.impl()->store->bump_version();
    }
  }
  /// Resets every parameter's gradient.
  void zero_grad() {
    for (auto& p : params_) p.zero_grad();
  }

 private:
  std::vector<tensor<T>> params_;
  T lr_;
};

/// Mean squared error, mean((a - b)^2).
template <Element T>
tensor<T> mse_loss(const tensor<T>& a, const tensor<T>& b) {
  const tensor<T> d = a - b;
  return mean(tensor<T>(d * d));
}

}  // namespace fusegrad::nn
