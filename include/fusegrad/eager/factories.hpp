#pragma once
/// \file fusegrad/eager/factories.hpp
/// Tensor factories: zeros, ones, full, arange, randn (deterministic per seed), from_vector,
/// and a zero-copy view of user memory.

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "fusegrad/eager/kernels.hpp"

namespace fusegrad {

/// A tensor of shape `s` filled with `v`.
namespace detail {
template <Element T>
tensor<T> filled(std::string_view op, const shape& s, T v) {
  tensor<T> t = empty<T>(s, op);
  fill(t, v);
  return t;
}
}  // namespace detail
template <Element T>
tensor<T> full(const shape& s, T v) {
  return detail::filled<T>("full", s, v);
}
template <Element T>
tensor<T> zeros(const shape& s) {
  return detail::filled<T>("zeros", s, T(0));
}
template <Element T>
tensor<T> ones(const shape& s) {
  return detail::filled<T>("ones", s, T(1));
}
/// A 0-d tensor holding `v`.
template <Element T>
tensor<T> scalar_tensor(T v) {
  return full<T>({}, v);
}
template <Element T>
tensor<T> zeros_like(const tensor<T>& t) {
  return zeros<T>(t.shape());
}
template <Element T>
tensor<T> ones_like(const tensor<T>& t) {
  return ones<T>(t.shape());
}

/// 0, 1, ..., n-1 as a 1-D tensor.
template <Element T>
tensor<T> arange(index_t n) {
  if (n < 0) detail::fail("arange", "got n = ", n, "; expected n >= 0");
  tensor<T> t = detail::empty<T>({n}, "arange");
  for (index_t i = 0; i < n; ++i) t.data_ptr()[i] = static_cast<T>(i);
  return t;
}

/// Standard-normal samples. The same `seed` gives the same numbers on every platform
/// (SplitMix64 and Box–Muller, no implementation-defined distributions).
template <Element T>
tensor<T> randn(const shape& s, std::uint64_t seed = 0) {
  tensor<T> t = detail::empty<T>(s, "randn");
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  auto next = [&state]() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto uniform = [&]() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  T* p = t.data_ptr();
  const index_t n = t.numel();
  for (index_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), th = 2.0 * std::numbers::pi * uniform();
    p[i] = static_cast<T>(r * std::cos(th));
    if (i + 1 < n) p[i + 1] = static_cast<T>(r * std::sin(th));
  }
  return t;
}

/// Uniform samples in [lo, hi), deterministic per seed.
template <Element T>
tensor<T> rand(const shape& s, std::uint64_t seed = 0, T lo = T(0), T hi = T(1)) {
  tensor<T> t = detail::empty<T>(s, "rand");
  std::uint64_t state = seed * 0xD1B54A32D192ED03ull + 1;
  for (index_t i = 0; i < t.numel(); ++i) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    t.data_ptr()[i] = static_cast<T>(lo + (hi - lo) * (static_cast<double>(z >> 11) * 0x1.0p-53));
  }
  return t;
}

/// A tensor holding a copy of `values`, shaped `s` (1-D when `s` is omitted).
template <Element T>
tensor<T> from_vector(const std::vector<T>& values, const shape& s) {
  const index_t n = check_shape("from_vector", s);
  if (static_cast<index_t>(values.size()) != n)
    detail::fail("from_vector", "got ", values.size(), " values for shape ", to_string(s), "; expected ", n);
  tensor<T> t = detail::empty<T>(s, "from_vector");
  std::copy(values.begin(), values.end(), t.data_ptr());
  return t;
}
template <Element T>
tensor<T> from_vector(const std::vector<T>& values) {
  return from_vector<T>(values, {static_cast<index_t>(values.size())});
}

/// A tensor over user memory (no copy): `data` must hold `numel(s)` elements and outlive
/// every tensor that shares it. Writes through the tensor change the user's array.
template <Element T>
tensor<T> view_of(T* data, const shape& s) {
  const index_t n = check_shape("view_of", s);
  if (data == nullptr && n != 0)
    detail::fail("view_of", "got a null pointer for shape ", to_string(s), "; expected ", n, " elements of memory");
  auto impl = detail::make_pooled<detail::tensor_impl<T>>();
  impl->store = detail::make_pooled<storage<T>>(data, static_cast<std::size_t>(n));
  impl->sizes = s;
  impl->st = contiguous_strides(s);
  return tensor<T>(std::move(impl));
}

}  // namespace fusegrad
