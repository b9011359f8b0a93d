#pragma once
/// \file fusegrad/ops/normalization.hpp
/// layer_norm(x, eps) and rms_norm(x, eps) over the last dim (PyTorch's `F.layer_norm(x,
/// x.shape[-1:])` and `F.rms_norm`, without the affine weight and bias: write `w * layer_norm(x)
/// + b`, which every path fuses as well). layer_norm divides by the biased standard deviation
/// `sqrt(mean((x - mean x)²) + eps)`, rms_norm by `sqrt(mean(x²) + eps)`. Written once over any
/// operand from the public ops (mean, sub, mul, rsqrt), so every path runs them and derives
/// their gradients; in `fg::compile` and `fg::jit` the row's mean, variance and normalisation
/// run as one row group (docs/compile.md).
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/reciprocal.hpp"
#include "fusegrad/ops/reductions.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad {
/// (x - mean(x)) / sqrt(var(x) + eps) along the last dim, the variance biased (PyTorch's).
template <Operand X>
constexpr auto layer_norm(const X& x, double eps = 1e-5) {
  const auto d = x - mean(x, -1, true);
  return d * rsqrt(mean(d * d, -1, true) + eps);
}
/// x / sqrt(mean(x²) + eps) along the last dim.
template <Operand X>
constexpr auto rms_norm(const X& x, double eps = 1e-6) {
  return x * rsqrt(mean(x * x, -1, true) + eps);
}
}  // namespace fusegrad
