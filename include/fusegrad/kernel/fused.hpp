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

namespace fusegrad::detail {

template <class V, Element T>
V load_lane(const T* p, index_t stride, index_t i) {
  if constexpr (std::is_same_v<V, T>) return p[i * stride];
  else return stride == 0 ? V(*p) : V::load_unaligned(p + i);
}

template <class V, Element T>
V load_flat(const T* p, index_t i) {
  if constexpr (std::is_same_v<V, T>) return p[i];
  else return V::load_unaligned(p + i);
}

template <reduce_kind_t K, class V>
V combine(const V& a, const V& b) {
  if constexpr (K == reduce_kind_t::max) return lanes::max(a, b);
  else return a + b;
}

template <reduce_kind_t K, Element T>
T horizontal(const simd<T>& v) {
  if constexpr (K == reduce_kind_t::max) {
    T r = v.get(0);
    for (std::size_t j = 1; j < simd<T>::size; ++j) r = lanes::max(r, v.get(j));
    return r;
  } else {
    return xsimd::hadd(v);
  }
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

/// For sink `j` of stage `S` (stores first, then reductions): which compute nodes and which
/// loads its value depends on within the stage (its "cone").
template <class A, auto Active, auto Keep, int S>
struct stage_cones {
  static constexpr auto Cn = stage_nodes<A, Active, Keep, S, part::compute>();
  static constexpr auto Rn = stage_nodes<A, Active, Keep, S, part::reduce>();
  static constexpr auto Ln = stage_nodes<A, Active, Keep, S, part::load>();
  static constexpr auto Wn = stage_nodes<A, Active, Keep, S, part::store>();
  static constexpr std::size_t NS = Wn.size() + Rn.size();
  struct cone {
    std::array<bool, Cn.size()> compute{};
    std::array<bool, Ln.size()> load{};
  };
  static constexpr std::array<cone, NS> cones = [] {
    std::array<cone, NS> out{};
    for (std::size_t j = 0; j < NS; ++j) {
      std::array<bool, A::M> mark{};
      const int root = j < Wn.size() ? Wn[j] : A::cg.children[static_cast<std::size_t>(Rn[j - Wn.size()])][0];
      mark[static_cast<std::size_t>(root)] = true;
      for (std::size_t q = Cn.size(); q-- > 0;) {  // reverse topological: parents first
        const auto c = static_cast<std::size_t>(Cn[q]);
        if (!mark[c]) continue;
        out[j].compute[q] = true;
        for (int ch : A::cg.children[c])
          if (ch >= 0) mark[static_cast<std::size_t>(ch)] = true;
      }
      for (std::size_t q = 0; q < Ln.size(); ++q) out[j].load[q] = mark[static_cast<std::size_t>(Ln[q])];
    }
    return out;
  }();
};

/// One pass of loop `S` over the space `it`, for the sinks flagged in `sinks` (`All`: every
/// node of the stage is active, so no per-node test is compiled in).
template <class A, auto Active, auto Keep, int S, bool All, Element T>
void run_pass(eval_context<A, T>& ctx, const shape& it, const std::vector<bool>& sinks) {
  using SC = stage_cones<A, Active, Keep, S>;
  static constexpr auto& Cn = SC::Cn;
  static constexpr auto& Rn = SC::Rn;
  static constexpr auto& Ln = SC::Ln;
  static constexpr auto& Wn = SC::Wn;
  constexpr std::size_t NL = Ln.size(), NW = Wn.size(), NR = Rn.size(), N = NL + NW + NR;
  auto& shapes = ctx.shapes;
  auto& values = ctx.values;
  std::array<bool, Cn.size()> on_c{};
  std::array<bool, N> on{};
  for (std::size_t j = 0; j < SC::NS; ++j) {
    if (!sinks[j]) continue;
    on[NL + j] = true;
    for (std::size_t q = 0; q < Cn.size(); ++q) on_c[q] = on_c[q] || SC::cones[j].compute[q];
    for (std::size_t q = 0; q < NL; ++q) on[q] = on[q] || SC::cones[j].load[q];
  }
  std::array<const T*, NL> lp{};
  std::array<strides, N> st;
  std::array<T, NL> scale{};
  std::array<T*, NW + NR> wp{};
  const void* const* nodes = ctx.nodes;
  // The work of one row of the iteration space: SIMD body, scalar tail, reduction epilogue.
  auto row_fn = [&]<bool Flat>(std::bool_constant<Flat>, std::array<index_t, N> base, index_t n,
                               std::array<index_t, N> is) {
    auto body = [&]<class V>(std::type_identity<V>, index_t i, auto& acc) __attribute__((flatten)) {
      std::array<V, A::M> r{};
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              if (All || on[J]) {
                constexpr bool scaled = is_unreduce_v<typename A::template node_t<static_cast<std::size_t>(Ln[J])>>;
                V v = Flat ? load_flat<V>(lp[J] + base[J], i) : load_lane<V>(lp[J] + base[J], is[J], i);
                if constexpr (scaled) v = v * V(scale[J]);
                r[static_cast<std::size_t>(Ln[J])] = v;
              }
            }(),
            ...);
      }(std::make_index_sequence<NL>{});
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              if (!All && !on_c[J]) return;
              constexpr auto c = static_cast<std::size_t>(Cn[J]);
              constexpr auto ch = A::cg.children[c];
              using E = typename A::template node_t<c>;
              if constexpr (is_custom_v<E>) {
                r[c] = r[static_cast<std::size_t>(ch[arity_v<E> - 1])];
              } else {
                const auto& op = A::template node<c>(nodes).op;
                if constexpr (arity_v<E> == 1) r[c] = op.value(r[static_cast<std::size_t>(ch[0])]);
                else r[c] = op.value(r[static_cast<std::size_t>(ch[0])], r[static_cast<std::size_t>(ch[1])]);
              }
            }(),
            ...);
      }(std::make_index_sequence<Cn.size()>{});
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              constexpr std::size_t q = NL + J;
              if (!All && !on[q]) return;
              T* p = wp[J] + base[q];
              const V& v = r[static_cast<std::size_t>(Wn[J])];
              if constexpr (std::is_same_v<V, T>) p[Flat ? i : i * is[q]] = v;
              else if (!Flat && is[q] == 0) *p = v.get(0);
              else v.store_unaligned(p + i);
            }(),
            ...);
      }(std::make_index_sequence<NW>{});
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        (
            [&] {
              constexpr std::size_t q = NL + NW + J;
              if (!All && !on[q]) return;
              constexpr auto c = static_cast<std::size_t>(Rn[J]);
              constexpr reduce_kind_t K = reduction_kind<typename A::template node_t<c>>();
              const V& v = r[static_cast<std::size_t>(A::cg.children[c][0])];
              T* p = wp[NW + J] + base[q];
              if (is[q] == 0) {
                std::get<J>(acc) = combine<K>(std::get<J>(acc), v);
              } else if constexpr (std::is_same_v<V, T>) {
                p[i] = combine<K>(p[i], v);
              } else {
                combine<K>(V::load_unaligned(p + i), v).store_unaligned(p + i);
              }
            }(),
            ...);
      }(std::make_index_sequence<NR>{});
    };
    using B = simd<T>;
    constexpr index_t W = static_cast<index_t>(B::size);
    auto make_acc = [&]<class V>(std::type_identity<V>) {
      return [&]<std::size_t... J>(std::index_sequence<J...>) {
        return std::array<V, NR>{(reduction_kind<typename A::template node_t<static_cast<std::size_t>(Rn[J])>>() ==
                                          reduce_kind_t::max
                                      ? V(-std::numeric_limits<T>::infinity())
                                      : V(T(0)))...};
      }(std::make_index_sequence<NR>{});
    };
    auto vacc = make_acc(std::type_identity<B>{});
    auto sacc = make_acc(std::type_identity<T>{});
    index_t i = 0;
    for (; i + W <= n; i += W) body(std::type_identity<B>{}, i, vacc);
    for (; i < n; ++i) body(std::type_identity<T>{}, i, sacc);
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            constexpr std::size_t q = NL + NW + J;
            if ((!All && !on[q]) || is[q] != 0) return;
            constexpr reduce_kind_t K = reduction_kind<typename A::template node_t<static_cast<std::size_t>(Rn[J])>>();
            T* p = wp[NW + J] + base[q];
            *p = combine<K>(*p, combine<K>(horizontal<K, T>(std::get<J>(vacc)), std::get<J>(sacc)));
          }(),
          ...);
    }(std::make_index_sequence<NR>{});
  };

  // Fast path: every operand has the iteration shape (or is a full reduction): one flat row,
  // no strides to compute.
  if constexpr (All) {
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
      std::array<index_t, N> is{};
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
      if (total > 0) row_fn(std::true_type{}, std::array<index_t, N>{}, total, is);
      return;
    }
  }
  const strides zeros(it.size(), 0);
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (
        [&] {
          constexpr auto c = static_cast<std::size_t>(Ln[J]);
          scale[J] = T(1);
          st[J] = zeros;
          if (!on[J]) return;
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
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (
        [&] {
          constexpr auto c = static_cast<std::size_t>(Wn[J]);
          st[NL + J] = on[NL + J] ? broadcast_strides(values[c], it) : zeros;
          wp[J] = values[c].data_ptr();
        }(),
        ...);
  }(std::make_index_sequence<NW>{});
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (
        [&] {
          constexpr auto c = static_cast<std::size_t>(Rn[J]);
          using E = typename A::template node_t<c>;
          st[NL + NW + J] = zeros;
          wp[NW + J] = values[c].data_ptr();
          if (!on[NL + NW + J]) return;
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
  for (std::size_t q = 0; q < N && flat; ++q)
    flat = !on[q] || st[q] == full || (q >= NL + NW && is_zero(st[q]));
  shape space = it;
  if (flat) {
    space = shape{numel(it)};
    for (std::size_t q = 0; q < N; ++q) st[q] = strides{is_zero(st[q]) && numel(it) != 1 ? 0 : (numel(it) == 1 ? 0 : 1)};
  }
  std::array<const strides*, N> sp{};
  for (std::size_t q = 0; q < N; ++q) sp[q] = &st[q];

  auto rows = [&]<bool Flat>(std::bool_constant<Flat>) {
    for_each_row<N>(space, sp, std::array<index_t, N>{},
                    [&](std::array<index_t, N> base, index_t n, std::array<index_t, N> is) {
                      row_fn(std::bool_constant<Flat>{}, base, n, is);
                    });
  };
  if (flat) rows(std::true_type{});
  else rows(std::false_type{});
}

/// Runs loop `S` of the schedule: allocates what it writes, then one pass per iteration
/// space (one in the common case: every value of the stage broadcasts to one shape).
template <class A, auto Active, auto Keep, int S, Element T>
void run_loop(eval_context<A, T>& ctx) {
  using SC = stage_cones<A, Active, Keep, S>;
  constexpr std::size_t NW = SC::Wn.size(), NR = SC::Rn.size();
  if constexpr (NW + NR == 0) {
    return;
  } else {
    auto& shapes = ctx.shapes;
    auto& values = ctx.values;
    std::vector<shape> space(NW + NR);
    for (std::size_t j = 0; j < NW; ++j) {
      const auto c = static_cast<std::size_t>(SC::Wn[j]);
      values[c] = empty<T>(shapes[c]);
      space[j] = shapes[c];
    }
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            constexpr auto c = static_cast<std::size_t>(SC::Rn[J]);
            constexpr reduce_kind_t K = reduction_kind<typename A::template node_t<c>>();
            values[c] = empty<T>(shapes[c]);
            fill(values[c], K == reduce_kind_t::max ? -std::numeric_limits<T>::infinity() : T(0));
            space[NW + J] = shapes[static_cast<std::size_t>(A::cg.children[c][0])];
          }(),
          ...);
    }(std::make_index_sequence<NR>{});
    // Sinks sharing a shape share a pass; a store whose shape broadcasts into a pass's shape
    // rides along (its repeated writes hold one value).
    std::vector<bool> done(NW + NR, false);
    bool single = true;
    for (std::size_t j = 1; j < space.size(); ++j) single = single && space[j] == space[0];
    if (single) {
      run_pass<A, Active, Keep, S, true, T>(ctx, space[0], std::vector<bool>(NW + NR, true));
    } else {
      for (std::size_t j = 0; j < space.size(); ++j) {
        if (done[j]) continue;
        std::vector<bool> sinks(NW + NR, false);
        for (std::size_t q = j; q < space.size(); ++q)
          if (!done[q] && space[q] == space[j]) sinks[q] = done[q] = true;
        run_pass<A, Active, Keep, S, false, T>(ctx, space[j], sinks);
      }
    }
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            constexpr auto c = static_cast<std::size_t>(SC::Rn[J]);
            if constexpr (reduction_kind<typename A::template node_t<c>>() == reduce_kind_t::mean) {
              const index_t cnt = numel(space[NW + J]) / std::max<index_t>(values[c].numel(), 1);
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
  static constexpr bool runs_graph = true;
  template <class A, auto Active, auto Keep, Element T>
  static void evaluate(eval_context<A, T>& ctx) {
    detail::fused_evaluate<A, Active, Keep, T>(ctx);
  }
};
}  // namespace fusegrad::backend
