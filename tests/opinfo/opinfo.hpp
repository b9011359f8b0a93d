#pragma once
// What an entry of the op registry (registry.hpp) is: PyTorch's OpInfo, for fusegrad's
// element-wise ops. The tests of tests/opinfo/ are generated from the registry: eager values
// against a reference per element, special values, position and neighbour independence,
// gradcheck in double, derivative values at edge points, every compiled path against eager;
// docs/ops.md is generated from it too.
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace opinfo {

inline constexpr double inf = std::numeric_limits<double>::infinity();
inline constexpr double nan = std::numeric_limits<double>::quiet_NaN();

/// Where an operand's samples come from: uniform in [lo, hi]; `mask` gives 0 or 1.
struct domain {
  double lo = -2, hi = 2;
  bool mask = false;
};
inline constexpr domain any{-2, 2}, pos{0.2, 3}, unit{-0.9, 0.9}, ge1{1.1, 3}, mask{0, 1, true};

/// An edge value: the operands and the expected result (PyTorch's; NaN matches NaN, zeros
/// must have the expected sign).
struct special {
  std::array<double, 3> x;
  double want;
};
/// The expected gradient of each operand at one point (for `sum(f(x))`).
struct grad_special {
  std::array<double, 3> x;
  std::array<double, 3> want;
};

/// One op: `f` is a generic callable over fusegrad operands (tensors, expressions, IR
/// values), `ref` the reference per element in long double (the C library where it has the
/// function), `arity` operands.
template <std::size_t N>
struct ref_of;
template <>
struct ref_of<1> {
  using type = long double (*)(long double);
};
template <>
struct ref_of<2> {
  using type = long double (*)(long double, long double);
};
template <>
struct ref_of<3> {
  using type = long double (*)(long double, long double, long double);
};

template <std::size_t N, class F>
struct info {
  using ref_t = typename ref_of<N>::type;
  static constexpr std::size_t arity = N;

  std::string_view name;        ///< the entry's name (unique; the public function and its variant)
  std::string_view call;        ///< how it is called, for docs/ops.md
  std::string_view derivative;  ///< the derivative rule, for docs/ops.md ("none": no gradient)
  F f;
  ref_t ref;
  std::array<domain, N> dom{};
  bool (*avoid)(const double*) = nullptr;       ///< samples to skip (kinks, poles) in gradchecks
  double tol_float = 2e-6, tol_double = 1e-13;  ///< relative, absolute below magnitude 1
  std::vector<special> specials{};
  std::vector<grad_special> grad_specials{};
  std::string_view note{};  ///< where fusegrad differs from PyTorch, and why (docs/ops.md)

  info& domains(std::array<domain, N> d) {
    dom = d;
    return *this;
  }
  info& skip(bool (*p)(const double*)) {
    avoid = p;
    return *this;
  }
  info& tol(double f_, double d_) {
    tol_float = f_;
    tol_double = d_;
    return *this;
  }
  info& edges(std::vector<special> s) {
    specials = std::move(s);
    return *this;
  }
  info& grad_edges(std::vector<grad_special> s) {
    grad_specials = std::move(s);
    return *this;
  }
  info& differs(std::string_view n) {
    note = n;
    return *this;
  }
};

template <std::size_t N, class F, class R>
info<N, F> make(std::string_view name, std::string_view call, std::string_view derivative, F f, R ref) {
  info<N, F> r{name, call, derivative, f, ref};
  r.dom.fill(any);
  return r;
}

/// Calls `fn(entry)` for every entry of a registry tuple.
template <class Tuple, class Fn>
void for_each(const Tuple& t, Fn&& fn) {
  std::apply([&](const auto&... e) { (fn(e), ...); }, t);
}

}  // namespace opinfo
