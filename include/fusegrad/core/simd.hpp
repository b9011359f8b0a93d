#pragma once
/// \file fusegrad/core/simd.hpp
/// The SIMD vocabulary shared by every kernel: the batch type, the tile (`tile_elems`), and the
/// few helpers that let one generic op definition serve a scalar (`float`, `double`) and an
/// xsimd batch alike.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include <xsimd/xsimd.hpp>

#include "fusegrad/core/element.hpp"

namespace fusegrad {

/// The SIMD register type fusegrad kernels use for `T` (xsimd's default architecture, the
/// widest the flags allow: AVX2 with `-mavx2 -mfma`, 8 floats or 4 doubles; AVX-512 with
/// `-march=native` on a machine that has it, 16 floats or 8 doubles; SSE2 otherwise).
template <Element T>
using simd = xsimd::batch<T>;

namespace detail {
template <class V>
inline constexpr bool is_scalar_v = std::is_floating_point_v<V>;
}

/// Helpers usable on scalars and batches, so an op's value is written once.
namespace detail {
/// The element type of a number or of a SIMD batch of numbers.
template <class V>
struct lane_type {
  using type = V;
};
template <class T, class A>
struct lane_type<xsimd::batch<T, A>> {
  using type = T;
};
template <class V>
using lane_type_t = typename lane_type<V>::type;

/// Elements per tile, the run of elements a loop works on at a time so that its values stay in
/// L1: 256 floats or doubles (1-2 KiB per value). The tile kernels (loops/tile.hpp) and the
/// loops that call them, the functional engine's sum buffers and strided sums' gather buffer
/// all cut their work in tiles of this many. (`index_t`'s type, spelled as in the rest of this
/// header, which does not include core/shape.hpp.)
inline constexpr std::int64_t tile_elems = 256;

#if defined(__AVX512F__)
/// The AVX-512 lane mask of a batch's first `n` lanes (0 < n <= 16; the shift is of a 32-bit
/// one, so n = 16, all lanes, is defined), for a `float` (16 lanes) or, cut to its low 8 bits,
/// a `double` (8 lanes) batch.
inline __mmask16 head_bits(std::int64_t n) noexcept { return static_cast<__mmask16>((1u << n) - 1u); }
/// Whether `T`'s batch is an AVX-512 register that the masked loads and stores serve.
template <class T>
inline constexpr bool avx512_batch = (std::is_same_v<T, float> && simd<T>::size == 16) ||
                                     (std::is_same_v<T, double> && simd<T>::size == 8);

/// `load_head` of an AVX-512 batch: one masked load, the padding zeroed (`maskz`) or taken
/// from a broadcast of `p[0]`.
template <bool PadFirst, class T>
inline simd<T> load_head_avx512(const T* p, std::int64_t n) noexcept {
  const __mmask16 m = head_bits(n);
  if constexpr (std::is_same_v<T, float>) {
    if constexpr (PadFirst) return simd<T>(_mm512_mask_loadu_ps(_mm512_set1_ps(*p), m, p));
    else return simd<T>(_mm512_maskz_loadu_ps(m, p));
  } else {
    const auto m8 = static_cast<__mmask8>(m);
    if constexpr (PadFirst) return simd<T>(_mm512_mask_loadu_pd(_mm512_set1_pd(*p), m8, p));
    else return simd<T>(_mm512_maskz_loadu_pd(m8, p));
  }
}
#endif

#if defined(__AVX2__)
/// The AVX2 lane mask of a batch's first `n` lanes (all bits set in those lanes), for a
/// `float` (8 lanes) or `double` (4 lanes) batch.
template <class T>
inline __m256i head_mask(std::int64_t n) noexcept {
  if constexpr (std::is_same_v<T, float>)
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  else return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}
/// Whether `T`'s batch is an AVX2 register that the masked loads and stores serve.
template <class T>
inline constexpr bool avx2_batch = (std::is_same_v<T, float> && simd<T>::size == 8) ||
                                   (std::is_same_v<T, double> && simd<T>::size == 4);

/// `load_head` of an AVX2 batch: one masked load (masked lanes read as zero), blended with a
/// broadcast of `p[0]` for `PadFirst`.
template <bool PadFirst, class T>
inline simd<T> load_head_avx2(const T* p, std::int64_t n) noexcept {
  const __m256i m = head_mask<T>(n);
  if constexpr (std::is_same_v<T, float>) {
    const __m256 v = _mm256_maskload_ps(p, m);
    if constexpr (!PadFirst) return simd<T>(v);
    else return simd<T>(_mm256_blendv_ps(_mm256_broadcast_ss(p), v, _mm256_castsi256_ps(m)));
  } else {
    const __m256d v = _mm256_maskload_pd(p, m);
    if constexpr (!PadFirst) return simd<T>(v);
    else return simd<T>(_mm256_blendv_pd(_mm256_broadcast_sd(p), v, _mm256_castsi256_pd(m)));
  }
}
#endif

/// The first `n` elements of `p` (0 < n <= the batch's size) in the first lanes of a batch,
/// the other lanes `p[0]` (`PadFirst`: a value of the data, no spurious inf or NaN in the
/// padding) or zero. With AVX-512 or AVX2 batches one masked load, which does not touch the
/// masked elements (nor fault on them): a batch read back from element-by-element stores
/// fails store-to-load forwarding (about 12 cycles per such load; a short call has several).
/// Other batches (SSE2, or a width neither serves) go through such a buffer.
template <bool PadFirst, Element T>
inline simd<T> load_head(const T* p, std::int64_t n) noexcept {
#if defined(__AVX512F__)
  if constexpr (avx512_batch<T>) return load_head_avx512<PadFirst>(p, n);
#endif
#if defined(__AVX2__)
  if constexpr (avx2_batch<T>) return load_head_avx2<PadFirst>(p, n);
#endif
  constexpr auto W = static_cast<std::int64_t>(simd<T>::size);
  alignas(64) T tmp[W];
  for (std::int64_t l = 0; l < W; ++l) tmp[l] = l < n ? p[l] : PadFirst ? p[0] : T(0);
  return simd<T>::load_aligned(tmp);
}

/// Stores the first `n` lanes of `v` at `p` (0 < n <= the batch's size), and nothing past
/// them (an AVX-512 or AVX2 masked store; element by element from a buffer otherwise).
template <Element T>
inline void store_head(T* p, const simd<T>& v, std::int64_t n) noexcept {
#if defined(__AVX512F__)
  if constexpr (avx512_batch<T>) {
    if constexpr (std::is_same_v<T, float>) _mm512_mask_storeu_ps(p, head_bits(n), v);
    else _mm512_mask_storeu_pd(p, static_cast<__mmask8>(head_bits(n)), v);
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (avx2_batch<T>) {
    if constexpr (std::is_same_v<T, float>) _mm256_maskstore_ps(p, head_mask<T>(n), v);
    else _mm256_maskstore_pd(p, head_mask<T>(n), v);
    return;
  }
#endif
  constexpr auto W = static_cast<std::int64_t>(simd<T>::size);
  alignas(64) T tmp[W];
  v.store_aligned(tmp);
  for (std::int64_t l = 0; l < n; ++l) p[l] = tmp[l];
}

/// Ends a value's computation here: the compiler may not contract an operation that produced
/// `v` with one that reads it (a multiply and a later add into one fused multiply-add, which
/// GCC does by default when both are inlined into one loop). Code that evaluates several
/// ops' values in registers calls it between ops, so each op rounds as it does alone (as the
/// eager kernels, which run one op per loop, round it). No instruction is emitted.
template <class V>
inline void op_boundary([[maybe_unused]] V& v) noexcept {
#if defined(__GNUC__)
  if constexpr (requires { v.data; }) asm("" : "+x"(v.data));
  else if constexpr (std::is_floating_point_v<V>) asm("" : "+x"(v));
#endif
}
/// `op_boundary` between the steps of an op whose `value` composes several ops (`tanh_backward`:
/// g (1 - y²)), so that it rounds as the composition does; nothing in a constant evaluation.
template <class V>
constexpr void round_here(V& v) noexcept {
  if (!std::is_constant_evaluated()) op_boundary(v);
}
}  // namespace detail

namespace lanes {

template <class V>
constexpr V select_gt(const V& a, const V& b, const V& if_true, const V& if_false) {
  if constexpr (detail::is_scalar_v<V>) return a > b ? if_true : if_false;
  else return xsimd::select(a > b, if_true, if_false);
}
/// 1 where `a > b`, else 0.
template <class V>
constexpr V gt(const V& a, const V& b) {
  return select_gt(a, b, V(1), V(0));
}
/// 1 where `a >= b`, else 0.
template <class V>
constexpr V ge(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) return a >= b ? V(1) : V(0);
  else return xsimd::select(a >= b, V(1), V(0));
}
/// 1 where `a == b`, else 0.
template <class V>
constexpr V eq(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) return a == b ? V(1) : V(0);
  else return xsimd::select(a == b, V(1), V(0));
}
/// 1 where `a != b` (NaN included, as in C), else 0. Not xsimd's batch `!=`: its AVX form
/// is the ordered compare (_CMP_NEQ_OQ), false for NaN, unlike its SSE2 form and C.
template <class V>
constexpr V ne(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) return a != b ? V(1) : V(0);
  else return xsimd::select(a == b, V(0), V(1));
}
/// The larger of `a` and `b`, propagating NaN from either side like `torch.maximum`.
template <class V>
constexpr V max(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  } else {
    return xsimd::select(xsimd::isnan(a), a, xsimd::select(xsimd::isnan(b), b, xsimd::max(a, b)));
  }
}
/// The smaller of `a` and `b`, propagating NaN from either side like `torch.minimum`.
template <class V>
V min(const V& a, const V& b) {
  if constexpr (detail::is_scalar_v<V>) {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? a : b;
  } else {
    return xsimd::select(xsimd::isnan(a), a, xsimd::select(xsimd::isnan(b), b, xsimd::min(a, b)));
  }
}
/// `if_nonzero` where `c != 0` (NaN counts as nonzero, as C's truth), else `if_zero`.
template <class V>
V select_nonzero(const V& c, const V& if_nonzero, const V& if_zero) {
  if constexpr (detail::is_scalar_v<V>) return c != V(0) ? if_nonzero : if_zero;
  else return xsimd::select(c == V(0), if_zero, if_nonzero);
}
/// -1, 0 or +1 by the sign of `a` (0 for 0 and NaN stays NaN).
template <class V>
constexpr V sign(const V& a) {
  if constexpr (detail::is_scalar_v<V>) {
    if (a != a) return a;
    return a > 0 ? V(1) : (a < 0 ? V(-1) : V(0));
  } else {
    return xsimd::select(a > V(0), V(1), xsimd::select(a < V(0), V(-1), xsimd::select(xsimd::isnan(a), a, V(0))));
  }
}

/// `f` on each lane on its own (on a scalar: `f(a)`): for the functions whose C library
/// form fusegrad uses on batches too (their special values, their accuracy, and a value that
/// cannot depend on the other lanes).
template <class V, class F>
V per_lane(const V& a, F f) {
  if constexpr (detail::is_scalar_v<V>) {
    return f(a);
  } else {
    using T = typename V::value_type;
    alignas(64) T x[V::size];
    a.store_aligned(x);
    for (std::size_t k = 0; k < V::size; ++k) x[k] = f(x[k]);
    return V::load_aligned(x);
  }
}
/// `f` on each pair of lanes (on scalars: `f(a, b)`).
template <class V, class F>
V per_lane(const V& a, const V& b, F f) {
  if constexpr (detail::is_scalar_v<V>) {
    return f(a, b);
  } else {
    using T = typename V::value_type;
    alignas(64) T x[V::size], y[V::size];
    a.store_aligned(x);
    b.store_aligned(y);
    for (std::size_t k = 0; k < V::size; ++k) x[k] = f(x[k], y[k]);
    return V::load_aligned(x);
  }
}

/// `std::pow`, on scalars and, lane by lane, on batches: C's pow everywhere (its special
/// values, `pow(1, NaN) = 1`, `pow(-inf, 0.5) = inf`, `pow(-0, -1) = -inf`, ..., and its
/// accuracy). xsimd's batch pow is exp(b log a): besides the special values it gets wrong, it
/// loses precision as |b log a| grows, flushes subnormal results to 0 (pow(x, 1) != x), and it
/// measured slower than glibc's pow for doubles and not much faster for floats.
template <class V>
V pow(const V& a, const V& b) {
  return per_lane(a, b, [](auto x, auto y) { return std::pow(x, y); });
}

namespace detail_exp {
/// Past ±4096 xsimd's exp, exp2, expm1, sinh and cosh have overflowed to ±inf or reached 0 or
/// -1, and its tanh is ±1: any argument beyond gives the bits it gives there.
inline constexpr double saturated = 4096;
/// `f`, one of xsimd's exp, exp2, expm1, sinh, cosh and tanh (which go through the first
/// three), of a batch, defined in every lane. xsimd 8 builds their 2^k from k = round(x / ln 2)
/// (x's own for exp2) converted to int64, which no instruction does below AVX-512: a C++
/// conversion lane by lane, undefined for NaN and for |k| >= 2^63 (|x| past about 6e18). So a
/// double lane is clamped to ±4096, where the function is saturated (no result changes), and a
/// NaN lane is evaluated at -4096 and given back as its NaN. (AVX-512DQ converts by an
/// instruction, defined for every lane; the clamp, which changes no result, is kept there too:
/// one form at every width.) Floats convert to int32 by an instruction, defined in every lane:
/// no change.
template <class V, class F>
inline V exp_family(const V& x, F f) {
  if constexpr (std::is_same_v<typename V::value_type, double>) {
    const V lim(saturated);
    const auto nan = xsimd::isnan(x);
    const V r = f(xsimd::select(nan, -lim, xsimd::min(xsimd::max(x, -lim), lim)));
    return xsimd::select(nan, x + x, r);
  } else {
    return f(x);
  }
}
}  // namespace detail_exp

/// `exp`, on scalars (`std::exp`) and batches (xsimd's, defined for every lane: see
/// `detail_exp::exp_family`). The ops' values call these, not xsimd's functions themselves.
template <class V>
constexpr V exp(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::exp(x);
  else return detail_exp::exp_family(x, [](const V& v) { return xsimd::exp(v); });
}
/// `exp2`, as `exp`.
template <class V>
constexpr V exp2(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::exp2(x);
  else return detail_exp::exp_family(x, [](const V& v) { return xsimd::exp2(v); });
}
/// `expm1`, as `exp`.
template <class V>
constexpr V expm1(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::expm1(x);
  else return detail_exp::exp_family(x, [](const V& v) { return xsimd::expm1(v); });
}
/// `sinh`, as `exp`.
template <class V>
constexpr V sinh(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::sinh(x);
  else return detail_exp::exp_family(x, [](const V& v) { return xsimd::sinh(v); });
}
/// `cosh`, as `exp`, of |x|: xsimd's works on |x|, and so gives a NaN without its sign.
template <class V>
constexpr V cosh(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::cosh(x);
  else return detail_exp::exp_family(xsimd::abs(x), [](const V& v) { return xsimd::cosh(v); });
}
/// `tanh`, as `exp`.
template <class V>
constexpr V tanh(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::tanh(x);
  else return detail_exp::exp_family(x, [](const V& v) { return xsimd::tanh(v); });
}

namespace detail_trig {
/// xsimd's sin/cos reduce their argument by one method per batch, picked by the batch's
/// largest |x|: up to 20π three Cody-Waite steps (and cheaper forms for |x| <= π/2, which
/// give the same bits), up to `mediumpi` a longer form with correction terms, beyond (and
/// for inf, NaN) Payne-Hanek lane by lane. The methods round differently near multiples of
/// π/2, so an element's result would depend on the other elements of its batch. Evaluating
/// each of those three classes on its own (the other lanes filled with a member of the
/// class) and selecting gives every element its own class's result, wherever it sits; a
/// batch of one class (the usual case) costs one evaluation and two compares.
///
/// `trig_fn`: which of xsimd's functions a batch goes through class by class.
enum class trig_fn { sin, cos, tan };
template <trig_fn F, class V>
inline V xsimd_trig(const V& v) {
  if constexpr (F == trig_fn::sin) return xsimd::sin(v);
  else if constexpr (F == trig_fn::cos) return xsimd::cos(v);
  else return xsimd::tan(v);
}
/// `F` of a batch that `by_reduction_class` does not take in one evaluation: each class of
/// lanes on its own (the other lanes filled with a member of the class), then selected.
template <trig_fn F, class V>
V per_reduction_class(V x) {
  using T = typename V::value_type;
  const V ax = xsimd::abs(x);
  const auto small = ax <= xsimd::constants::twentypi<V>();
  const auto medium = ax <= xsimd::constants::mediumpi<V>();                                       // false for NaN
  if (!xsimd::any(medium) || (xsimd::all(medium) && xsimd::none(small))) return xsimd_trig<F>(x);  // one class
  V r = xsimd_trig<F>(xsimd::select(medium, V(std::numeric_limits<T>::infinity()), x));            // large lanes
  const V mid = V(T(64));  // in (20π, mediumpi] for float and double
  r = xsimd::select(medium, xsimd_trig<F>(xsimd::select(medium && !small, x, mid)), r);  // medium lanes
  return xsimd::select(small, xsimd_trig<F>(xsimd::select(small, x, V(T(0)))), r);       // small lanes
}
/// `out[i] = F(x[i])` for `n` lanes, class by class, in batches of this TU's `simd<T>` (zeros,
/// of the small class, fill a last partial batch: no lane's class depends on another's).
/// Out of line and typed by the element, not the batch, so that the precompiled runtime
/// holds it (fusegrad/runtime.hpp) and a TU that calls `sin` compiles none of xsimd's
/// large-argument reduction (Payne-Hanek: about 6 KB of code per TU); the usual path holds one
/// inlined copy of the function.
template <trig_fn F, class T>
[[gnu::noinline, gnu::cold]] void trig_by_class(const T* x, T* out, int n) {
  using V = xsimd::batch<T>;
  for (int i = 0; i < n; i += static_cast<int>(V::size)) {
    const int m = std::min(static_cast<int>(V::size), n - i);
    T in[V::size] = {}, r[V::size];
    std::copy(x + i, x + i + m, in);
    per_reduction_class<F>(V::load_unaligned(in)).store_unaligned(r);
    std::copy(r, r + m, out + i);
  }
}
#if XSIMD_VERSION_MAJOR == 8
/// What `sin` and `cos` of a batch whose every |x| is at most 20π share: xsimd 8's own steps
/// for that class (three Cody-Waite steps, its polynomials `sin_eval`/`cos_eval`, the
/// quadrant), so the bits are `xsimd::sin`/`xsimd::cos`'s. Written out here because xsimd's
/// `cos` first tests the batch against π/4 and π/2 (forms that give the same bits) and keeps
/// its whole reduction, Payne-Hanek loop included, one out-of-line call, which a hot loop
/// over small arguments should not pay. Both polynomials are
/// evaluated whichever function is wanted (the quadrant picks one per lane), so the sine and
/// the cosine of one argument cost one evaluation (`sincos`).
template <class V>
struct small_trig_parts {
  V se, ce, n;  ///< the two polynomials at the reduced argument, and the quadrant (0 to 3)
  explicit small_trig_parts(const V& x) {
    namespace xk = xsimd::kernel::detail;
    using T = typename V::value_type;
    const V ax = xsimd::abs(x);
    const V xi = xsimd::nearbyint(ax * xsimd::constants::twoopi<V>());
    V xr = xsimd::fnma(xi, xsimd::constants::pio2_1<V>(), ax);
    xr -= xi * xsimd::constants::pio2_2<V>();
    xr -= xi * xsimd::constants::pio2_3<V>();
    const V a = xi * V(T(0.25));
    n = (a - xsimd::floor(a)) * V(T(4));  // as xsimd computes it
    const V z = xr * xr;
    se = xk::sin_eval(z, xr), ce = xk::cos_eval(z);
  }
  auto odd() const {
    using T = typename V::value_type;
    return (n == V(T(1))) || (n == V(T(3)));
  }
  /// sin: cos_eval in odd quadrants, negated in quadrants 2 and 3, times sign(x).
  V sin(const V& x) const {
    using T = typename V::value_type;
    const V sign = xsimd::bitofsign(x) ^ xsimd::select(n >= V(T(2)), xsimd::constants::signmask<V>(), V(T(0)));
    return xsimd::select(odd(), ce, se) ^ sign;
  }
  /// cos: sin_eval in odd quadrants, negated in quadrants 1 and 2.
  V cos() const {
    using T = typename V::value_type;
    const auto flip = (n == V(T(1))) || (n == V(T(2)));
    return xsimd::select(odd(), se, ce) ^ xsimd::select(flip, xsimd::constants::signmask<V>(), V(T(0)));
  }
};
/// `sin` (`Sin`) or `cos` of a batch whose every |x| is at most 20π (see `small_trig_parts`).
template <bool Sin, class V>
inline V small_trig(const V& x) {
  const small_trig_parts<V> p(x);
  if constexpr (Sin) return p.sin(x);
  else return p.cos();
}
/// Both, from one reduction.
template <class V>
inline std::pair<V, V> small_sincos(const V& x) {
  const small_trig_parts<V> p(x);
  return {p.sin(x), p.cos()};
}
#else
template <bool Sin, class V>
inline V small_trig(const V& x) {  // another xsimd: its own functions
  if constexpr (Sin) return xsimd::sin(x);
  else return xsimd::cos(x);
}
template <class V>
inline std::pair<V, V> small_sincos(const V& x) {
  return {xsimd::sin(x), xsimd::cos(x)};
}
#endif

/// `F` of a batch, class by class: `small` (the same bits as `F` on that class, possibly
/// cheaper) inline when every |x| <= 20π, the evaluation per class out of line otherwise
/// (its lanes through memory to a function of the element type).
template <trig_fn F, class V, class Small>
inline V by_reduction_class(const V& x, Small small) {
  if (xsimd::all(xsimd::abs(x) <= xsimd::constants::twentypi<V>())) [[likely]]
    return small(x);  // one class: |x| <= 20π
  using T = typename V::value_type;
  T lanes[V::size];  // (in place: `trig_by_class` reads each batch before it writes it)
  x.store_unaligned(lanes);
  trig_by_class<F, T>(lanes, lanes, static_cast<int>(V::size));
  return V::load_unaligned(lanes);
}
}  // namespace detail_trig

/// `sin`, on scalars (`std::sin`) and batches (xsimd's, with each element's value independent
/// of its neighbours: see `detail_trig::by_reduction_class`).
template <class V>
V sin(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::sin(x);
  else
    return detail_trig::by_reduction_class<detail_trig::trig_fn::sin>(
        x, [](const V& v) { return detail_trig::small_trig<true>(v); });
}
/// `cos`, as `sin`.
template <class V>
V cos(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::cos(x);
  else
    return detail_trig::by_reduction_class<detail_trig::trig_fn::cos>(
        x, [](const V& v) { return detail_trig::small_trig<false>(v); });
}
/// `{sin(x), cos(x)}`, each with the bits of `sin` and `cos` above, from one reduction of the
/// argument (the price of one of them where every |x| <= 20π): what a graph that needs both
/// (a forward `cos` and its backward's `sin`) computes.
template <class V>
inline std::pair<V, V> sincos(const V& x) {
  if constexpr (detail::is_scalar_v<V>) {
    return {std::sin(x), std::cos(x)};
  } else {
    if (xsimd::all(xsimd::abs(x) <= xsimd::constants::twentypi<V>())) [[likely]]
      return detail_trig::small_sincos(x);
    // The other class out of line, through arrays of this call's own: a reference to `x`
    // passed to an out-of-line function would let the caller's array of batches escape (a
    // fused loop keeps its values in one), and every value of the loop would be stored.
    using T = typename V::value_type;
    T lanes[V::size], s[V::size], c[V::size];
    x.store_unaligned(lanes);
    detail_trig::trig_by_class<detail_trig::trig_fn::sin, T>(lanes, s, static_cast<int>(V::size));
    detail_trig::trig_by_class<detail_trig::trig_fn::cos, T>(lanes, c, static_cast<int>(V::size));
    return {V::load_unaligned(s), V::load_unaligned(c)};
  }
}
/// `tan`, as `sin` (xsimd's tan reduces its argument as sin and cos do).
template <class V>
V tan(const V& x) {
  if constexpr (detail::is_scalar_v<V>) return std::tan(x);
  else return detail_trig::by_reduction_class<detail_trig::trig_fn::tan>(x, [](const V& v) { return xsimd::tan(v); });
}

}  // namespace lanes
}  // namespace fusegrad
