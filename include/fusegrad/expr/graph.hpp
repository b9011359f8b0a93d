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

#include "fusegrad/expr/backprop.hpp"

namespace fusegrad::detail {

/// What a canonical node is, for scheduling and partitioning.
enum class gkind : unsigned char { input, grad_input, pointwise, reduction, sumto, unreduce, matmul, custom };

template <class E>
inline constexpr char type_key = 0;

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
  const char* key = nullptr;  ///< non-null for pure subtrees: equal keys are one value
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
      if constexpr (pure<E>()) r.key = &type_key<E>;
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
    if (r.key)
      for (std::size_t u = 0; u < t && found < 0; ++u)
        if (raw[u].alias < 0 && raw[u].key == r.key) found = g.canon[u];
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
