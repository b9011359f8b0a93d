#pragma once
// Independent references, in long double, for the functions the C library lacks: digamma,
// trigamma and ψ'' by the recurrence up to x >= 20 and their asymptotic series there (more
// terms and a larger shift than the library's PyTorch algorithm), the reflection formulas
// below 0.
#include <cmath>
#include <limits>
#include <numbers>

namespace opinfo::ref {

inline long double digamma(long double x) {
  constexpr long double pi = std::numbers::pi_v<long double>;
  if (x == 0) return std::copysign(std::numeric_limits<long double>::infinity(), -x);
  if (std::isinf(x)) return x > 0 ? x : std::numeric_limits<long double>::quiet_NaN();
  if (x < 0) {
    if (x == std::floor(x)) return std::numeric_limits<long double>::quiet_NaN();
    return digamma(1 - x) - pi / std::tan(pi * x);  // ψ(1 - x) - ψ(x) = π cot(πx)
  }
  long double r = 0;
  while (x < 20) {
    r -= 1 / x;
    x += 1;
  }
  const long double z = 1 / (x * x);  // ψ ~ ln x - 1/2x - Σ B2k / (2k x^2k)
  return r + std::log(x) - 0.5L / x -
         z * (1.0L / 12 - z * (1.0L / 120 -
                               z * (1.0L / 252 - z * (1.0L / 240 - z * (1.0L / 132 - z * (691.0L / 32760 - z / 12))))));
}

inline long double trigamma(long double x) {
  constexpr long double pi = std::numbers::pi_v<long double>;
  if (x <= 0 && x == std::floor(x)) return std::numeric_limits<long double>::infinity();
  if (x < 0) {
    const long double s = std::sin(pi * x);  // ψ'(1 - x) + ψ'(x) = π² / sin²(πx)
    return pi * pi / (s * s) - trigamma(1 - x);
  }
  long double r = 0;
  while (x < 20) {
    r += 1 / (x * x);
    x += 1;
  }
  const long double z = 1 / (x * x);  // ψ' ~ 1/x + 1/2x² + Σ B2k / x^(2k+1)
  return r + 1 / x + z / 2 + z / x * (1.0L / 6 - z * (1.0L / 30 - z * (1.0L / 42 - z * (1.0L / 30 - z * 5.0L / 66))));
}

/// ψ''(x) for x > 0.
inline long double tetragamma(long double x) {
  long double r = 0;
  while (x < 20) {
    r -= 2 / (x * x * x);
    x += 1;
  }
  const long double z = 1 / (x * x);  // ψ'' ~ -1/x² - 1/x³ - 1/2x⁴ + 1/6x⁶ - 1/6x⁸ + 3/10x¹⁰
  return r - z - z / x - z * z * (0.5L - z * (1.0L / 6 - z * (1.0L / 6 - z * 0.3L)));
}

/// ψ⁽ⁿ⁾(x) for n >= 1 and x > 0: ψ⁽ⁿ⁾(x) = ψ⁽ⁿ⁾(x + 1) + (-1)ⁿ⁺¹ n! / xⁿ⁺¹ up to x >= 30,
/// then (-1)ⁿ⁺¹ [(n-1)!/xⁿ + n!/(2xⁿ⁺¹) + Σ B2k (2k+n-1)! / ((2k)! x^(2k+n))].
inline long double polygamma(int n, long double x) {
  auto fact = [](int m) {
    long double f = 1;
    for (int i = 2; i <= m; ++i) f *= i;
    return f;
  };
  const long double sign = n % 2 ? 1 : -1;
  long double r = 0;
  while (x < 30) {
    r += sign * fact(n) / std::pow(x, n + 1);
    x += 1;
  }
  constexpr long double b2k[] = {1.0L / 6, -1.0L / 30, 1.0L / 42, -1.0L / 30, 5.0L / 66, -691.0L / 2730, 7.0L / 6};
  long double s = fact(n - 1) / std::pow(x, n) + fact(n) / (2 * std::pow(x, n + 1));
  for (int k = 1; k <= 7; ++k) s += b2k[k - 1] * fact(2 * k + n - 1) / (fact(2 * k) * std::pow(x, 2 * k + n));
  return r + sign * s;
}

}  // namespace opinfo::ref
