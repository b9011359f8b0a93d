#pragma once
/// \file fusegrad/functional/values.hpp
/// The kinds of values the span engine (functional/engine.hpp) runs on, seen as bundles of
/// `T` components: `num<T>` (one), `dual<X>` (X's components, then its tangent's). A scalar
/// kind `Vs` (`num<T>`, `dual<num<T>>`) has a batch kind (`num<simd<T>>`, ...) that holds one
/// SIMD register per component; the engine loads, splats, stores and sums batches component
/// by component.

#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/simd.hpp"
#include "fusegrad/value/dual.hpp"

namespace fusegrad::detail::fn {

template <class V>
struct kind;
template <class V>
struct kind<num<V>> {
  static constexpr int n = 1;
  using elem = lane_type_t<V>;
  using scalar = num<elem>;
  using batch = num<simd<elem>>;
};
template <class X>
struct kind<dual<X>> {
  static constexpr int n = 2 * kind<X>::n;
  using elem = typename kind<X>::elem;
  using scalar = dual<typename kind<X>::scalar>;
  using batch = dual<typename kind<X>::batch>;
};
template <class V>
inline constexpr int n_comp = kind<V>::n;
template <class V>
using batch_of = typename kind<V>::batch;

/// The scalar value whose components are `c[0, n)`.
template <class Vs, class T>
constexpr Vs from_comps(const T* c) {
  if constexpr (requires(Vs v) { v.v; }) return Vs{c[0]};
  else return Vs{from_comps<decltype(Vs{}.p)>(c), from_comps<decltype(Vs{}.p)>(c + n_comp<decltype(Vs{}.p)>)};
}
template <class Vs, class T>
constexpr void to_comps(const Vs& v, T* c) {
  if constexpr (requires { v.v; }) c[0] = v.v;
  else to_comps(v.p, c), to_comps(v.t, c + n_comp<decltype(v.p)>);
}
/// Every lane of the batch holding `s`.
template <class Vs>
batch_of<Vs> splat(const Vs& s) {
  if constexpr (requires { s.v; }) return {simd<typename kind<Vs>::elem>(s.v)};
  else return {splat(s.p), splat(s.t)};
}
/// The batch whose component `k` is loaded from `p[k] + i` (zero where `p[k]` is null; the
/// first component, a range's values, is never null: no test for it per batch).
template <class Vb, class T, bool First = true>
Vb load_comps(const T* const* p, index_t i) {
  if constexpr (requires(Vb v) { v.v; }) {
    if constexpr (First) return Vb{simd<T>::load_unaligned(p[0] + i)};
    else return Vb{p[0] ? simd<T>::load_unaligned(p[0] + i) : simd<T>(T(0))};
  } else {
    using X = decltype(Vb{}.p);
    return Vb{load_comps<X, T, First>(p, i), load_comps<X, T, false>(p + n_comp<X>, i)};
  }
}
/// `load_comps` of a last, partial batch: its first `n` lanes (`load_head`; the padding is the
/// first lane's value, or zero).
template <bool PadFirst, class Vb, class T, bool First = true>
Vb load_head_comps(const T* const* p, index_t i, index_t n) {
  if constexpr (requires(Vb v) { v.v; }) {
    if constexpr (First) return Vb{load_head<PadFirst>(p[0] + i, n)};
    else return Vb{p[0] ? load_head<PadFirst>(p[0] + i, n) : simd<T>(T(0))};
  } else {
    using X = decltype(Vb{}.p);
    return Vb{load_head_comps<PadFirst, X, T, First>(p, i, n),
              load_head_comps<PadFirst, X, T, false>(p + n_comp<X>, i, n)};
  }
}
/// Stores component `k` of `v` at `p[k] + i` (aligned).
template <class Vb, class T>
void store_comps(const Vb& v, T* const* p, index_t i) {
  if constexpr (requires { v.v; }) v.v.store_aligned(p[0] + i);
  else store_comps(v.p, p, i), store_comps(v.t, p + n_comp<decltype(v.p)>, i);
}

}  // namespace fusegrad::detail::fn
