#pragma once
/// \file fusegrad/core/simd.hpp
/// The SIMD vocabulary shared by every kernel: the batch type, and the few helpers that let
/// one generic op definition serve a scalar (`float`, `double`) and an xsimd batch alike.

#include <cmath>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "fusegrad/core/element.hpp"

namespace fusegrad {

/// The SIMD register type fusegrad kernels use for `T` (xsimd's default architecture:
/// AVX2 when built with `-mavx2 -mfma` or `-march=native`, SSE2 otherwise).
template <Element T>
using simd = xsimd::batch<T>;

namespace detail {
template <class V>
inline constexpr bool is_scalar_v = std::is_floating_point_v<V>;
}

/// Helpers usable on scalars and batches, so an op's value is written once.
namespace lanes {

template <class V>
V select_gt(const V& a, const V& b, const V& if_true, const V& if_false) {
  if constexpr (detail::is_scalar_v<V>) return a > b ? if_true : if_false;
  else return xsimd::select(a > b, if_true, if_false);
}
/// 1 where `a > b`, else 0.
template <class V> V gt(const V& a, const V& b) { return select_gt(a, b, V(1), V(0)); }
/// 1 where `a >= b`, else 0.
template <class V> V ge(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) return a >= b ? V(1) : V(0);
  else return xsimd::select(a >= b, V(1), V(0));
}
/// 1 where `a == b`, else 0.
template <class V> V eq(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) return a == b ? V(1) : V(0);
  else return xsimd::select(a == b, V(1), V(0));
}
/// 1 where `a != b`, else 0.
template <class V> V ne(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) return a != b ? V(1) : V(0);
  else return xsimd::select(a != b, V(1), V(0));
}
/// The larger of `a` and `b`, propagating NaN from either side like `torch.maximum`.
template <class V> V max(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  } else {
    return xsimd::select(xsimd::isnan(a), a, xsimd::select(xsimd::isnan(b), b, xsimd::max(a, b)));
  }
}
/// -1, 0 or +1 by the sign of `a` (0 for 0 and NaN stays NaN).
template <class V> V sign(const V& a) {
  if constexpr (detail::is_scalar_v<V>) {
    if (a != a) return a;
    return a > 0 ? V(1) : (a < 0 ? V(-1) : V(0));
  } else {
    return xsimd::select(a > V(0), V(1), xsimd::select(a < V(0), V(-1), xsimd::select(xsimd::isnan(a), a, V(0))));
  }
}

/// `std::pow` semantics on scalars and batches alike: xsimd's batch pow is exp(b log a), which
/// is wrong for a zero base and for a negative base with an integer exponent; those lanes are
/// fixed here so the SIMD body and the scalar tail agree.
template <class V> V pow(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) {
    return std::pow(a, b);
  } else {
    const V mag = xsimd::pow(xsimd::abs(a), b);
    const auto is_int = xsimd::floor(b) == b;
    const auto odd = is_int && (b - V(2) * xsimd::floor(b * V(0.5))) == V(1);
    const auto neg = a < V(0);
    V r = xsimd::select(neg && !is_int, V(std::numeric_limits<typename V::value_type>::quiet_NaN()),
                        xsimd::select(neg && odd, -mag, mag));
    const V zero_base = xsimd::select(b > V(0), V(0), V(std::numeric_limits<typename V::value_type>::infinity()));
    r = xsimd::select(a == V(0), zero_base, r);
    r = xsimd::select(xsimd::isnan(a) || xsimd::isnan(b), a + b, r);
    return xsimd::select(b == V(0), V(1), r);
  }
}

}  // namespace lanes
}  // namespace fusegrad
