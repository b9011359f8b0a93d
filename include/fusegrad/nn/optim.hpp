#pragma once
/// \file fusegrad/nn/optim.hpp
/// `nn::adam` (and AdamW's decoupled weight decay): PyTorch's update, step for step
/// (torch.optim.Adam, `foreach=False`): m ← β₁m + (1-β₁)g, v ← β₂v + (1-β₂)g²,
/// p ← p - (lr / (1-β₁ᵗ)) m / (√v / √(1-β₂ᵗ) + ε); with weight decay, g += wd p (Adam) or
/// p ← p (1 - lr wd) first (AdamW).
#include <cmath>
#include <type_traits>
#include <vector>

#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/nn/update.hpp"

namespace fusegrad::nn {

struct adam_options {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  ///< AdamW: decay the weights, not the gradient
};

template <Element T>
class adam {
 public:
  adam(std::vector<tensor<T>> params, adam_options o = {}) : params_(std::move(params)), o_(o) {
    if (!(o.lr >= 0) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) || !(o.eps >= 0) ||
        !(o.weight_decay >= 0))
      fusegrad::detail::fail("nn::adam", "lr = ", o.lr, ", betas = (", o.beta1, ", ", o.beta2, "), eps = ", o.eps,
                             ", weight_decay = ", o.weight_decay,
                             "; expected lr, eps, weight_decay >= 0 and 0 <= betas < 1");
    fusegrad::detail::check_params("nn::adam", params_);
    for (const auto& p : params_) {
      m_.emplace_back(static_cast<std::size_t>(p.numel()), T(0));
      v_.emplace_back(static_cast<std::size_t>(p.numel()), T(0));
    }
  }
  /// `adam(params, 0.01)`: the learning rate first, as `sgd` and `rmsprop` take it (PyTorch's
  /// `Adam(params, lr)`); the other options from `o` (its `lr` is replaced).
  template <class L>
  requires std::is_arithmetic_v<L> adam(std::vector<tensor<T>> params, L lr, adam_options o = {})
      : adam(std::move(params), with_lr(o, lr)) {}
  /// One update of every parameter that has a gradient, in place.
  void step() {
    ++t_;
    const double bc1 = 1 - std::pow(o_.beta1, t_), bc2 = 1 - std::pow(o_.beta2, t_);
    const T step_size = static_cast<T>(o_.lr / bc1), sqrt_bc2 = static_cast<T>(std::sqrt(bc2));
    const T b1 = static_cast<T>(o_.beta1), b2 = static_cast<T>(o_.beta2), eps = static_cast<T>(o_.eps);
    const T wd = static_cast<T>(o_.weight_decay), lr = static_cast<T>(o_.lr);
    fusegrad::detail::update_params(params_, [&](std::size_t k, T* __restrict pd, const T* __restrict gd, index_t n) {
      T* __restrict m = m_[k].data();
      T* __restrict v = v_[k].data();
      for (index_t i = 0; i < n; ++i) {
        T g = gd[i];
        if (wd != 0) {
          if (o_.decoupled) pd[i] *= T(1) - lr * wd;
          else g += wd * pd[i];
        }
        m[i] = b1 * m[i] + (T(1) - b1) * g;
        v[i] = b2 * v[i] + (T(1) - b2) * g * g;
        pd[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps);
      }
    });
  }
  void zero_grad() {
    for (auto& p : params_) p.zero_grad();
  }

 private:
  static adam_options with_lr(adam_options o, double lr) {
    o.lr = lr;
    return o;
  }
  std::vector<tensor<T>> params_;
  adam_options o_;
  std::vector<std::vector<T>> m_, v_;
  int t_ = 0;
};

/// RMSprop, PyTorch's update (no momentum, not centered): g += wd p; v ← αv + (1-α)g²;
/// p ← p - lr g / (√v + ε).
template <Element T>
class rmsprop {
 public:
  rmsprop(std::vector<tensor<T>> params, double lr = 1e-2, double alpha = 0.99, double eps = 1e-8,
          double weight_decay = 0)
      : params_(std::move(params)),
        lr_(static_cast<T>(lr)),
        alpha_(static_cast<T>(alpha)),
        eps_(static_cast<T>(eps)),
        wd_(static_cast<T>(weight_decay)) {
    if (!(lr >= 0) || !(alpha >= 0 && alpha <= 1) || !(eps >= 0) || !(weight_decay >= 0))
      fusegrad::detail::fail("nn::rmsprop", "lr = ", lr, ", alpha = ", alpha, ", eps = ", eps,
                             ", weight_decay = ", weight_decay,
                             "; expected lr, eps, weight_decay >= 0 and 0 <= alpha <= 1");
    fusegrad::detail::check_params("nn::rmsprop", params_);
    for (const auto& p : params_) v_.emplace_back(static_cast<std::size_t>(p.numel()), T(0));
  }
  void step() {
    fusegrad::detail::update_params(params_,
                                    [this](std::size_t k, T* __restrict pd, const T* __restrict gd, index_t n) {
                                      T* __restrict v = v_[k].data();
                                      for (index_t i = 0; i < n; ++i) {
                                        const T g = gd[i] + wd_ * pd[i];
                                        v[i] = alpha_ * v[i] + (T(1) - alpha_) * g * g;
                                        pd[i] -= lr_ * g / (std::sqrt(v[i]) + eps_);
                                      }
                                    });
  }
  void zero_grad() {
    for (auto& p : params_) p.zero_grad();
  }

 private:
  std::vector<tensor<T>> params_;
  T lr_, alpha_, eps_, wd_;
  std::vector<std::vector<T>> v_;
};

/// Scales the gradients of `params` in place so that their joint 2-norm is at most
/// `max_norm` (by max_norm / (norm + 1e-6), as PyTorch); returns the norm before clipping.
template <Element T>
T clip_grad_norm(const std::vector<tensor<T>>& params, double max_norm) {
  if (!(max_norm >= 0))
    fusegrad::detail::fail("nn::clip_grad_norm", "max_norm = ", max_norm, "; expected max_norm >= 0");
  double s = 0;
  for (const auto& p : params)
    if (p.grad().defined())
      for (T g : p.grad().to_vector()) s += static_cast<double>(g) * static_cast<double>(g);
  const double total = std::sqrt(s), coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (const auto& p : params) {
      tensor<T> g = p.grad();
      if (!g.defined()) continue;
      if (!g.is_contiguous())
        fusegrad::detail::fail("nn::clip_grad_norm",
                               "a gradient is a non-contiguous view; expected contiguous gradients");
      T* d = g.data();
      for (index_t i = 0, n = g.numel(); i < n; ++i) d[i] = static_cast<T>(d[i] * coef);
      g.impl()->store->bump_version();
    }
  return static_cast<T>(total);
}

}  // namespace fusegrad::nn
