#pragma once
/// \file fusegrad/core/special.hpp
/// Scalar special functions the C library lacks (digamma, trigamma, polygamma, the Hurwitz
/// zeta function) or offers only with a global side effect (lgamma's `signgam`). Each follows
/// PyTorch's CPU definition (aten/src/ATen/native/Math.h: `calc_digamma`, `calc_trigamma`,
/// `zeta`, `calc_polygamma`), in the element type, so values and special values agree with
/// it. The ops run them lane by lane (`lanes::per_lane`): an element's value is the same on
/// every path and beside any neighbours.

#include <cmath>
#include <limits>
#include <numbers>

#include "fusegrad/core/element.hpp"

namespace fusegrad::special {

/// log|Γ(x)| without writing the global `signgam` (std::lgamma does, a data race between
/// threads): glibc's `lgamma_r`, elsewhere std::lgamma.
template <Element T>
T lgamma(T x) {
#if defined(__GLIBC__)
  int sign = 0;
  if constexpr (sizeof(T) == sizeof(float)) return ::lgammaf_r(x, &sign);
  else return ::lgamma_r(x, &sign);
#else
  return std::lgamma(x);
#endif
}

/// ψ(x) = d/dx log Γ(x). Special values as PyTorch: ψ(±0) = ∓inf, ψ(negative integer) = NaN,
/// ψ(-inf) = NaN, ψ(+inf) = +inf.
template <Element T>
T digamma(T x) {
  constexpr T pi = std::numbers::pi_v<T>;
  if (x == T(0)) return std::copysign(std::numeric_limits<T>::infinity(), -x);
  if (x < T(0)) {
    if (x == std::trunc(x)) return std::numeric_limits<T>::quiet_NaN();
    T q;
    const T r = std::modf(x, &q);  // tan(pi r) is more accurate than tan(pi x)
    return digamma(T(1) - x) - pi / std::tan(pi * r);
  }
  T result = 0;
  while (x < T(10)) {  // false for NaN
    result -= T(1) / x;
    x += T(1);
  }
  if (x == T(10)) return result + T(2.25175258906672110764);
  constexpr T A[] = {T(8.33333333333333333333E-2),  T(-2.10927960927960927961E-2), T(7.57575757575757575758E-3),
                     T(-4.16666666666666666667E-3), T(3.96825396825396825397E-3),  T(-8.33333333333333333333E-3),
                     T(8.33333333333333333333E-2)};
  T y = 0;
  if (x < T(1.0e17)) {
    const T z = T(1) / (x * x);
    T p = A[0];
    for (int i = 1; i < 7; ++i) p = p * z + A[i];
    y = z * p;
  }
  return result + std::log(x) - T(0.5) / x - y;
}

/// ψ'(x), the trigamma function (PyTorch's `calc_trigamma`: reflection below 1/2, six steps of
/// the recurrence, then the asymptotic series).
template <Element T>
T trigamma(T x) {
  constexpr T pi = std::numbers::pi_v<T>;
  T sign = 1, result = 0;
  if (x < T(0.5)) {
    sign = -1;
    const T s = std::sin(pi * x);
    result -= (pi * pi) / (s * s);
    x = T(1) - x;
  }
  for (int i = 0; i < 6; ++i) {
    result += T(1) / (x * x);
    x += T(1);
  }
  const T ixx = T(1) / (x * x);
  result += (T(1) + T(1) / (T(2) * x) + ixx * (T(1) / T(6) - ixx * (T(1) / T(30) - ixx * (T(1) / T(42))))) / x;
  return sign * result;
}

/// The Hurwitz zeta function ζ(s, q) = Σ_k (k + q)^-s (Cephes' algorithm, as PyTorch's `zeta`,
/// in double for both element types as PyTorch's CPU kernel).
inline double zeta(double s, double q) {
  using T = double;
  constexpr T machep = T(1.11022302462515654042E-16);
  constexpr T A[] = {T(12.0),
                     T(-720.0),
                     T(30240.0),
                     T(-1209600.0),
                     T(47900160.0),
                     T(-1.8924375803183791606e9),
                     T(7.47242496e10),
                     T(-2.950130727918164224e12),
                     T(1.1646782814350067249e14),
                     T(-4.5979787224074726105e15),
                     T(1.8152105401943546773e17),
                     T(-7.1661652561756670113e18)};
  if (s == T(1)) return std::numeric_limits<T>::infinity();
  if (s < T(1)) return std::numeric_limits<T>::quiet_NaN();
  if (q <= T(0)) {
    if (q == std::floor(q)) return std::numeric_limits<T>::infinity();
    if (s != std::floor(s)) return std::numeric_limits<T>::quiet_NaN();
  }
  T sum = std::pow(q, -s), a = q, b = 0;
  int i = 0;
  while (i < 9 || a <= T(9)) {
    i += 1;
    a += T(1);
    b = std::pow(a, -s);
    sum += b;
    if (-machep * sum < b && b < machep * sum) return sum;
  }
  const T w = a;
  sum += b * w / (s - T(1));
  sum -= T(0.5) * b;
  T f = 1, k = 0;
  for (int j = 0; j < 12; ++j) {
    f *= s + k;
    b /= w;
    T t = f * b / A[j];
    sum += t;
    t = std::abs(t / sum);
    if (t < machep) return sum;
    k += T(1);
    f *= s + k;
    b /= w;
    k += T(1);
  }
  return sum;
}

/// ψ⁽ⁿ⁾(x), the n-th derivative of digamma (n ≥ 0; PyTorch's `calc_polygamma`).
template <Element T>
T polygamma(int n, T x) {
  if (n == 0) return digamma(x);
  if (n == 1) return trigamma(x);
  const double sign = n % 2 ? 1.0 : -1.0;
  return static_cast<T>(sign * std::exp(lgamma(double(n) + 1.0)) * zeta(double(n + 1), double(x)));
}

}  // namespace fusegrad::special
