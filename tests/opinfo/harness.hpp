#pragma once
// What the generated tests of tests/opinfo/ share: samples from an entry's domains, calls
// with N tensors, references by hand-broadcasting, and comparisons.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "registry.hpp"

namespace opinfo {

namespace fg = fusegrad;
using fg::index_t;
template <class E, std::size_t N>
using tensors = std::array<fg::tensor<E>, N>;
template <std::size_t N>
using shapes = std::array<fg::shape, N>;

inline index_t count(const fg::shape& s) {
  index_t n = 1;
  for (index_t d : s) n *= d;
  return n;
}

/// Samples of `d` with shape `s` (deterministic per seed), kept in double.
inline std::vector<double> sample_values(const domain& d, const fg::shape& s, std::uint64_t seed) {
  std::vector<double> v = fg::rand<double>(s, seed, d.lo, d.hi).to_vector();
  if (d.mask)
    for (double& e : v) e = e < 0.5 ? 0.0 : 1.0;
  return v;
}
template <class E>
fg::tensor<E> to_tensor(const std::vector<double>& v, const fg::shape& s) {
  return fg::from_vector<E>(std::vector<E>(v.begin(), v.end()), s);
}

/// `entry.f` as a plain function pointer over tensors of `E` (one instantiation per entry).
template <class E, class Info>
auto fn_of(const Info& e) {
  if constexpr (Info::arity == 1) return static_cast<fg::tensor<E> (*)(const fg::tensor<E>&)>(e.f);
  else if constexpr (Info::arity == 2)
    return static_cast<fg::tensor<E> (*)(const fg::tensor<E>&, const fg::tensor<E>&)>(e.f);
  else return static_cast<fg::tensor<E> (*)(const fg::tensor<E>&, const fg::tensor<E>&, const fg::tensor<E>&)>(e.f);
}

template <class F, class T, std::size_t N>
decltype(auto) call(const F& f, const std::array<T, N>& x) {
  return [&]<std::size_t... I>(std::index_sequence<I...>)->decltype(auto) { return f(x[I]...); }
  (std::make_index_sequence<N>{});
}

/// The broadcast shape of `ss`, and for each of its elements the linear index into each operand.
template <std::size_t N>
std::vector<std::array<index_t, N>> broadcast_index(const shapes<N>& ss, fg::shape& out) {
  std::size_t rank = 0;
  for (const auto& s : ss) rank = std::max(rank, s.size());
  auto size_in = [rank](const fg::shape& s, std::size_t d) {
    return d < rank - s.size() ? index_t{1} : s[d - (rank - s.size())];
  };
  out.assign(rank, 1);
  for (std::size_t d = 0; d < rank; ++d)
    for (const auto& s : ss)
      if (size_in(s, d) != 1) out[d] = size_in(s, d);
  std::vector<std::array<index_t, N>> r;
  std::vector<index_t> idx(rank);
  for (index_t l = 0; l < count(out); ++l) {
    index_t rem = l;
    for (std::size_t d = rank; d-- > 0;) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    std::array<index_t, N> at{};
    for (std::size_t k = 0; k < N; ++k) {
      index_t li = 0;
      for (std::size_t d = rank - ss[k].size(); d < rank; ++d)
        li = li * size_in(ss[k], d) + (size_in(ss[k], d) == 1 ? 0 : idx[d]);
      at[k] = li;
    }
    r.push_back(at);
  }
  return r;
}

/// Whether `got` matches the reference `want` (rounded to E): NaN for NaN, the same infinity,
/// the same zero (signs included) where `exact_zero`, else within `tol` relative (absolute
/// below magnitude 1).
template <class E>
bool matches(E got, long double want, double tol) {
  const E w = static_cast<E>(want);
  if (std::isnan(w)) return std::isnan(got);
  if (std::isinf(w) || std::isinf(got)) return got == w;
  if (w == 0 && got == 0) return true;
  return std::abs(static_cast<double>(got) - static_cast<double>(want)) <=
         tol * std::max(1.0, std::abs(static_cast<double>(want)));
}
/// Bitwise equality (any NaN matches any NaN).
template <class E>
bool same_bits(E a, E b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(E)) == 0;
}
template <class E>
std::string first_bit_diff(const std::vector<E>& a, const std::vector<E>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << ": " << a[i] << " vs " << b[i];
      return os.str();
    }
  return {};
}

inline std::string str(const fg::shape& s) { return fg::to_string(s); }
template <std::size_t N>
std::string str(const shapes<N>& ss) {
  std::string r;
  for (const auto& s : ss) r += (r.empty() ? "" : " with ") + str(s);
  return r;
}

/// Operand shapes by shape class (0-d, one element, vector, matrix, broadcast, empty).
template <std::size_t N>
std::vector<shapes<N>> shape_classes() {
  auto same = [](fg::shape s) {
    shapes<N> r;
    r.fill(s);
    return r;
  };
  std::vector<shapes<N>> r = {same({}), same({1}), same({37}), same({5, 37}), same({0}), same({2, 0})};
  if constexpr (N == 2) {
    r.push_back({fg::shape{5, 1}, fg::shape{1, 37}});
    r.push_back({fg::shape{37}, fg::shape{}});
    r.push_back({fg::shape{}, fg::shape{5, 37}});
    r.push_back({fg::shape{3, 300}, fg::shape{300}});
    r.push_back({fg::shape{2, 0}, fg::shape{2, 1}});
  } else if constexpr (N == 3) {
    r.push_back({fg::shape{5, 1}, fg::shape{1, 37}, fg::shape{}});
    r.push_back({fg::shape{37}, fg::shape{5, 37}, fg::shape{5, 1}});
    r.push_back({fg::shape{}, fg::shape{3}, fg::shape{2, 1}});
  }
  return r;
}

/// Inputs for an entry: samples of each operand's domain with the given shapes; with
/// `strided`, the same values through non-contiguous views (every other element of a
/// buffer twice as long).
template <class E, class Info>
tensors<E, Info::arity> inputs(const Info& e, const shapes<Info::arity>& ss, std::uint64_t seed, bool strided = false) {
  tensors<E, Info::arity> r;
  for (std::size_t k = 0; k < Info::arity; ++k) {
    fg::shape s = ss[k];
    if (strided && !s.empty()) s.back() *= 2;
    const auto v = sample_values(e.dom[k], s, seed + 17 * k);
    r[k] = to_tensor<E>(v, s);
    if (strided && !ss[k].empty()) r[k] = r[k].slice(static_cast<index_t>(s.size()) - 1, 0, s.back(), 2);
  }
  return r;
}

/// Values an op meets at the edges and in the middle of its range, mixed so that every kind of
/// value sits beside every other in some SIMD batch: the entry's edge inputs, zeros, infinities,
/// NaN, tiny and huge magnitudes, values near multiples of π/2 and beyond 20π, and samples of
/// the domain.
template <class Info>
std::vector<std::array<double, Info::arity>> mixed_values(const Info& e) {
  std::vector<std::array<double, Info::arity>> r;
  for (const auto& s : e.specials) {
    std::array<double, Info::arity> a{};
    for (std::size_t k = 0; k < Info::arity; ++k) a[k] = s.x[k];
    r.push_back(a);
  }
  const double extra[] = {0.0,
                          -0.0,
                          inf,
                          -inf,
                          nan,
                          1e-30,
                          -1e-30,
                          1e-310,
                          3e4,
                          -3e4,
                          1e30,
                          -2e38,
                          1.5707963267948966,
                          4.71238898038469,
                          100.0,
                          709.0,
                          -745.0,
                          1e6,
                          0.5,
                          -0.5,
                          1.0,
                          -1.0,
                          2.0,
                          20.5,
                          1e15};
  std::size_t i = 0;
  for (double v : extra) {
    std::array<double, Info::arity> a{};
    for (std::size_t k = 0; k < Info::arity; ++k)
      a[k] = e.dom[k].mask ? (i + k) % 3 == 0 : (k == 0 ? v : extra[(i * 7 + k * 5) % std::size(extra)]);
    r.push_back(a);
    ++i;
  }
  std::array<std::vector<double>, Info::arity> samp;
  for (std::size_t k = 0; k < Info::arity; ++k) samp[k] = sample_values(e.dom[k], {40}, 77 + k);
  for (std::size_t j = 0; j < 40; ++j) {
    std::array<double, Info::arity> a{};
    for (std::size_t k = 0; k < Info::arity; ++k) a[k] = samp[k][j];
    r.push_back(a);
  }
  return r;
}

/// The mixed values as N tensors of one dim (operand k holds element k of each row).
template <class E, std::size_t N>
tensors<E, N> columns(const std::vector<std::array<double, N>>& rows) {
  tensors<E, N> r;
  for (std::size_t k = 0; k < N; ++k) {
    std::vector<double> v;
    for (const auto& row : rows) v.push_back(row[k]);
    r[k] = to_tensor<E>(v, {static_cast<index_t>(v.size())});
  }
  return r;
}

/// Inputs of `e` with shapes `ss`, resampled where the entry's `avoid` rejects a combination
/// of operands (kinks, poles) that broadcasting brings together.
template <class Info>
tensors<double, Info::arity> smooth_inputs(const Info& e, const shapes<Info::arity>& ss, std::uint64_t seed) {
  std::array<std::vector<double>, Info::arity> v;
  for (std::size_t k = 0; k < Info::arity; ++k) v[k] = sample_values(e.dom[k], ss[k], seed + 31 * k);
  if (e.avoid) {
    fg::shape out;
    const auto idx = broadcast_index(ss, out);
    for (int round = 0; round < 200; ++round) {
      bool clean = true;
      for (const auto& at : idx) {
        double p[Info::arity];
        for (std::size_t k = 0; k < Info::arity; ++k) p[k] = v[k][static_cast<std::size_t>(at[k])];
        if (!e.avoid(p)) continue;
        clean = false;
        const std::size_t k =
            Info::arity == 1 || e.dom[0].mask ? Info::arity - 1 : static_cast<std::size_t>(round) % Info::arity;
        v[k][static_cast<std::size_t>(at[k])] =
            sample_values(e.dom[k], {1}, seed + 1000 + static_cast<std::uint64_t>(round) * 7 + at[k])[0];
      }
      if (clean) break;
    }
  }
  tensors<double, Info::arity> r;
  for (std::size_t k = 0; k < Info::arity; ++k) r[k] = to_tensor<double>(v[k], ss[k]);
  return r;
}

/// Largest |a - b| relative to the largest |a| (NaN where exactly one is NaN).
template <class E>
double normwise(const std::vector<E>& a, const std::vector<E>& b) {
  double d = 0, m = 1e-300;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return opinfo::nan;
    if (std::isnan(a[i]) || a[i] == b[i]) continue;
    d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    m = std::max(m, std::abs(double(a[i])));
  }
  return d / m;
}

}  // namespace opinfo
