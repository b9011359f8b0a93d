#pragma once
/// \file fusegrad/functional/engine.hpp
/// The span engine: a transformed function of ranges (`std::span`, `std::array`, vectors,
/// tensors' elements) and scalars, evaluated in one loop over the elements. Its expression
/// is an upper, scalar part over reductions (`fg::sum`, `fg::mean`) of element-wise parts
/// (`sum(cos(cos(x)) * y)`, `-n log(sigma) - 0.5 sum(((x - mu) / sigma)^2)`), or one
/// element-wise part (a function returning a range).
///
/// A pass walks the elements SIMD batch by batch, in tiles of `tile_elems` elements: for each
/// batch it evaluates the element-wise parts forward (`fwd`, in registers) and, in a
/// backward pass, pushes each reduction's adjoint back through them (`back`) right away:
/// nothing is saved to memory. A slow op's operand that holds one slow op itself (the inner
/// `cos` of `cos(cos(x))`) is computed over the tile's full batches first, its value trees
/// into an L1 buffer that the batches read back (functional/stages.hpp): a batch then waits
/// on one slow op, not on a chain of them. Gradients of ranges are stored as they come (added,
/// where the argument appears sliced at several offsets); the reductions' values and the
/// scalars' gradients (sums over the elements) go through a tile buffer into fusegrad's one
/// summation (`running_sum`, core/accumulate.hpp), so a sum here has the bits of eager
/// `fg::sum`. The last, partial batch runs through the same SIMD code, padded. Nothing is
/// allocated.

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <tuple>

#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/functional/eval.hpp"
#include "fusegrad/functional/stages.hpp"
#include "fusegrad/functional/values.hpp"
#include "fusegrad/ops/op.hpp"

namespace fusegrad::detail::fn {

/// A scalar argument: its value, and its value in every lane.
template <class Vs>
struct scalar_slot {
  Vs s;
  batch_of<Vs> b;
};
/// A range argument: its elements (component `k` of element `i` at `src[k][i]`; a null
/// component is zero, e.g. a range with no tangent; the first is never null) and their number.
template <class Vs>
struct span_slot {
  const typename kind<Vs>::elem* src[n_comp<Vs>] = {};
  index_t size = 0;
};
/// An argument the transform hands to the function unchanged.
struct pass_slot {};

template <class S>
inline constexpr bool is_scalar_slot_v = false;
template <class Vs>
inline constexpr bool is_scalar_slot_v<scalar_slot<Vs>> = true;
template <class S>
inline constexpr bool is_span_slot_v = false;
template <class Vs>
inline constexpr bool is_span_slot_v<span_slot<Vs>> = true;

template <class Slots, template <class> class Is>
constexpr std::uint64_t slot_mask() {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return (std::uint64_t{0} | ... | (Is<std::tuple_element_t<I, Slots>>::value ? std::uint64_t{1} << I : 0));
  }
  (std::make_index_sequence<std::tuple_size_v<Slots>>{});
}
template <class S>
struct is_scalar_slot : std::bool_constant<is_scalar_slot_v<S>> {};
template <class S>
struct is_span_slot : std::bool_constant<is_span_slot_v<S>> {};

// ---- where the leaves' values come from ---------------------------------------------------

/// Inside the loop: batch `pos` (of `rem` valid lanes when not `Full`); the stages of `Buf`
/// (`stage_buffers`) read from their trees at the tile's batch `tile_batch`.
template <class Vs, bool Full, class Slots, bool Back, class Buf = no_stages>
struct batch_ctx {
  using T = typename kind<Vs>::elem;
  using Vb = batch_of<Vs>;
  static constexpr bool hoisting = true;
  static constexpr bool backward = Back;  ///< a backward follows: sin and cos with their siblings
  const Slots& slots;
  const Vb* hoisted_values;  ///< per mark: a hoisted subexpression's value in every lane
  index_t pos, rem;
  const Buf* staged = nullptr;
  std::size_t tile_batch = 0;

  /// Which stage node `E` is, where this context reads it (-1: computed here).
  template <class E>
  static constexpr int stage_of = Buf::template index<E>;
  template <class E>
  const auto& staged_tree() const {
    return staged->template get<stage_of<E>>(tile_batch);
  }

  template <std::size_t I>
  Vb leaf(const scalar_arg<I, T>&) const {
    return std::get<I>(slots).b;
  }
  template <std::size_t I>
  Vb leaf(const span_arg<I, T>& a) const {
    const auto& sl = std::get<I>(slots);
    if constexpr (Full) return load_comps<Vb>(sl.src, a.offset + pos);
    else return load_head_comps<true, Vb>(sl.src, a.offset + pos, rem);  // padded with the first valid lane
  }
  /// Data: loaded as a range argument is, with masked tails; its tangents are zero.
  Vb leaf(const data_arg<T>& d) const {
    const T* src[n_comp<Vs>] = {d.ptr + d.offset};
    if constexpr (Full) return load_comps<Vb>(src, pos);
    else return load_head_comps<true, Vb>(src, pos, rem);
  }
  Vb constant(T x) const { return lift<Vb>(x); }
  template <int B, class H>
  Vb hoisted(const H&) const {
    return hoisted_values[B];
  }
};

/// Outside the loop: the scalars and the reductions' values.
template <class Vs, class Slots>
struct upper_ctx {
  using T = typename kind<Vs>::elem;
  static constexpr bool hoisting = false;
  const Slots& slots;
  const Vs* red;
  const range_stat_rec<T>* rst = nullptr;  ///< per mark: a statistic of a range's sums
  template <std::size_t I>
  Vs leaf(const scalar_arg<I, T>&) const {
    return std::get<I>(slots).s;
  }
  /// An element of a range argument, with its tangents (zero where the range has none).
  template <std::size_t I>
  Vs element(const element_arg<I, T>& a) const {
    const auto& sl = std::get<I>(slots);
    T c[n_comp<Vs>];
    for (int k = 0; k < n_comp<Vs>; ++k) c[k] = sl.src[k] ? sl.src[k][a.i] : T(0);
    return from_comps<Vs>(c);
  }
  Vs constant(T x) const { return lift<Vs>(x); }
  template <int B, class R>
  Vs reduction(const R&) const {
    return red[B];
  }
  template <int B, class R>
  const range_stat_rec<T>& range_stat(const R&) const {
    return rst[B];
  }
};

// ---- where the adjoints go -------------------------------------------------------------------

/// Adjoints of the scalars and of the reductions, outside the loop.
template <class Vs, int NR, int NA>
struct upper_state {
  Vs red[NR > 0 ? NR : 1]{};
  Vs arg[NA > 0 ? NA : 1]{};
};
/// Where the upper part writes ranges' gradients (a statistic of a range's): the gradients'
/// arrays (`n_comp` per argument) and the arguments.
template <class T, class Slots>
struct range_out {
  T* const* out;
  const Slots* slots;
};
struct no_ranges {};
template <std::uint64_t Mask, class St, class Rg = no_ranges>
struct upper_sink {
  static constexpr std::uint64_t mask = Mask;
  static constexpr bool reductions = true, hoisting = false;
  St* st;
  Rg rg{};
  /// Adds a statistic of a range's gradient in its range (`e.x`), its adjoint being `g`.
  template <class E, class Y, class G>
  upper_sink range_stat_x(const E& e, const Y& mu, const Y& sigma, const G& g) const {
    static_assert(!std::is_same_v<Rg, no_ranges>, "fusegrad (internal): a range's gradient without its array");
    constexpr std::size_t I = std::remove_cvref_t<decltype(e.x)>::index;
    if (auto* gx = rg.out[I])  // (numbers: one component)
      range_rule<E>::type::add_grad_x(gx + e.x.offset, std::get<I>(*rg.slots).src[0] + e.x.offset, e.x.count, mu.v,
                                      sigma.v, g.v);
    return *this;
  }
  template <std::size_t I, class T, class G>
  constexpr upper_sink leaf(const scalar_arg<I, T>&, const G& g) const {
    st->arg[I] = st->arg[I] + g;
    return *this;
  }
  /// Adds the adjoint of element `a.i` of a range argument to that element of its gradient
  /// (whose array the engine zeroed first).
  template <std::size_t I, class T, class G>
  upper_sink element(const element_arg<I, T>& a, const G& g) const {
    static_assert(!std::is_same_v<Rg, no_ranges>, "fusegrad (internal): a range's gradient without its array");
    constexpr int nc = n_comp<std::remove_cvref_t<G>>;
    T c[nc];
    to_comps(g, c);
    for (int k = 0; k < nc; ++k)
      if (T* d = rg.out[I * nc + k]) d[a.i] += c[k];
    return *this;
  }
  template <int B, class R, class G>
  constexpr upper_sink reduction(const R&, const G& g) const {
    st->red[B] = st->red[B] + g;
    return *this;
  }
};

/// Adjoints inside the loop, for one batch: per argument, the adjoint of its first
/// occurrence's slice, to which later occurrences at the same offset add (in registers);
/// occurrences at other offsets are added to the output at once.
template <class Vs, int NA, int NM>
struct batch_state {
  using T = typename kind<Vs>::elem;
  using Vb = batch_of<Vs>;
  static constexpr index_t W = static_cast<index_t>(simd<T>::size);
  Vb pend[NA];
  index_t off[NA];
  bool has[NA] = {};
  Vb hpend[NM > 0 ? NM : 1];  ///< per mark: a hoisted subexpression's adjoint in this batch
  bool hhas[NM > 0 ? NM : 1] = {};
  T* const* out;    // out[I * n_comp + k]: component k of argument I's gradient
  const bool* add;  // add[I]: the output is a sum (zeroed first) rather than stored once
  index_t pos, rem;

  /// Writes (or adds) `g` at elements `[o + pos, ...)` of argument `i`'s gradient.
  void write(int i, index_t o, const Vb& g, bool accumulate) { write_at(out + i * n_comp<Vs>, o, g, accumulate); }
  /// Writes (or adds) `g` at elements `[o + pos, ...)` of the `n_comp` arrays `p` (a null
  /// array is not written).
  void write_at(T* const* p, index_t o, const Vb& g, bool accumulate) {
    constexpr int nc = n_comp<Vs>;
    simd<T> c[nc];
    comps(g, c);
    for (int k = 0; k < nc; ++k) {
      T* d = p[k];
      if (!d) continue;
      d += o + pos;
      if (rem == W) {
        (accumulate ? simd<T>::load_unaligned(d) + c[k] : c[k]).store_unaligned(d);
      } else {
        store_head(d, accumulate ? load_head<false>(d, rem) + c[k] : c[k], rem);
      }
    }
  }
  template <class X>
  static void comps(const X& v, simd<T>* c) {
    if constexpr (requires { v.v; }) c[0] = v.v;
    else comps(v.p, c), comps(v.t, c + n_comp<decltype(v.p)>);
  }
};
template <std::uint64_t Mask, class St>
struct batch_sink {
  static constexpr std::uint64_t mask = Mask;
  static constexpr bool reductions = false, hoisting = true;
  St* st;
  template <int B, class H, class G>
  batch_sink hoisted(const H&, const G& g) const {
    add_adjoint_to(st->hpend[B], st->hhas[B], g);
    return *this;
  }
  template <std::size_t I, class T, class G>
  batch_sink leaf(const scalar_arg<I, T>&, const G& g) const {
    add_adjoint_to(st->pend[I], st->has[I], g);
    return *this;
  }
  template <std::size_t I, class T, class G>
  [[gnu::always_inline]] batch_sink leaf(const span_arg<I, T>& a, const G& g) const {
    if (!st->has[I]) st->pend[I] = g, st->off[I] = a.offset, st->has[I] = true;
    else if (st->off[I] == a.offset) st->pend[I] = st->pend[I] + g;
    else st->write(static_cast<int>(I), a.offset, g, true);
    return *this;
  }
};

// ---- the walk ------------------------------------------------------------------------------

/// Calls `fn(std::integral_constant<int, B>{}, r)` for each reduction `r` of an element-wise
/// part of `e`, numbered in pre-order from `B`.
template <int B, class E, class Fn>
constexpr void each_reduction(const E& e, Fn&& fn) {
  if constexpr (is_real_reduction_v<E>) {
    fn(std::integral_constant<int, B>{}, e);
  } else if constexpr (arity_v<E> > 0) {
    [&]<std::size_t... J>(std::index_sequence<J...>) { (each_reduction<child_base<E, J>(B)>(child<J>(e), fn), ...); }
    (std::make_index_sequence<arity_v<E>>{});
  }
}
/// Calls `fn(std::integral_constant<int, B>{}, r)` for each statistic of a range `r` in `e`
/// (`range_stat_expr`), numbered as `fwd` numbers it.
template <int B, class E, class Fn>
constexpr void each_range_stat(const E& e, Fn&& fn) {
  if constexpr (is_range_stat_v<E>) {
    fn(std::integral_constant<int, B>{}, e);
  } else if constexpr (range_stats<E>() > 0) {
    [&]<std::size_t... J>(std::index_sequence<J...>) { (each_range_stat<child_base<E, J>(B)>(child<J>(e), fn), ...); }
    (std::make_index_sequence<arity_v<E>>{});
  }
}
/// The arguments whose ranges `E`'s statistics of ranges read.
template <class E>
constexpr std::uint64_t range_stat_args() {
  if constexpr (is_range_stat_v<E>) return info<std::remove_cvref_t<decltype(std::declval<E>().x)>>::args;
  else return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return (std::uint64_t{0} | ... | range_stat_args<child_t<E, J>>());
    }
  (std::make_index_sequence<arity_v<E>>{});
}

/// The arguments `E` reads single elements of (`x[i]`).
template <class E>
constexpr std::uint64_t element_args() {
  if constexpr (is_element_v<E>) return info<E>::args;
  else return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return (std::uint64_t{0} | ... | element_args<child_t<E, J>>());
    }
  (std::make_index_sequence<arity_v<E>>{});
}

/// Calls `fn(leaf)` for each argument leaf of `e` (and each leaf of data).
template <class E, class Fn>
constexpr void each_leaf(const E& e, Fn&& fn) {
  if constexpr (is_arg_v<E>) fn(e);
  else if constexpr (arity_v<E> > 0) [&]<std::size_t... J>(std::index_sequence<J...>) {
      (each_leaf(child<J>(e), fn), ...);
    }
  (std::make_index_sequence<arity_v<E>>{});
}

/// Calls `fn(std::integral_constant<int, B>{}, h)` for each hoisted subexpression `h` of an
/// element-wise part of `e` (`Elem`: `e` is inside one).
template <int B, bool Elem, class E, class Fn>
constexpr void each_hoist(const E& e, Fn&& fn) {
  if constexpr (Elem && hoistable_v<E>) {
    fn(std::integral_constant<int, B>{}, e);
  } else if constexpr (is_real_reduction_v<E>) {
    each_hoist<B + 1, true>(e.arg, fn);
  } else if constexpr (!hoistable_v<E> && arity_v<E> > 0) {
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (each_hoist < child_base<E, J>(B), Elem || info<E>::elementwise > (child<J>(e), fn), ...);
    }
    (std::make_index_sequence<arity_v<E>>{});
  }
}

/// Calls `fn(std::integral_constant<int, B>{}, h)` for each hoisted subexpression `h` of the
/// element-wise parts a pass runs (`only`: one reduction's, or all) that reaches an argument
/// in `Mask`.
template <std::uint64_t Mask, class E, class Fn>
// Always inlined: `run_batch` calls it per batch, and once `run_batch` is, GCC left it out of line.
[[gnu::always_inline]] inline void each_pass_hoist(const E& e, int only, Fn&& fn) {
  auto wanted_only = [&](auto h, const auto& x) {
    if constexpr ((info<std::remove_cvref_t<decltype(x)>>::args & Mask) != 0) fn(h, x);
  };
  if constexpr (info<E>::elementwise) each_hoist<0, true>(e, wanted_only);
  else
    each_reduction<0>(e, [&](auto b, const auto& r) {
      if (only < 0 || b == only) each_hoist<decltype(b)::value + 1, true>(r.arg, wanted_only);
    });
}

/// The arguments `e`'s element-wise parts read themselves, outside hoisted subexpressions
/// (`Elem`: `e` is inside one): a scalar among them gets an adjoint per element, summed over
/// the elements; a scalar that only hoisted subexpressions read gets its adjoint through
/// theirs, once (`1 / sigma` in `(x - mu) * (1 / sigma)` puts no sum over the elements on
/// `sigma`).
template <bool Elem, class E>
constexpr std::uint64_t element_read_args() {
  if constexpr (is_arg_v<E>) return Elem ? info<E>::args : 0;
  else if constexpr (hoistable_v<E>) return 0;
  else if constexpr (is_real_reduction_v<E>) return element_read_args<true, child_t<E, 0>>();
  else return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return (std::uint64_t{0} | ... | element_read_args < Elem || info<E>::elementwise, child_t < E, J >> ());
    }
  (std::make_index_sequence<arity_v<E>>{});
}
/// The scalars among the arguments in `Mask` whose adjoints a pass sums over the elements.
template <std::uint64_t Mask, class E, class Slots>
inline constexpr std::uint64_t summed_scalars =
    slot_mask<Slots, is_scalar_slot>() & Mask& element_read_args<info<E>::elementwise, E>();

/// What computing one element of `E`'s element-wise parts costs (`op_cost`, ops/op.hpp: an
/// arithmetic op 0.3, a `cos` 5.3; a custom op counted as 5), hoisted subexpressions not
/// counted.
template <class E>
constexpr double element_cost() {
  double own = 0;
  if constexpr (info<E>::elementwise && !is_arg_v<E>) {
    if constexpr (requires { std::declval<E>().op; }) own = op_cost<decltype(std::declval<E>().op)>();
    else own = 5;
  }
  return [&]<std::size_t... J>(std::index_sequence<J...>) { return (own + ... + element_cost<child_t<E, J>>()); }
  (std::make_index_sequence<arity_v<E>>{});
}
/// The hoisted subexpressions inside `E`'s element-wise parts (`each_hoist`'s count).
template <bool Elem, class E>
constexpr int element_hoists() {
  if constexpr (Elem && hoistable_v<E>) return 1;
  else if constexpr (is_real_reduction_v<E>) return element_hoists<true, child_t<E, 0>>();
  else if constexpr (hoistable_v<E>) return 0;
  else return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return (0 + ... + element_hoists < Elem || info<E>::elementwise, child_t < E, J >> ());
    }
  (std::make_index_sequence<arity_v<E>>{});
}

/// What one pass reads and writes.
template <class Vs, int NA>
struct pass_io {
  using T = typename kind<Vs>::elem;
  const Vs* red_adj = nullptr;            ///< backward: each reduction's adjoint
  Vs* red_val = nullptr;                  ///< each reduction's value
  Vs* arg_adj = nullptr;                  ///< the scalars' adjoints (added to)
  T* const* out = nullptr;                ///< the ranges' gradients, `n_comp` pointers per argument
  const bool* add = nullptr;              ///< per argument: its gradient is added to (zeroed before)
  T* const* y = nullptr;                  ///< an element-wise output's value (`n_comp` pointers)
  const T* const* ybar = nullptr;         ///< an element-wise output's cotangent
  const batch_of<Vs>* hoisted = nullptr;  ///< per mark: hoisted subexpressions' values, splat
  Vs* hoisted_adj = nullptr;              ///< per mark: their adjoints (added to)
  int only = -1;                          ///< the one reduction this pass runs (-1: all)
};

/// One batch: the element-wise parts forward and back. (`[[gnu::flatten]]` here ran the
/// cos(cos(x)) * y case a little faster, but made the 40-node test function's TU take many
/// times as long to compile at -O3: its value tree is several hundred nodes, the tree
/// repeating reused subexpressions.)
/// `put(std::integral_constant<int, q>, v)` takes the batch `v` of summed quantity `q` (into a
/// tile buffer's slot, or registers).
template <bool Back, bool Full, std::uint64_t Mask, class Vs, class E, class Slots, int NM, class Put,
          class Buf = no_stages>
// Above the complexity bound: one if-constexpr branch per pass kind (forward or backward, full or
// partial batch), one inlined body in the element loop.
// Always inlined: at -O2 GCC left it out of line in `sum_register_chunks`, a call per batch.
// NOLINTNEXTLINE(readability-function-cognitive-complexity)
[[gnu::always_inline]] inline void run_batch(const E& e, const Slots& slots,
                                             const pass_io<Vs, std::tuple_size_v<Slots>>& io, index_t pos, index_t rem,
                                             const Put& put, const batch_of<Vs>* red_adj, const Buf* staged = nullptr,
                                             std::size_t tile_batch = 0) {
  using Vb = batch_of<Vs>;
  constexpr int NA = static_cast<int>(std::tuple_size_v<Slots>);
  constexpr std::uint64_t scalars = summed_scalars<Mask, E, Slots>;
  constexpr std::uint64_t spans = slot_mask<Slots, is_span_slot>() & Mask;
  const batch_ctx<Vs, Full, Slots, Back, Buf> c{slots, io.hoisted, pos, rem, staged, tile_batch};
  using State = batch_state<Vs, NA, NM>;
  State st;  // (not `{}`: the pending adjoints are written before they are read, `has` says which)
  st.out = io.out, st.add = io.add, st.pos = pos, st.rem = rem;
  if constexpr (info<E>::elementwise) {  // one element-wise output
    auto v = fwd<0>(c, e);
    if (io.y) st.write_at(io.y, 0, v.y, false);
    if constexpr (Back) {
      Vb g;
      if constexpr (Full) g = load_comps<Vb>(io.ybar, pos);
      else g = load_head_comps<false, Vb>(io.ybar, pos, rem);
      back<0>(batch_sink<Mask, State>{&st}, e, v, g);
    }
  } else {
    each_reduction<0>(e, [&](auto b, const auto& r) {
      if (io.only >= 0 && b != io.only) return;
      constexpr int b1 = decltype(b)::value + 1;
      auto v = fwd<b1>(c, r.arg);
      put(b, v.y);  // (b: an integral_constant)
      if constexpr (Back) back<b1>(batch_sink<Mask, State>{&st}, r.arg, v, red_adj[b]);
    });
  }
  if constexpr (Back) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            constexpr std::uint64_t bit = std::uint64_t{1} << I;
            if constexpr (spans & bit) {
              if (st.has[I]) st.write(static_cast<int>(I), st.off[I], st.pend[I], io.add[I]);
            } else if constexpr (scalars & bit) {
              constexpr int q = NM + std::popcount(scalars & (bit - 1));
              put(std::integral_constant<int, q>{}, st.has[I] ? st.pend[I] : Vb{});
            }
          }(),
          ...);
    }
    (std::make_index_sequence<static_cast<std::size_t>(NA)>{});
    each_pass_hoist<Mask>(e, io.only, [&](auto b, const auto&) { put(b, st.hhas[b] ? st.hpend[b] : Vb{}); });
  }
}

/// Adds a tile of each summed quantity in use to its sum. Out of line on purpose: with
/// `running_sum::add` inlined into the pass, GCC allocated the batch loop's registers worse
/// and a long `value_and_grad` of `sum(cos(cos(x)) * y)` ran slower at -O3; one call per tile
/// of 256 elements costs nothing measurable.
template <class T, int NQ>
[[gnu::noinline]] void add_tiles(running_sum<T> (&sums)[NQ], const T (&buf)[NQ][tile_elems], const bool (&used)[NQ],
                                 index_t n) noexcept {
  running_sum<T>* s[NQ];
  const T* x[NQ];
  int k = 0;
  for (int q = 0; q < NQ; ++q)
    if (used[q]) s[k] = &sums[q], x[k] = buf[q], ++k;
  running_sum<T>::add_each(s, x, k, n);
}

/// What one element pass sums over the elements, `nc` components each: the reductions'
/// values and (backward) hoisted subexpressions' adjoints at their mark (`NM` marks), then
/// (backward) one per summed scalar: `NQ` in all; `NQ1`, an array of them (at least one).
template <bool Back_, std::uint64_t Mask_, class Vs_, class E, class Slots>
struct pass_sums {
  static constexpr bool Back = Back_;
  static constexpr std::uint64_t Mask = Mask_;
  using Vs = Vs_;
  using T = typename kind<Vs>::elem;
  using io_t = pass_io<Vs, std::tuple_size_v<Slots>>;
  static constexpr index_t W = static_cast<index_t>(simd<T>::size);
  static constexpr int NA = static_cast<int>(std::tuple_size_v<Slots>), nc = n_comp<Vs>;
  static constexpr int NM = marks<E>();
  static constexpr std::uint64_t scalars = Back ? summed_scalars<Mask, E, Slots> : 0;
  static constexpr int NS = std::popcount(scalars);
  static constexpr int NQ = (NM + NS) * nc;
  static constexpr int NQ1 = NQ > 0 ? NQ : 1;
  /// The context a stage's full batches are computed in.
  using stage_ctx = batch_ctx<Vs, true, Slots, Back>;
  /// The stages computed a tile ahead (`stages.hpp`), where their trees fit the budget.
  using stages = decltype([]<class... S>(type_list<S...>) {
    if constexpr (sizeof...(S) == 0) {
      return no_stages{};
    } else {
      using Buf = stage_buffers<Vs, stage_ctx, S...>;
      if constexpr (sizeof(Buf) <= stage_buffer_bytes) return Buf{};
      else return no_stages{};
    }
  }(unique_stages<E>(part_stages<0, E>())));
};

/// A tile's stages (its full batches of elements [t0, t0 + m)), each batch by batch into its
/// trees (no stage holds another). The stages of a reduction this pass does not run are
/// skipped; a partial last batch computes its own: a short call runs as it did without stages.
template <class P, class E, class Slots, class Buf>
[[gnu::always_inline]] inline void stage_tile(const E& e, const Slots& slots, const typename P::io_t& io, index_t t0,
                                              index_t m, Buf& staged) {
  constexpr index_t W = P::W;
  [&]<int... K>(std::integer_sequence<int, K...>) {
    (
        [&] {
          using St = typename Buf::template stage_at<K>;
          if (St::red >= 0 && io.only >= 0 && io.only != St::red) return;
          const auto& node = *find_node<typename St::type>(e);
          for (index_t j = 0; j + W <= m; j += W) {
            const auto b = static_cast<std::size_t>(j / W);
            staged.template put<K>(b, [&] {
              return fwd<St::base>(typename P::stage_ctx{slots, io.hoisted, t0 + j, W}, node);
            });
          }
        }(),
        ...);
  }
  (std::make_integer_sequence<int, Buf::count>{});
}

/// Marks the summed quantities this pass uses: the reductions it runs, and backward their
/// hoisted subexpressions and the scalars.
template <class P, class E>
[[gnu::always_inline]] inline void mark_used(bool (&used)[P::NQ1], const E& e, const typename P::io_t& io) {
  constexpr int nc = P::nc;
  auto use = [&](int q) {
    for (int k = 0; k < nc; ++k) used[q * nc + k] = true;
  };
  each_reduction<0>(e, [&](auto b, const auto&) {
    if (io.only < 0 || b == io.only) use(b);
  });
  if constexpr (P::Back) {
    each_pass_hoist<P::Mask>(e, io.only, [&](auto h, const auto&) { use(h); });
    for (int q = P::NM * nc; q < P::NQ; ++q) used[q] = true;
  }
}

/// Backward: each reduction's adjoint (a mean's over `n`), splat.
template <class P, class E>
[[gnu::always_inline]] inline void splat_reduction_adjoints(batch_of<typename P::Vs>* red_adj, const E& e,
                                                            const typename P::io_t& io, index_t n) {
  using T = typename P::T;
  each_reduction<0>(e, [&](auto b, const auto& r) {
    typename P::Vs g = io.red_adj[b];
    if constexpr (red_kind_v<std::remove_cvref_t<decltype(r)>> == reduce_op::mean) g = g / static_cast<T>(n);
    red_adj[b] = splat(g);
  });
}

/// Sums the whole chunks of a cheap body with few sums in registers, and returns where the
/// tiles start. (A normal log-density: `x - mu`, its square and the adjoint of `mu`.) As
/// `running_sum` sums a chunk: the batches unrolled by the chunk's accumulators, batch b into
/// accumulator b % U. For such a body the tile buffer's stores and reloads cost as much as a
/// good part of the arithmetic; a costly body (cos(cos(x)) * y) unrolled spills, and its sums
/// are noise.
template <class P, class E, class Slots>
[[gnu::always_inline]] inline index_t sum_register_chunks(const E& e, const Slots& slots, index_t n,
                                                          const typename P::io_t& io,
                                                          const batch_of<typename P::Vs>* red_adj,
                                                          const bool (&used)[P::NQ1],
                                                          running_sum<typename P::T> (&sums)[P::NQ1]) {
  using T = typename P::T;
  using Vs = typename P::Vs;
  constexpr index_t W = P::W;
  constexpr int NA = P::NA, NM = P::NM, NQ = P::NQ;
  index_t start = 0;
  constexpr index_t lanes = running_sum<T>::lanes, chunk = running_sum<T>::chunk, U = lanes / W;
  constexpr int NP = (info<E>::elementwise ? 0 : info<E>::reds) + (P::Back ? element_hoists<false, E>() + P::NS : 0);
  if constexpr (NP > 0 && NP * P::nc * U <= 8 && element_cost<E>() <= 2.0) {
    for (; start + chunk <= n; start += chunk) {
      simd<T> acc[NQ][U];
      [&]<std::size_t... i>(std::index_sequence<i...>) { ((acc[i / U][i % U] = simd<T>(T(-0.0))), ...); }
      (std::make_index_sequence<static_cast<std::size_t>(NQ * U)>{});
      for (index_t b = 0; b < chunk; b += lanes) [&]<std::size_t... u>(std::index_sequence<u...>) {
          (run_batch<P::Back, true, P::Mask, Vs, E, Slots, NM>(
               e, slots, io, start + b + static_cast<index_t>(u) * W, W,
               [&](auto qc, const batch_of<Vs>& v) {
                 simd<T> c[n_comp<Vs>];
                 batch_state<Vs, NA, NM>::comps(v, c);
                 constexpr int q = decltype(qc)::value * n_comp<Vs>;
                 acc[q][u] = acc[q][u] + c[0];
                 if constexpr (n_comp < Vs >> 1) acc[q + 1][u] = acc[q + 1][u] + c[1];
                 static_assert(n_comp<Vs> <= 2, "fusegrad: summed in registers: at most two components");
               },
               red_adj),
           ...);
        }
      (std::make_index_sequence<static_cast<std::size_t>(U)>{});
      // (constant indices throughout: `acc` stays in registers)
      auto flush = [&](auto qc) {
        constexpr int q = decltype(qc)::value;
        if (used[q]) sums[q].add_chunk_sum(running_sum<T>::fold_registers(acc[q]));
      };
      [&]<std::size_t... q>(std::index_sequence<q...>) {
        (flush(std::integral_constant<int, static_cast<int>(q)>{}), ...);
      }
      (std::make_index_sequence<static_cast<std::size_t>(NQ)>{});
    }
  }
  return start;
}

/// Runs the elements from `start` on a tile at a time through the tile buffer `buf`, each
/// tile added to `sums` (a short call: its one tile summed into `tot`).
template <class P, class E, class Slots>
[[gnu::always_inline]] inline void sum_tiles(const E& e, const Slots& slots, index_t start, index_t n,
                                             const typename P::io_t& io, const batch_of<typename P::Vs>* red_adj,
                                             const bool (&used)[P::NQ1], typename P::T (&buf)[P::NQ1][tile_elems],
                                             running_sum<typename P::T> (&sums)[P::NQ1], typename P::T (&tot)[P::NQ1],
                                             bool short_call) {
  using T = typename P::T;
  using Vs = typename P::Vs;
  constexpr index_t W = P::W;
  constexpr int nc = P::nc, NM = P::NM, NQ = P::NQ;
  using Stages = typename P::stages;
  [[maybe_unused]] Stages staged;  // (uninitialised: each stage's trees are written before they are read)
  for (index_t t0 = start; t0 < n; t0 += tile_elems) {
    const index_t m = std::min(tile_elems, n - t0);
    if constexpr (Stages::count > 0) stage_tile<P>(e, slots, io, t0, m, staged);
    index_t j = 0;
    auto put = [&](auto q, const batch_of<Vs>& v) {
      std::array<T*, nc> p;
      for (int k = 0; k < nc; ++k) p[static_cast<std::size_t>(k)] = buf[q * nc + k] + j;
      store_comps(v, p.data(), 0);
    };
    for (; j + W <= m; j += W)
      run_batch<P::Back, true, P::Mask, Vs, E, Slots, NM>(e, slots, io, t0 + j, W, put, red_adj, &staged,
                                                          static_cast<std::size_t>(j / W));
    if (j < m) run_batch<P::Back, false, P::Mask, Vs, E, Slots, NM>(e, slots, io, t0 + j, m - j, put, red_adj);
    if (short_call) {
      for (int q = 0; q < NQ; ++q)
        if (used[q]) tot[q] = running_sum<T>::sum(buf[q], m, 1);
    } else {
      add_tiles(sums, buf, used, m);
    }
  }
}

/// Hands the totals `tot` out: the reductions' values (a mean's over `n`) into `io.red_val`,
/// and backward the hoisted subexpressions' and scalars' adjoints, added to.
template <class P, class E>
[[gnu::always_inline]] inline void store_sums(const E& e, index_t n, const typename P::io_t& io,
                                              const typename P::T (&tot)[P::NQ1]) {
  using T = typename P::T;
  using Vs = typename P::Vs;
  constexpr int nc = P::nc, NA = P::NA, NM = P::NM;
  constexpr std::uint64_t scalars = P::scalars;
  each_reduction<0>(e, [&](auto b, const auto& r) {
    if (io.only >= 0 && b != io.only) return;
    Vs v = from_comps<Vs>(tot + b * nc);
    if constexpr (red_kind_v<std::remove_cvref_t<decltype(r)>> == reduce_op::mean) v = v / static_cast<T>(n);
    io.red_val[b] = v;
  });
  if constexpr (P::Back) {
    each_pass_hoist<P::Mask>(
        e, io.only, [&](auto h, const auto&) { io.hoisted_adj[h] = io.hoisted_adj[h] + from_comps<Vs>(tot + h * nc); });
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            constexpr std::uint64_t bit = std::uint64_t{1} << I;
            if constexpr (scalars & bit) {
              constexpr int q = NM + std::popcount(scalars & (bit - 1));
              io.arg_adj[I] = io.arg_adj[I] + from_comps<Vs>(tot + q * nc);
            }
          }(),
          ...);
    }
    (std::make_index_sequence<static_cast<std::size_t>(NA)>{});
  }
}

/// One pass over the `n` elements of `e`'s element-wise parts: the reductions' values into
/// `io.red_val`, and, when `Back`, the adjoints `io.red_adj` (or `io.ybar`) pushed back to
/// the arguments in `Mask` (ranges: `io.out`; scalars: added to `io.arg_adj`; hoisted
/// subexpressions: added to `io.hoisted_adj`). Quantities summed over the elements sit at
/// their mark (reductions' values, hoisted subexpressions' adjoints), then one per scalar
/// (`pass_sums`). Its phases are inlined: the pass is one body.
template <bool Back, std::uint64_t Mask, class Vs, class E, class Slots>
void element_pass(const E& e, const Slots& slots, index_t n, const pass_io<Vs, std::tuple_size_v<Slots>>& io) {
  using P = pass_sums<Back, Mask, Vs, E, Slots>;
  using T = typename P::T;
  bool used[P::NQ1] = {};
  mark_used<P>(used, e, io);
  alignas(64) T buf[P::NQ1][tile_elems];
  batch_of<Vs> red_adj[P::NM > 0 ? P::NM : 1];  // backward: each reduction's adjoint (a mean's over n), splat
  if constexpr (Back && !info<E>::elementwise) splat_reduction_adjoints<P>(red_adj, e, io, n);
  // (a call of at most `lanes` elements sums its one tile in registers: `running_sum::sum`,
  // the same bits)
  const bool short_call = n <= running_sum<T>::lanes;
  T tot[P::NQ1] = {};
  running_sum<T> sums[P::NQ1];
  const index_t start = sum_register_chunks<P>(e, slots, n, io, red_adj, used, sums);
  sum_tiles<P>(e, slots, start, n, io, red_adj, used, buf, sums, tot, short_call);
  if (!short_call)
    for (int q = 0; q < P::NQ; ++q) tot[q] = used[q] ? sums[q].total() : T(0);
  store_sums<P>(e, n, io, tot);
}

}  // namespace fusegrad::detail::fn
