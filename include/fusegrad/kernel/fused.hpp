#pragma once
/// \file fusegrad/kernel/fused.hpp
/// The `fused` backend (Inductor's counterpart): each stage of the schedule is ONE pass over
/// memory. The pass loads its operands as xsimd batches (a broadcast operand is splatted),
/// evaluates every element-wise node of the stage in registers with the very `value`
/// functions eager mode uses, stores what later stages read, and accumulates the stage's
/// reductions in registers. An aligned SIMD body and a scalar tail run the same code.

#include <cmath>
#include <limits>

#include "fusegrad/compile/compile.hpp"
#include "fusegrad/kernel/schedule.hpp"
#include "fusegrad/kernel/tile.hpp"

namespace fusegrad::detail {

template <reduce_kind_t K, class V>
V combine(const V& a, const V& b) {
  if constexpr (K == reduce_kind_t::max) return lanes::max(a, b);
  else return a + b;
}

template <reduce_kind_t K, Element T>
T horizontal(const simd<T>& v) {
  return lanes_total<K == reduce_kind_t::max>(v);
}

/// The reduction a reduce-role node performs (sumto sums).
template <class E>
constexpr reduce_kind_t reduction_kind() {
  if constexpr (is_reduce_v<E>)
    return []<reduce_kind_t K, reduce_axis X, class U>(std::type_identity<reduce_expr<K, X, U>>) { return K; }(
        std::type_identity<E>{});
  else return reduce_kind_t::sum;
}
template <class E>
constexpr reduce_axis reduction_axis() {
  if constexpr (is_reduce_v<E>)
    return []<reduce_kind_t K, reduce_axis X, class U>(std::type_identity<reduce_expr<K, X, U>>) { return X; }(
        std::type_identity<E>{});
  else if constexpr (is_unreduce_v<E>)
    return []<reduce_kind_t K, reduce_axis X, std::size_t KK, class U>(std::type_identity<unreduce_expr<K, X, KK, U>>) {
      return X;
    }(std::type_identity<E>{});
  else return reduce_axis::all;
}
template <class E>
constexpr std::size_t shape_source() {  // forward tree index whose shape sumto/unreduce take
  if constexpr (is_sumto_v<E>)
    return []<std::size_t KK, class U>(std::type_identity<sumto_expr<KK, U>>) { return KK; }(std::type_identity<E>{});
  else
    return []<reduce_kind_t K, reduce_axis X, std::size_t KK, class U>(std::type_identity<unreduce_expr<K, X, KK, U>>) {
      return KK;
    }(std::type_identity<E>{});
}

/// Shape of `a [..., k] · b [k, n]` (with the transpose flags of matmul_expr).
inline shape matmul_shape(const shape& a, const shape& b, bool ta, bool tb) {
  auto rows_cols = [](const shape& s) {
    const index_t last = s.empty() ? 1 : s.back();
    return std::pair<index_t, index_t>{last == 0 ? 0 : numel(s) / last, last};
  };
  if (a.empty() || b.empty())
    fail("matmul", "a 0-d operand cannot be multiplied (shapes ", to_string(a), " and ", to_string(b), ")");
  auto [br, bc] = rows_cols(b);
  if (tb) std::swap(br, bc);
  auto [ar, ac] = rows_cols(a);
  if (ta) std::swap(ar, ac);
  if (ac != br)
    fail("matmul", "shapes ", to_string(a), " and ", to_string(b), " cannot be multiplied inside fg::compile (",
         ac, " != ", br, "); expected a [..., k] and b [k, n]");
  if (ta) return {ar, bc};
  shape out(a.begin(), a.end() - 1);
  out.push_back(bc);
  return out;
}

template <class A, std::size_t C, Element T>
void infer_shape(eval_context<A, T>& ctx) {
  using E = typename A::template node_t<C>;
  [[maybe_unused]] const E& e = A::template node<C>(ctx.nodes);
  constexpr auto ch = A::cg.children[C];
  auto sh = [&](int k) -> const shape& { return ctx.shapes[static_cast<std::size_t>(ch[static_cast<std::size_t>(k)])]; };
  shape& out = ctx.shapes[C];
  if constexpr (is_custom_v<E>) {
    out = sh(static_cast<int>(arity_v<E>) - 1);
  } else if constexpr (is_pointwise_v<E>) {
    if constexpr (arity_v<E> == 1) out = sh(0);
    else out = sh(0) == sh(1) ? sh(0) : broadcast_shapes(std::remove_cvref_t<decltype(e.op)>::name, sh(0), sh(1));
  } else if constexpr (is_reduce_v<E>) {
    const shape& in = sh(0);
    if constexpr (reduction_axis<E>() == reduce_axis::all) {
      out = e.keepdim ? keepdim_shape(in, reduce_axis::all) : shape{};
    } else {
      if (in.empty()) fail("sum", "cannot reduce the last dim of a 0-d value inside fg::compile");
      out = in;
      if (e.keepdim) out.back() = 1;
      else out.pop_back();
    }
  } else if constexpr (is_sumto_v<E> || is_unreduce_v<E>) {
    out = ctx.shapes[shape_source<E>()];
  } else if constexpr (is_matmul_v<E>) {
    out = matmul_shape(sh(0), sh(1), E::ta, E::tb);
  }
}

/// The node lists of loop `S` (see `part`).
template <class A, auto Active, auto Keep, int S>
struct stage_parts {
  static constexpr auto Cn = stage_nodes<A, Active, Keep, S, part::compute>();
  static constexpr auto Rn = stage_nodes<A, Active, Keep, S, part::reduce>();
  static constexpr auto Ln = stage_nodes<A, Active, Keep, S, part::load>();
  static constexpr auto Wn = stage_nodes<A, Active, Keep, S, part::store>();
};

template <class A, std::size_t NR, auto Rn, class V>
std::array<V, NR> reduction_identities() {
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return std::array<V, NR>{(reduction_kind<typename A::template node_t<static_cast<std::size_t>(Rn[J])>>() ==
                                      reduce_kind_t::max
                                  ? V(-std::numeric_limits<typename V::value_type>::infinity())
                                  : V(typename V::value_type(0)))...};
  }(std::make_index_sequence<NR>{});
}

/// One pass of loop `S` over the space `it`: every sink of the stage. Each row runs an
/// aligned-width SIMD body; the row's tail runs the same body once on a padded copy (so
/// there is one body per layout, not a second scalar one), and only its valid lanes are
/// written back or reduced.
template <class A, auto Active, auto Keep, int S, Element T>
void run_pass(eval_context<A, T>& ctx, const shape& it,
              const std::array<bool, stage_parts<A, Active, Keep, S>::Rn.size()>& direct) {
  using SP = stage_parts<A, Active, Keep, S>;
  static constexpr auto& Cn = SP::Cn;
  static constexpr auto& Rn = SP::Rn;
  static constexpr auto& Ln = SP::Ln;
  static constexpr auto& Wn = SP::Wn;
  constexpr std::size_t NL = Ln.size(), NW = Wn.size(), NR = Rn.size(), N = NL + NW + NR;
  using V = simd<T>;
  using loads_t = std::array<const T*, NL>;
  using sinks_t = std::array<T*, NW + NR>;
  using steps_t = std::array<index_t, N>;
  auto& shapes = ctx.shapes;
  auto& values = ctx.values;
  loads_t lp{};
  std::array<strides, N> st;
  std::array<T, NL> scale{};
  sinks_t wp{};
  const void* const* nodes = ctx.nodes;

  // Tile registers (compile time): one per compute node, reused after its last reader in the
  // loop; values that the loop's stores and reductions read live to the end of a tile. A
  // custom node is its forward value (no register of its own).
  static constexpr auto R = [] {
    struct regs_t {
      std::array<int, Cn.size() + 1> reg{};
      int count = 0;
    } r;
    constexpr int end = 1 << 30;
    std::array<int, A::M> alias{};  // custom nodes -> the node holding their value
    for (std::size_t c = 0; c < A::M; ++c) alias[c] = static_cast<int>(c);
    std::array<int, A::M> pos{};
    pos.fill(-1);
    for (std::size_t q = 0; q < Cn.size(); ++q) {
      const auto c = static_cast<std::size_t>(Cn[q]);
      pos[c] = static_cast<int>(q);
      if (A::cg.kind[c] == gkind::custom) {
        int k = 2;
        while (k > 0 && A::cg.children[c][static_cast<std::size_t>(k)] < 0) --k;
        alias[c] = alias[static_cast<std::size_t>(A::cg.children[c][static_cast<std::size_t>(k)])];
      }
    }
    std::array<int, A::M> last{};
    last.fill(-1);
    for (std::size_t q = 0; q < Cn.size(); ++q)
      for (int ch : A::cg.children[static_cast<std::size_t>(Cn[q])])
        if (ch >= 0) last[static_cast<std::size_t>(alias[static_cast<std::size_t>(ch)])] = static_cast<int>(q);
    for (int w : Wn) last[static_cast<std::size_t>(alias[static_cast<std::size_t>(w)])] = end;
    for (int rr : Rn) last[static_cast<std::size_t>(alias[static_cast<std::size_t>(A::cg.children[static_cast<std::size_t>(rr)][0])])] = end;
    std::array<int, Cn.size() + 1> free_regs{};
    int nfree = 0;
    for (std::size_t q = 0; q < Cn.size(); ++q) {
      const auto c = static_cast<std::size_t>(Cn[q]);
      r.reg[q] = -1;
      if (A::cg.kind[c] != gkind::custom) r.reg[q] = nfree > 0 ? free_regs[static_cast<std::size_t>(--nfree)] : r.count++;
      std::array<int, 3> seen{-1, -1, -1};
      for (std::size_t s = 0; s < 3; ++s) {
        const int ch = A::cg.children[c][s];
        if (ch < 0) continue;
        const int hold = alias[static_cast<std::size_t>(ch)];
        if (hold == seen[0] || hold == seen[1]) continue;
        seen[s] = hold;
        const int pq = pos[static_cast<std::size_t>(hold)];
        if (pq >= 0 && last[static_cast<std::size_t>(hold)] == static_cast<int>(q) && r.reg[static_cast<std::size_t>(pq)] >= 0)
          free_regs[static_cast<std::size_t>(nfree++)] = r.reg[static_cast<std::size_t>(pq)];
      }
    }
    return r;
  }();
  // Index of each compute node among the stores (-1: not stored).
  static constexpr auto store_of = [] {
    std::array<int, Cn.size() + 1> s{};
    for (std::size_t q = 0; q < Cn.size(); ++q) {
      s[q] = -1;
      for (std::size_t j = 0; j < NW; ++j)
        if (Wn[j] == Cn[q]) s[q] = static_cast<int>(j);
    }
    return s;
  }();
  constexpr index_t tile = tile_elems;
  // Tile registers live in a per-thread buffer that only grows: no allocation per call.
  thread_local std::vector<T> regbuf;
  const auto need = static_cast<std::size_t>((R.count + static_cast<int>(NL)) * tile);
  if (regbuf.size() < need) regbuf.resize(need);
  T* const regs = regbuf.data();
  auto reg_ptr = [regs](int r) { return regs + static_cast<std::ptrdiff_t>(r) * tile; };
  auto load_buf = [&](std::size_t j) { return reg_ptr(R.count + static_cast<int>(j)); };

  // One row: `base` offsets, `n` elements, `is` each operand's step along the row (0:
  // broadcast, 1: contiguous). The row is walked in tiles; each node runs over a whole tile.
  auto row_fn = [&](const steps_t& base, index_t n, const steps_t& is) {
    std::array<const T*, A::M> cur{};
    for (std::size_t j = 0; j < NL; ++j)
      if (is[j] == 0) std::fill(load_buf(j), load_buf(j) + tile, lp[j][base[j]] * scale[j]);
    auto acc = reduction_identities<A, NR, Rn, V>();
    std::array<T, NR> tail{};
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      ((tail[J] = reduction_kind<typename A::template node_t<static_cast<std::size_t>(Rn[J])>>() == reduce_kind_t::max
                      ? -std::numeric_limits<T>::infinity()
                      : T(0)),
       ...);
    }(std::make_index_sequence<NR>{});
    for (index_t i = 0; i < n; i += tile) {
      const index_t m = std::min(tile, n - i);
      for (std::size_t j = 0; j < NL; ++j) {
        auto& c = cur[static_cast<std::size_t>(Ln[j])];
        if (is[j] == 0) {
          c = load_buf(j);
        } else if (scale[j] != T(1)) {
          tile_scale(lp[j] + base[j] + i, scale[j], load_buf(j), m);
          c = load_buf(j);
        } else {
          c = lp[j] + base[j] + i;
        }
      }
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              constexpr auto c = static_cast<std::size_t>(Cn[J]);
              constexpr auto ch = A::cg.children[c];
              using E = typename A::template node_t<c>;
              if constexpr (is_custom_v<E>) {
                cur[c] = cur[static_cast<std::size_t>(ch[arity_v<E> - 1])];
                if constexpr (store_of[J] >= 0) {  // its value lives elsewhere: copy it out
                  constexpr auto q = NL + static_cast<std::size_t>(store_of[J]);
                  if (is[q] != 0) std::copy(cur[c], cur[c] + m, wp[static_cast<std::size_t>(store_of[J])] + base[q] + i);
                }
              } else {
                T* dst = reg_ptr(R.reg[J]);
                if constexpr (store_of[J] >= 0) {
                  constexpr auto q = NL + static_cast<std::size_t>(store_of[J]);
                  if (is[q] != 0) dst = wp[static_cast<std::size_t>(store_of[J])] + base[q] + i;
                }
                const auto& op = A::template node<c>(nodes).op;
                const T* b = arity_v<E> == 2 ? cur[static_cast<std::size_t>(ch[1])] : nullptr;
                tile_op(op, cur[static_cast<std::size_t>(ch[0])], b, dst, m);
                cur[c] = dst;
              }
            }(),
            ...);
      }(std::make_index_sequence<Cn.size()>{});
      for (std::size_t j = 0; j < NW; ++j)
        if (is[NL + j] == 0) wp[j][base[NL + j]] = cur[static_cast<std::size_t>(Wn[j])][0];
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              constexpr auto c = static_cast<std::size_t>(Rn[J]);
              constexpr bool is_max = reduction_kind<typename A::template node_t<c>>() == reduce_kind_t::max;
              constexpr std::size_t q = NL + NW + J;
              const T* src = cur[static_cast<std::size_t>(A::cg.children[c][0])];
              T* p = wp[NW + J] + base[q];
              if (is[q] == 0) tile_reduce<is_max>(src, m, acc[J], tail[J]);
              else if (direct[J]) std::copy(src, src + m, p + i);
              else tile_reduce_into<is_max>(src, p + i, m);
            }(),
            ...);
      }(std::make_index_sequence<NR>{});
    }
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            if (is[NL + NW + J] != 0) return;
            constexpr reduce_kind_t K = reduction_kind<typename A::template node_t<static_cast<std::size_t>(Rn[J])>>();
            T* p = wp[NW + J] + base[NL + NW + J];
            *p = combine<K>(*p, combine<K>(horizontal<K, T>(acc[J]), tail[J]));
          }(),
          ...);
    }(std::make_index_sequence<NR>{});
  };

  // Fast path: every operand has the iteration shape (or is a full reduction): one flat row,
  // no strides to compute.
  {
    bool fast = true;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      ((fast = fast && !is_unreduce_v<typename A::template node_t<static_cast<std::size_t>(Ln[J])>> &&
               shapes[static_cast<std::size_t>(Ln[J])] == it),
       ...);
    }(std::make_index_sequence<NL>{});
    for (int w : Wn) fast = fast && shapes[static_cast<std::size_t>(w)] == it;
    for (int r : Rn) fast = fast && (values[static_cast<std::size_t>(r)].numel() == 1 || shapes[static_cast<std::size_t>(r)] == it);
    if (fast) {
      const index_t total = numel(it);
      steps_t is{};
      for (std::size_t q = 0; q < N; ++q) is[q] = total == 1 ? 0 : 1;
      for (std::size_t j = 0; j < NL; ++j) {
        lp[j] = values[static_cast<std::size_t>(Ln[j])].data_ptr();
        scale[j] = T(1);
      }
      for (std::size_t j = 0; j < NW; ++j) wp[j] = values[static_cast<std::size_t>(Wn[j])].data_ptr();
      for (std::size_t j = 0; j < NR; ++j) {
        wp[NW + j] = values[static_cast<std::size_t>(Rn[j])].data_ptr();
        if (values[static_cast<std::size_t>(Rn[j])].numel() == 1) is[NL + NW + j] = 0;
      }
      if (total > 0) row_fn(steps_t{}, total, is);
      return;
    }
  }
  const strides zeros(it.size(), 0);
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (
        [&] {
          constexpr auto c = static_cast<std::size_t>(Ln[J]);
          scale[J] = T(1);
          using E = typename A::template node_t<c>;
          if constexpr (is_unreduce_v<E>) {
            const tensor<T>& src = values[static_cast<std::size_t>(A::cg.children[c][0])];
            const shape& to = shapes[c];
            const shape ks = keepdim_shape(to, reduction_axis<E>());
            st[J] = broadcast_strides(alias(src, ks, contiguous_strides(ks), src.offset()), it);
            lp[J] = src.data_ptr();
            if constexpr ([]<reduce_kind_t K, reduce_axis X, std::size_t KK, class U>(
                              std::type_identity<unreduce_expr<K, X, KK, U>>) { return K == reduce_kind_t::mean; }(
                              std::type_identity<E>{}))
              scale[J] = static_cast<T>(numel(ks)) / static_cast<T>(std::max<index_t>(numel(to), 1));
          } else {
            st[J] = broadcast_strides(values[c], it);
            lp[J] = values[c].data_ptr();
          }
        }(),
        ...);
  }(std::make_index_sequence<NL>{});
  for (std::size_t j = 0; j < NW; ++j) {
    const auto c = static_cast<std::size_t>(Wn[j]);
    st[NL + j] = broadcast_strides(values[c], it);  // a smaller store rides along (same value rewritten)
    wp[j] = values[c].data_ptr();
  }
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (
        [&] {
          constexpr auto c = static_cast<std::size_t>(Rn[J]);
          using E = typename A::template node_t<c>;
          wp[NW + J] = values[c].data_ptr();
          shape view_shape = shapes[c];
          if constexpr (is_reduce_v<E>) view_shape = keepdim_shape(it, reduction_axis<E>());
          st[NL + NW + J] = broadcast_strides(alias(values[c], view_shape, contiguous_strides(view_shape), 0), it);
        }(),
        ...);
  }(std::make_index_sequence<NR>{});

  // One 1-D pass when every operand covers the whole space (or a reduction covers none of it).
  const strides full = contiguous_strides(it);
  auto is_zero = [](const strides& x) { return std::all_of(x.begin(), x.end(), [](index_t v) { return v == 0; }); };
  bool flat = true;
  for (std::size_t q = 0; q < N && flat; ++q) flat = st[q] == full || (q >= NL + NW && is_zero(st[q]));
  shape space = it;
  if (flat) {
    space = shape{numel(it)};
    for (std::size_t q = 0; q < N; ++q) st[q] = strides{is_zero(st[q]) && numel(it) != 1 ? 0 : (numel(it) == 1 ? 0 : 1)};
  }
  std::array<const strides*, N> sp{};
  for (std::size_t q = 0; q < N; ++q) sp[q] = &st[q];
  for_each_row<N>(space, sp, steps_t{}, [&](steps_t base, index_t n, steps_t is) { row_fn(base, n, is); });
}

/// Whether shape `s` broadcasts to `to` (NumPy rules).
inline bool broadcasts_to(const shape& s, const shape& to) {
  if (s.size() > to.size()) return false;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const index_t a = s[s.size() - 1 - k], b = to[to.size() - 1 - k];
    if (a != b && a != 1) return false;
  }
  return true;
}

/// Runs loop `S` of the schedule: allocates what it writes, then one pass over the stage's
/// iteration space (the shape every reduction reads; stores of a smaller shape ride along).
/// A stage whose reductions read different shapes runs node by node instead (rare: it needs
/// reductions over differently broadcast values in one stage).
template <class A, auto Active, auto Keep, int S, Element T>
void run_loop(eval_context<A, T>& ctx) {
  using SP = stage_parts<A, Active, Keep, S>;
  constexpr std::size_t NW = SP::Wn.size(), NR = SP::Rn.size();
  if constexpr (NW + NR == 0) {
    return;
  } else {
    auto& shapes = ctx.shapes;
    auto& values = ctx.values;
    shape space;
    bool one_space = true;
    if constexpr (NR > 0) {
      space = shapes[static_cast<std::size_t>(A::cg.children[static_cast<std::size_t>(SP::Rn[0])][0])];
      for (int r : SP::Rn) one_space = one_space && shapes[static_cast<std::size_t>(A::cg.children[static_cast<std::size_t>(r)][0])] == space;
      for (int w : SP::Wn) one_space = one_space && broadcasts_to(shapes[static_cast<std::size_t>(w)], space);
    } else {
      space = shapes[static_cast<std::size_t>(SP::Wn[0])];
      for (int w : SP::Wn) {
        const shape& s = shapes[static_cast<std::size_t>(w)];
        if (s.size() > space.size() || (s.size() == space.size() && numel(s) > numel(space))) space = s;
      }
      for (int w : SP::Wn) one_space = one_space && broadcasts_to(shapes[static_cast<std::size_t>(w)], space);
    }
    if (!one_space) {
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              constexpr auto c = static_cast<std::size_t>(SP::Ln[J]);
              if constexpr (is_unreduce_v<typename A::template node_t<c>>)
                if (!values[c].defined()) values[c] = eval_node<A, c, T>(ctx.nodes, values, shapes, ctx.inputs, ctx.grads);
            }(),
            ...);
      }(std::make_index_sequence<SP::Ln.size()>{});
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              constexpr auto c = static_cast<std::size_t>(SP::Cn[J]);
              values[c] = eval_node<A, c, T>(ctx.nodes, values, shapes, ctx.inputs, ctx.grads);
            }(),
            ...);
      }(std::make_index_sequence<SP::Cn.size()>{});
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              constexpr auto c = static_cast<std::size_t>(SP::Rn[J]);
              values[c] = eval_node<A, c, T>(ctx.nodes, values, shapes, ctx.inputs, ctx.grads);
            }(),
            ...);
      }(std::make_index_sequence<NR>{});
      return;
    }
    for (int w : SP::Wn) values[static_cast<std::size_t>(w)] = empty<T>(shapes[static_cast<std::size_t>(w)]);
    std::array<bool, NR> direct{};
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            constexpr auto c = static_cast<std::size_t>(SP::Rn[J]);
            constexpr reduce_kind_t K = reduction_kind<typename A::template node_t<c>>();
            values[c] = empty<T>(shapes[c]);
            // A reduction to the shape of its own input (sumto of a gradient that was not
            // broadcast) sees each element once: it is written directly, without a fill.
            direct[J] = shapes[c] == space && numel(space) > 1;
            if (!direct[J]) fill(values[c], K == reduce_kind_t::max ? -std::numeric_limits<T>::infinity() : T(0));
          }(),
          ...);
    }(std::make_index_sequence<NR>{});
    run_pass<A, Active, Keep, S, T>(ctx, space, direct);
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            constexpr auto c = static_cast<std::size_t>(SP::Rn[J]);
            if constexpr (reduction_kind<typename A::template node_t<c>>() == reduce_kind_t::mean) {
              const index_t cnt = numel(space) / std::max<index_t>(values[c].numel(), 1);
              T* p = values[c].data_ptr();
              for (index_t e = 0; e < values[c].numel(); ++e) p[e] /= static_cast<T>(cnt);
            }
          }(),
          ...);
    }(std::make_index_sequence<NR>{});
  }
}

template <class A, auto Active, auto Keep, Element T>
void fused_evaluate(eval_context<A, T>& ctx) {
  static constexpr auto& sch = schedule_v<A, Active, Keep>;
  // Leaves and shapes, in topological order.
  [&]<std::size_t... C>(std::index_sequence<C...>) {
    (
        [&] {
          using E = typename A::template node_t<C>;
          if constexpr (sch.roles[C] == role::leaf) {
            if constexpr (Active[C] && A::cg.kind[C] == gkind::input) ctx.values[C] = ctx.inputs[E::index];
            else if constexpr (Active[C] && A::cg.kind[C] == gkind::grad_input) ctx.values[C] = ctx.grads[E::index];
            ctx.shapes[C] = ctx.values[C].shape();
          } else if constexpr (sch.roles[C] != role::none) {
            infer_shape<A, C, T>(ctx);
          }
        }(),
        ...);
  }(std::make_index_sequence<A::M>{});
  [&]<int... S>(std::integer_sequence<int, S...>) {
    (
        [&] {
          static constexpr auto mm = stage_nodes<A, Active, Keep, S, part::matmul>();
          [&]<std::size_t... J>(std::index_sequence<J...>) {
            (
                [&] {
                  constexpr auto c = static_cast<std::size_t>(mm[J]);
                  ctx.values[c] = eval_node<A, c, T>(ctx.nodes, ctx.values, ctx.shapes, ctx.inputs, ctx.grads);
                }(),
                ...);
          }(std::make_index_sequence<mm.size()>{});
          run_loop<A, Active, Keep, S, T>(ctx);
        }(),
        ...);
  }(std::make_integer_sequence<int, sch.stages>{});
  // A kept broadcast-of-a-reduction is materialised directly.
  [&]<std::size_t... C>(std::index_sequence<C...>) {
    (
        [&] {
          if constexpr (Keep[C] && sch.roles[C] == role::unreduce)
            ctx.values[C] = eval_node<A, C, T>(ctx.nodes, ctx.values, ctx.shapes, ctx.inputs, ctx.grads);
        }(),
        ...);
  }(std::make_index_sequence<A::M>{});
}

}  // namespace fusegrad::detail

namespace fusegrad::backend {
/// One vectorised pass over memory per fusion group, forward and backward (the default).
struct fused {
  static constexpr std::string_view name = "fused";
  bool fullgraph = false;  ///< as a compiled-autograd backend: a graph break throws
  static constexpr bool runs_graph = true;
  template <class A, auto Active, auto Keep, Element T>
  static void evaluate(eval_context<A, T>& ctx) {
    detail::fused_evaluate<A, Active, Keep, T>(ctx);
  }
};
}  // namespace fusegrad::backend
