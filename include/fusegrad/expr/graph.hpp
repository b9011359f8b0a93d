#pragma once
/// \file fusegrad/expr/graph.hpp
/// The joint forward/backward graph of a compiled function, computed at compile time.
///
/// The joint tree (forward outputs, then one backward output per input that has a gradient)
/// is flattened in post-order and canonicalised: pure subtrees of the same type become one
/// node (structural sharing by type identity) and `fwd_ref<K>` becomes the forward node K.
/// The result is a small constexpr table, children before parents, which the partitioner
/// (save/recompute plan), the scheduler and the evaluators all read.

#include <array>
#include <cstdint>
#include <string_view>

#include "fusegrad/expr/backprop.hpp"

namespace fusegrad::detail {

/// What a canonical node is, for scheduling and partitioning.
enum class gkind : unsigned char { input, grad_input, pointwise, reduction, sumto, unreduce, matmul, custom };

/// A structural 64-bit key of an expression type, usable in constant expressions (addresses of
/// per-type objects are not, under some sanitizers): op and function names are hashed from
/// `__PRETTY_FUNCTION__`, which is unique per type, and combined with the children's keys.
template <class X>
constexpr std::uint64_t name_hash() {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : std::string_view(__PRETTY_FUNCTION__)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}
constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}
template <class E>
constexpr std::uint64_t type_key_of() {
  std::uint64_t h = 0;
  if constexpr (is_leaf_v<E>) {
    h = mix(mix(mix(1, static_cast<std::uint64_t>(E::kind)), E::index), sizeof(typename E::element_type));
  } else {
    if constexpr (is_pointwise_v<E>) h = mix(2, name_hash<decltype(std::declval<E>().op)>());
    else if constexpr (is_custom_v<E>) h = mix(3, []<class F, class Fwd, class... A>(std::type_identity<custom_expr<F, Fwd, A...>>) { return name_hash<F>(); }(std::type_identity<E>{}));
    else if constexpr (is_matmul_v<E>) h = mix(mix(4, E::ta), E::tb);
    else if constexpr (is_sumto_v<E>)
      h = mix(6, []<std::size_t K, class A>(std::type_identity<sumto_expr<K, A>>) { return K; }(std::type_identity<E>{}));
    else h = mix(5, tree_size<E>());  // reductions and unreduce carry run-time flags: never keyed
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((h = mix(h, type_key_of<std::tuple_element_t<I, children_t<E>>>())), ...);
    }(std::make_index_sequence<arity_v<E>>{});
  }
  return h;
}
template <class E>
inline constexpr std::uint64_t type_key = type_key_of<E>();

template <class E>
constexpr gkind kind_of() {
  if constexpr (is_leaf_v<E>) {
    if constexpr (E::kind == leaf_kind::input) return gkind::input;
    else return gkind::grad_input;  // forward/adjoint refs are resolved before anyone asks
  } else if constexpr (is_pointwise_v<E>) return gkind::pointwise;
  else if constexpr (is_reduce_v<E>) return gkind::reduction;
  else if constexpr (is_sumto_v<E>) return gkind::sumto;
  else if constexpr (is_unreduce_v<E>) return gkind::unreduce;
  else if constexpr (is_custom_v<E>) return gkind::custom;
  else return gkind::matmul;
}

template <class E>
constexpr bool is_leaf_of(leaf_kind k) {
  if constexpr (is_leaf_v<E>) return E::kind == k;
  else return false;
}
template <class E> inline constexpr bool is_fwd_ref_v = is_leaf_of<E>(leaf_kind::forward);
template <class E> inline constexpr bool is_adj_ref_v = is_leaf_of<E>(leaf_kind::adjoint);

struct raw_entry {
  gkind kind = gkind::pointwise;
  std::uint64_t key = 0;      ///< structural key of a pure subtree: equal keys are one value
  bool keyed = false;         ///< whether `key` is set (the subtree is pure)
  int alias = -1;             ///< for fwd_ref<K>: K (a canonical forward node)
  int adj = -1;               ///< for adj_ref<K>: K (resolved through the adjoint roots)
  int children[3] = {-1, -1, -1};
};

template <class E, std::size_t Base, std::size_t N>
constexpr void fill_raw(std::array<raw_entry, N>& t) {
  static_assert(is_joint_v<E> || arity_v<E> <= 3,
                "fusegrad::compile: a custom function inside fg::compile takes at most two inputs");
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (fill_raw<std::tuple_element_t<I, children_t<E>>, child_base<E, Base, I>()>(t), ...);
  }(std::make_index_sequence<arity_v<E>>{});
  if constexpr (!is_joint_v<E>) {
    raw_entry& r = t[index_of<E, Base>];
    if constexpr (is_fwd_ref_v<E>) {
      r.alias = static_cast<int>(E::index);
    } else if constexpr (is_adj_ref_v<E>) {
      r.adj = static_cast<int>(E::index);
    } else {
      r.kind = kind_of<E>();
      if constexpr (pure<E>()) {
        r.key = type_key<E>;
        r.keyed = true;
      }
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((r.children[I] = static_cast<int>(index_of<std::tuple_element_t<I, children_t<E>>, child_base<E, Base, I>()>)), ...);
      }(std::make_index_sequence<arity_v<E>>{});
    }
  }
}

/// The canonical graph: `count` nodes, each with its kind, its representative tree index
/// and its canonical children; `canon` maps every tree index to its canonical node.
template <std::size_t N>
struct canonical_graph {
  std::size_t count = 0;
  std::array<int, N> canon{};
  std::array<int, N> rep{};
  std::array<gkind, N> kind{};
  std::array<std::array<int, 3>, N> children{};
};

/// `adj_root[K]` is the tree index of the root holding the adjoint of forward node K (roots
/// come in an order where every adj_ref points back to an earlier root).
template <class J, std::size_t MF = 1>
constexpr auto canonicalize(const std::array<int, MF>& adj_root = {}) {
  constexpr std::size_t N = tree_size<J>();
  std::array<raw_entry, N> raw{};
  fill_raw<J, 0>(raw);
  canonical_graph<N> g;
  for (std::size_t t = 0; t < N; ++t) {
    const raw_entry& r = raw[t];
    if (r.alias >= 0) {  // forward nodes keep their ids: the forward roots come first
      g.canon[t] = r.alias;
      continue;
    }
    if (r.adj >= 0) {
      const int root = adj_root[static_cast<std::size_t>(r.adj)];
      if (root < 0 || static_cast<std::size_t>(root) >= t) throw "fusegrad: adjoint referenced before it is defined";
      g.canon[t] = g.canon[static_cast<std::size_t>(root)];
      continue;
    }
    int found = -1;
    if (r.keyed)
      for (std::size_t u = 0; u < t && found < 0; ++u)
        if (raw[u].keyed && raw[u].alias < 0 && raw[u].adj < 0 && raw[u].key == r.key) found = g.canon[u];
    if (found >= 0) {
      g.canon[t] = found;
      continue;
    }
    const std::size_t id = g.count++;
    g.canon[t] = static_cast<int>(id);
    g.rep[id] = static_cast<int>(t);
    g.kind[id] = r.kind;
    for (int k = 0; k < 3; ++k)
      g.children[id][static_cast<std::size_t>(k)] = r.children[k] < 0 ? -1 : g.canon[static_cast<std::size_t>(r.children[k])];
  }
  return g;
}

}  // namespace fusegrad::detail
