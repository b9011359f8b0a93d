#pragma once
/// \file fusegrad/expr/graph.hpp
/// The joint forward/backward graph of a compiled function, computed at compile time.
///
/// The joint tree (forward outputs, then one backward output per input that has a gradient)
/// is flattened in post-order and canonicalised by hash-consing: a node with the same op (and
/// constant, when known) and the same canonical operands as an earlier one is that node, and
/// `fwd_ref<K>` becomes the forward node K.
/// The result is a small constexpr table, children before parents, which the partitioner
/// (save/recompute plan), the scheduler and the evaluators all read.

#include <array>
#include <bit>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <utility>

#include "fusegrad/core/hash.hpp"
#include "fusegrad/core/node_kinds.hpp"
#include "fusegrad/expr/backprop.hpp"

namespace fusegrad::detail {

/// A 64-bit key of a node's own operation (not its operands), usable in constant expressions
/// (addresses of per-type objects are not, under some sanitizers): op and function names are
/// hashed from `__PRETTY_FUNCTION__`, which is unique per type.
template <class X>
constexpr std::uint64_t name_hash() {
  return fnv1a().mix(std::string_view(__PRETTY_FUNCTION__)).value();
}
constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}
/// The key of an element-wise node of op `Op` with `arity` operands.
template <class Op>
constexpr std::uint64_t pointwise_key(std::size_t arity) {
  return mix(mix(2, name_hash<Op>()), arity);
}
template <class E>
constexpr std::uint64_t local_key() {
  if constexpr (is_leaf_v<E>) {
    return mix(mix(mix(1, static_cast<std::uint64_t>(E::kind)), E::index), sizeof(typename E::element_type));
  } else if constexpr (is_pointwise_v<E>) {
    return pointwise_key<std::remove_cvref_t<decltype(std::declval<E>().op)>>(arity_v<E>);
  } else if constexpr (is_custom_v<E>) {
    return []<class F, class Fwd, class... A>(std::type_identity<custom_expr<F, Fwd, A...>>) {
      return mix(mix(3, name_hash<F>()), sizeof...(A));
    }(std::type_identity<E>{});
  } else if constexpr (is_matmul_v<E>) {
    return mix(mix(4, E::ta), E::tb);
  } else if constexpr (is_reduce_v<E>) {
    return []<detail::reduce_op K, reduce_axis X, class A>(std::type_identity<reduce_expr<K, X, A>>) {
      return mix(mix(5, static_cast<std::uint64_t>(K)), static_cast<std::uint64_t>(X));
    }(std::type_identity<E>{});
  } else if constexpr (is_sumto_v<E>) {
    return
        []<std::size_t K, class A>(std::type_identity<sumto_expr<K, A>>) { return mix(6, K); }(std::type_identity<E>{});
  } else {
    return []<detail::reduce_op K, reduce_axis X, std::size_t KK, class A>(
               std::type_identity<unreduce_expr<K, X, KK, A>>) {
      return mix(mix(mix(7, static_cast<std::uint64_t>(K)), static_cast<std::uint64_t>(X)), KK);
    }(std::type_identity<E>{});
  }
}

/// Whether a node carries run-time state of its own (an op constant, a keepdim flag).
template <class E>
constexpr bool has_state() {
  if constexpr (is_pointwise_v<E>) return !std::is_empty_v<decltype(std::declval<E>().op)>;
  else return is_reduce_v<E> || is_unreduce_v<E>;
}
/// Whether the state of a node can be read in a constant expression to key it by value: op
/// constants that are one scalar of the element type (every built-in scalar op), and flags.
template <class E>
constexpr bool state_keyable() {
  if constexpr (is_pointwise_v<E>) {
    using Op = decltype(std::declval<E>().op);
    using T = typename E::element_type;
    return std::is_trivially_copyable_v<Op> && sizeof(Op) == sizeof(T);
  } else {
    return true;
  }
}
template <class E>
constexpr std::uint64_t state_key(const E& e) {
  if constexpr (is_pointwise_v<E>) {
    using T = typename E::element_type;
    using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
    return std::bit_cast<U>(e.op);
  } else {
    return e.keepdim ? 1 : 0;
  }
}
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
template <class E>
inline constexpr bool is_fwd_ref_v = is_leaf_of<E>(leaf_kind::forward);
template <class E>
inline constexpr bool is_adj_ref_v = is_leaf_of<E>(leaf_kind::adjoint);

struct raw_entry {
  gkind kind = gkind::pointwise;
  std::uint64_t key = 0;           ///< the node's own operation (and its state, when known)
  bool mergeable = false;          ///< equal key and equal operands mean one value
  int parent = -1;                 ///< tree position of the node's parent (-1: a root)
  int slot = -1;                   ///< which operand of its parent it is (for a root: which root)
  int alias = -1;                  ///< for fwd_ref<K>: K (a canonical forward node)
  int adj = -1;                    ///< for adj_ref<K>: K (resolved through the adjoint roots)
  int children[3] = {-1, -1, -1};  ///< tree positions of the operands
  int cost = 0;                    ///< computing one element (`op_cost_units`; the cost-based plan)
  std::uint64_t sibling_key = 0;   ///< `sibling_of_node`: the key of the node's sibling (0: none)
  int sibling_cost = 0;            ///< what this node costs beside its sibling
};

/// What computing one element of node type `E` costs (`op_cost_units`): its op's declared
/// cost, a custom function's (`F::cost`, else an arithmetic op's), a broadcast's.
template <class E>
struct node_cost {
  static constexpr int value = op_cost_units<void>();
};
template <class Op, class... A>
struct node_cost<expr_node<Op, A...>> {
  static constexpr int value = op_cost_units<Op>();
};
template <class F, class Fwd, class... A>
struct node_cost<custom_expr<F, Fwd, A...>> {
  static constexpr int value = op_cost_units<F>();
};
template <class E>
constexpr int node_cost_units() {
  return node_cost<E>::value;
}
/// Of a unary element-wise node whose op has a sibling (`has_sibling`: sin, cos): the key of
/// the sibling's node on the same operand, and what this node costs beside it; else {0, 0}.
template <class E>
constexpr std::pair<std::uint64_t, int> sibling_of_node() {
  if constexpr (is_pointwise_v<E> && arity_v<E> == 1) {
    using Op = std::remove_cvref_t<decltype(std::declval<E>().op)>;
    if constexpr (has_sibling<Op>) return {pointwise_key<typename Op::sibling>(1), cost_beside_sibling<Op>()};
  }
  return {0, 0};
}

/// Fills `raw` in post-order (children first, left to right) and returns the position of `E`.
/// One instantiation per node *type*: positions are values, not template arguments. When
/// `Known`, `obj` is the tree as a constant: node state is read and equal constants merge
/// (a template flag, not a null test: GCC does not fold address tests under ASan).
template <bool Known, class E>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): one if-constexpr branch per expression kind
constexpr int fill_raw(raw_entry* raw, int& pos, const E* obj) {
  static_assert(is_joint_v<E> || arity_v<E> <= 3,
                "fusegrad::compile: a custom function inside fg::compile takes at most two inputs");
  int ch[arity_v<E> + 1] = {};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    [[maybe_unused]] auto child_ptr = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      if constexpr (Known) return &child<J>(*obj);
      else return static_cast<const std::tuple_element_t<J, children_t<E>>*>(nullptr);
    };
    ((ch[I] = fill_raw<Known>(raw, pos, child_ptr(std::integral_constant<std::size_t, I>{}))), ...);
  }
  (std::make_index_sequence<arity_v<E>>{});
  if constexpr (is_joint_v<E>) {
    for (std::size_t k = 0; k < arity_v<E>; ++k) raw[ch[k]].slot = static_cast<int>(k);
    return -1;
  } else {
    const int me = pos++;
    raw_entry& r = raw[me];
    for (std::size_t k = 0; k < arity_v<E>; ++k) {
      raw[ch[k]].parent = me;
      raw[ch[k]].slot = static_cast<int>(k);
    }
    if constexpr (is_fwd_ref_v<E>) {
      r.alias = static_cast<int>(E::index);
    } else if constexpr (is_adj_ref_v<E>) {
      r.adj = static_cast<int>(E::index);
    } else {
      r.kind = kind_of<E>();
      r.key = local_key<E>();
      r.cost = node_cost_units<E>();
      std::tie(r.sibling_key, r.sibling_cost) = sibling_of_node<E>();
      r.mergeable = true;
      if constexpr (has_state<E>()) {
        if constexpr (state_keyable<E>()) {
          if constexpr (Known) r.key = mix(r.key, state_key(*obj));
          else r.mergeable = false;
        } else {
          r.mergeable = false;
        }
      }
      for (std::size_t k = 0; k < arity_v<E>; ++k) r.children[k] = ch[k];
    }
    return me;
  }
}

/// The canonical graph: `count` nodes, each with its kind, its representative tree position
/// and its canonical children; `canon` maps every
/// tree position to its canonical node.
template <std::size_t N>
struct canonical_graph {
  std::size_t count = 0;
  std::array<int, N> canon{};
  std::array<int, N> rep{};
  std::array<gkind, N> kind{};
  std::array<std::array<int, 3>, N> children{};
  std::array<int, N> cost{};  ///< per canonical node: `raw_entry::cost`
  /// Per canonical node: its sibling's canonical node (the sibling op on the same operand:
  /// ops/op.hpp, `has_sibling`), or -1; and what this node costs beside it.
  std::array<int, N> sibling{}, sibling_cost{};
};

/// `key` mixed with canonical operands `ch` in order, each as its id + 1 (no operand, -1: 0).
/// The + 1 is taken in 64 bits (-1 wraps to 0): the values of the `int` sum, with no `int` sum
/// that could overflow.
constexpr std::uint64_t mix_operands(std::uint64_t key, const std::array<int, 3>& ch) {
  for (const int c : ch) key = mix(key, static_cast<std::uint64_t>(c) + 1);
  return key;
}

/// The buckets of `canonicalize`'s open-addressing table: more than twice the positions.
template <std::size_t N>
inline constexpr std::size_t consing_buckets = std::bit_ceil(2 * N + 1);
/// The canonical ids of mergeable nodes by (key, canonical operands); -1: an empty bucket.
template <std::size_t N>
using consing_table = std::array<int, consing_buckets<N>>;

/// Linear probing for the canonical node of `key` on canonical operands `ch`: its id, or -1
/// with `h` left at the empty bucket that ended the probe (where such a node goes).
template <std::size_t N>
constexpr int find_canonical(const std::array<raw_entry, N>& raw, const canonical_graph<N>& g,
                             const consing_table<N>& table, std::uint64_t key, const std::array<int, 3>& ch,
                             std::size_t& h) {
  constexpr std::size_t mask = consing_buckets<N> - 1;
  for (h = mix_operands(key, ch) & mask; table[h] >= 0; h = (h + 1) & mask) {
    const auto c = static_cast<std::size_t>(table[h]);
    if (raw[static_cast<std::size_t>(g.rep[c])].key == key && g.children[c] == ch) return static_cast<int>(c);
  }
  return -1;
}

/// The canonical node of tree position `t`, a computed node (no fwd_ref or adj_ref): an earlier
/// mergeable node with its key and canonical operands, else a new node of `g`.
template <std::size_t N>
constexpr int intern(const std::array<raw_entry, N>& raw, std::size_t t, canonical_graph<N>& g,
                     consing_table<N>& table) {
  const raw_entry& r = raw[t];
  std::array<int, 3> ch{-1, -1, -1};
  for (std::size_t k = 0; k < 3; ++k) ch[k] = r.children[k] < 0 ? -1 : g.canon[static_cast<std::size_t>(r.children[k])];
  // Open addressing on (key, canonical operands): linear in the tree's size (the tree of a
  // graph with shared subexpressions is much larger than the graph: 677 positions for the
  // 155 nodes of the 40-node test function).
  if (r.mergeable) {
    std::size_t h = 0;
    const int found = find_canonical(raw, g, table, r.key, ch, h);
    if (found >= 0) return found;
    table[h] = static_cast<int>(g.count);
  }
  const std::size_t id = g.count++;
  g.rep[id] = static_cast<int>(t);
  g.kind[id] = r.kind;
  g.children[id] = ch;
  g.cost[id] = r.cost;
  return static_cast<int>(id);
}

/// The canonical node of adj_ref<K> at tree position `t`: that of the root holding K's adjoint,
/// which must come before `t`.
template <std::size_t N, std::size_t MF>
constexpr int adjoint_node(const canonical_graph<N>& g, const std::array<int, MF>& adj_root, int k, std::size_t t) {
  const int root = adj_root[static_cast<std::size_t>(k)];
  if (root < 0 || static_cast<std::size_t>(root) >= t) throw "fusegrad: adjoint referenced before it is defined";
  return g.canon[static_cast<std::size_t>(root)];
}

/// Siblings: per canonical node with a sibling op, the node of the sibling's key on the same
/// operands, if the graph has it.
template <std::size_t N>
constexpr void link_siblings(const std::array<raw_entry, N>& raw, canonical_graph<N>& g,
                             const consing_table<N>& table) {
  g.sibling.fill(-1);
  for (std::size_t c = 0; c < g.count; ++c) {
    const raw_entry& r = raw[static_cast<std::size_t>(g.rep[c])];
    if (r.sibling_key == 0 || !r.mergeable) continue;
    std::size_t h = 0;
    const int d = find_canonical(raw, g, table, r.sibling_key, g.children[c], h);
    if (d >= 0) {
      g.sibling[c] = d;
      g.sibling_cost[c] = r.sibling_cost;
    }
  }
}

/// Hash-consing over post-order positions: a node is a new canonical node unless an earlier
/// mergeable node has the same key and the same canonical operands. `adj_root[K]` is the tree
/// position of the root holding the adjoint of forward node K (roots come in an order where
/// every adj_ref points back to an earlier root).
template <std::size_t N, std::size_t MF = 1>
constexpr canonical_graph<N> canonicalize(const std::array<raw_entry, N>& raw,
                                          const std::array<int, MF>& adj_root = {}) {
  canonical_graph<N> g;
  consing_table<N> table{};
  table.fill(-1);
  for (std::size_t t = 0; t < N; ++t) {
    const raw_entry& r = raw[t];
    if (r.alias >= 0) g.canon[t] = r.alias;  // forward nodes keep their ids: the forward roots come first
    else if (r.adj >= 0) g.canon[t] = adjoint_node(g, adj_root, r.adj, t);
    else g.canon[t] = intern(raw, t, g, table);
  }
  link_siblings(raw, g, table);
  return g;
}

/// The type of the node at tree position `t` of the tree `J` whose table is `Raw`: the
/// operand in slot `Raw[t].slot` of its parent's type. Memoised per position, so every
/// ancestor is instantiated once for all the positions asked about (a lookup along the path
/// from the root instantiated one step per position and depth).
/// `of(j)`: that node of the tree object `j`, typed (how a constant evaluation, which cannot
/// read a node through a `void` pointer, reaches a node).
template <class J, const auto& Raw, int t, int parent = Raw[static_cast<std::size_t>(t)].parent>
struct node_type_at {
  static constexpr auto slot = static_cast<std::size_t>(Raw[static_cast<std::size_t>(t)].slot);
  using type = std::tuple_element_t<slot, children_t<typename node_type_at<J, Raw, parent>::type>>;
  static constexpr const type& of(const J& j) { return child<slot>(node_type_at<J, Raw, parent>::of(j)); }
};
template <class J, const auto& Raw, int t>
struct node_type_at<J, Raw, t, -1> {  // a root of the joint tree
  static constexpr auto slot = static_cast<std::size_t>(Raw[static_cast<std::size_t>(t)].slot);
  using type = std::tuple_element_t<slot, children_t<J>>;
  static constexpr const type& of(const J& j) { return child<slot>(j); }
};

}  // namespace fusegrad::detail
