#pragma once
/// \file fusegrad/compile/analysis.hpp
/// Everything fusegrad decides at compile time about a function `fn` called on `N` inputs of
/// element type `T`: its forward expressions, the derived backward expressions, the
/// canonical joint graph and the save/recompute plan for a policy.

#include <cstring>
#include <memory>
#include <tuple>

#include "fusegrad/compile/shape_memo.hpp"
#include "fusegrad/expr/graph.hpp"
#include "fusegrad/partition/costs.hpp"
#include "fusegrad/partition/plan.hpp"

namespace fusegrad {

/// Save/recompute policies (AOTAutograd's partitioners).
namespace policy {
/// The default: the plan of least estimated time, by what each op and each load and store
/// costs (partition/plan.hpp, `policy_kind::cost`), chosen per call by size: a compiled
/// function holds the plan for values that fit in cache and the one for values that stream
/// from memory (when they differ) and picks one from its inputs' sizes (`fg::cache_bytes()`).
struct cost {};
struct cost_cached {};    ///< the cost-based plan for values that fit in cache (every call)
struct cost_streamed {};  ///< the cost-based plan for values that stream from memory (every call)
struct min_cut {};        ///< AOTAutograd's min-cut: save the fewest tensors, recompute pointwise ops
struct save_all {};       ///< save what eager mode saves
struct recompute_all {};  ///< save only inputs (and reductions/matmuls), recompute the rest
/// Save at most `K` tensors: the least recomputation among save_all, min_cut, recompute_all
/// that fits (recompute_all if none does).
template <int K>
struct memory_budget {};
}  // namespace policy

namespace detail {

template <class A>
struct node_tables;  // fusegrad/compile/node_eval.hpp
template <class A>
struct constant_node_tables;  // fusegrad/compile/node_eval.hpp

template <class P>
struct policy_value;
template <>
struct policy_value<policy::min_cut> {
  static constexpr partition::policy value{partition::policy_kind::min_cut, 0};
};
template <>
struct policy_value<policy::save_all> {
  static constexpr partition::policy value{partition::policy_kind::save_all, 0};
};
template <>
struct policy_value<policy::recompute_all> {
  static constexpr partition::policy value{partition::policy_kind::recompute_all, 0};
};
template <int K>
struct policy_value<policy::memory_budget<K>> {
  static constexpr partition::policy value{partition::policy_kind::memory_budget, K};
};
template <>
struct policy_value<policy::cost_cached> {
  static constexpr partition::policy value = partition::cost_policy(partition::size_class::cached);
};
template <>
struct policy_value<policy::cost_streamed> {
  static constexpr partition::policy value = partition::cost_policy(partition::size_class::streamed);
};

template <class X>
inline constexpr bool is_std_tuple_v = false;
template <class... X>
inline constexpr bool is_std_tuple_v<std::tuple<X...>> = true;

/// The forward outputs of `fn` on symbolic inputs, always as a tuple.
template <Element T, class Fn, std::size_t... I>
constexpr auto symbolic_outputs(const Fn& fn, std::index_sequence<I...>) {
  static_assert(std::is_invocable_v<const Fn&, sym<I, T>...>,
                "fusegrad::compile: the function cannot be called on symbolic inputs; write it as a "
                "generic lambda (auto parameters) using fusegrad ops only");
  auto r = fn(sym<I, T>{}...);
  if constexpr (is_std_tuple_v<decltype(r)>) {
    static_assert([]<class... X>(std::type_identity<std::tuple<X...>>) { return (Expr<X> && ...); }(
                      std::type_identity<decltype(r)>{}),
                  "fusegrad::compile: every output must be computed with fusegrad ops from the inputs");
    return r;
  } else {
    static_assert(Expr<decltype(r)>,
                  "fusegrad::compile: the function must return a value computed with fusegrad ops from "
                  "its inputs (or a std::tuple of them)");
    return std::tuple<decltype(r)>(r);
  }
}

/// Whether `Fn{}(inputs...)` is a constant expression (a captureless function of fusegrad's
/// built-in ops): then its constants are known at compile time and equal subexpressions with
/// equal constants are one node. Otherwise (captures, user ops that are not constexpr) constants
/// are read at run time and nodes that carry one are never merged.
template <Element T, class Fn, std::size_t... I>
constexpr bool constant_evaluable(std::index_sequence<I...>) {
  if constexpr (!std::is_default_constructible_v<Fn>) return false;
  else return requires {
      typename std::bool_constant<(static_cast<void>(Fn{}(sym<I, T>{}...)), true)>;
    };
}

/// The outputs of a function as the forward joint tree.
template <class... R>
constexpr joint<R...> forward_joint_of(const std::tuple<R...>& outs) {
  return std::apply([](const auto&... r) { return make_joint_of(r...); }, outs);
}

/// The forward expression of a constant-evaluable function, as a constant.
template <Element T, class Fn, std::size_t NIn>
inline constexpr auto constant_forward = forward_joint_of(symbolic_outputs<T>(Fn{}, std::make_index_sequence<NIn>{}));

/// Everything known at compile time about `fn` on `NIn` inputs of type `T`.
template <Element T, class Fn, std::size_t NIn>
struct analysis {
  using fn_type = Fn;
  using element_type = T;
  static constexpr auto outputs(const Fn& fn) { return symbolic_outputs<T>(fn, std::make_index_sequence<NIn>{}); }
  using out_t = decltype(outputs(std::declval<const Fn&>()));
  static constexpr std::size_t n_out = std::tuple_size_v<out_t>;
  static constexpr std::size_t n_in = NIn;

  // ---- the forward graph ---------------------------------------------------------------
  static constexpr auto forward_joint(const out_t& outs) { return forward_joint_of(outs); }
  using fjoint_t = decltype(forward_joint(std::declval<const out_t&>()));
  static constexpr std::size_t FN = tree_size<fjoint_t>();  ///< forward tree positions
  static constexpr bool constant_fn = constant_evaluable<T, Fn>(std::make_index_sequence<NIn>{});
  static constexpr std::array<raw_entry, FN> fraw = [] {
    std::array<raw_entry, FN> raw{};
    int pos = 0;
    if constexpr (constant_fn) fill_raw<true>(raw.data(), pos, &constant_forward<T, Fn, NIn>);
    else fill_raw<false>(raw.data(), pos, static_cast<const fjoint_t*>(nullptr));
    return raw;
  }();
  static constexpr auto fcg = canonicalize(fraw);
  static constexpr std::size_t MF = fcg.count;  ///< canonical forward nodes: ids 0..MF-1

  template <class J>
  static constexpr auto root_indices() {
    return []<std::size_t... R>(std::index_sequence<R...>) {
      std::array<int, sizeof...(R)> idx{};
      std::size_t acc = 0, k = 0;
      ((acc += tree_size<std::tuple_element_t<R, children_t<J>>>(), idx[k++] = static_cast<int>(acc) - 1), ...);
      return idx;
    }
    (std::make_index_sequence<arity_v<J>>{});
  }
  /// Canonical node of forward output k.
  static constexpr std::array<int, n_out> out_node = [] {
    constexpr auto roots = root_indices<fjoint_t>();
    std::array<int, n_out> r{};
    for (std::size_t k = 0; k < n_out; ++k) r[k] = fcg.canon[static_cast<std::size_t>(roots[k])];
    return r;
  }();

  template <std::size_t C>
  using fnode_t = typename node_type_at<fjoint_t, fraw, fcg.rep[C]>::type;
  /// Whether every function object's forward tree is the constant `constant_forward`: the
  /// function is constant-evaluable and has no members (a captureless lambda), so no object of
  /// its type holds constants other than `Fn{}`'s.
  static constexpr bool constant_tree = constant_fn && std::is_empty_v<Fn>;
  /// Forward node C of a forward tree whose node addresses (post-order) are `fp`; with
  /// `constant_tree`, of the constant forward tree (then `fp` is not read, and the backward
  /// built on it can be a constant too: `constant_joint`).
  template <std::size_t C>
  static constexpr const fnode_t<C>& fnode([[maybe_unused]] const void* const* fp) {
    if constexpr (constant_tree) return node_type_at<fjoint_t, fraw, fcg.rep[C]>::of(constant_forward<T, Fn, NIn>);
    else return *static_cast<const fnode_t<C>*>(fp[fcg.rep[C]]);
  }
  using fptrs = const void* const*;

  /// Canonical forward node of input i (-1 when the function ignores it).
  static constexpr std::array<int, NIn> input_node = [] {
    std::array<int, NIn> r{};
    r.fill(-1);
    [&]<std::size_t... C>(std::index_sequence<C...>) {
      (
          [&] {
            using E = fnode_t<C>;
            if constexpr (is_leaf_v<E>) r[E::index] = static_cast<int>(C);
          }(),
          ...);
    }
    (std::make_index_sequence<MF>{});
    return r;
  }();

  /// Which forward nodes depend on an input (only those get adjoints).
  static constexpr std::array<bool, MF> has_adjoint = [] {
    std::array<bool, MF> r{};
    for (std::size_t c = 0; c < MF; ++c) {
      if (fcg.kind[c] == gkind::input) r[c] = true;
      for (int ch : fcg.children[c])
        if (ch >= 0 && r[static_cast<std::size_t>(ch)]) r[c] = true;
    }
    // A node whose only users ignore it (custom ops' forward operand) still gets none then.
    return r;
  }();

  /// The (user, slot) pairs of each forward node.
  static constexpr std::size_t max_users = 3 * MF + 1;
  static constexpr auto users = [] {
    std::array<std::array<std::pair<int, int>, max_users>, MF> u{};
    std::array<std::size_t, MF> n{};
    for (std::size_t p = 0; p < MF; ++p)
      for (int s = 0; s < 3; ++s) {
        const int ch = fcg.children[p][static_cast<std::size_t>(s)];
        if (ch < 0) continue;
        u[static_cast<std::size_t>(ch)][n[static_cast<std::size_t>(ch)]++] = {static_cast<int>(p), s};
      }
    return std::pair{u, n};
  }();

  /// Whether forward node P has a (non-zero) adjoint.
  template <std::size_t P>
  static constexpr bool live() {
    return !std::is_same_v<decltype(adjoint<P>(fptrs{})), zero_t>;
  }

  /// The contribution of forward node C's U-th user to C's adjoint (zero when that user has
  /// no adjoint itself).
  template <std::size_t C, std::size_t U>
  static constexpr auto user_contribution(fptrs fp) {
    constexpr auto pu = users.first[C][U];
    constexpr auto P = static_cast<std::size_t>(pu.first);
    constexpr auto ch = fcg.children[P];
    if constexpr (!live<P>()) return zero_t{};
    else return contribution<P, static_cast<std::size_t>(pu.second), ch[0], ch[1], ch[2], T>(fnode<P>(fp));
  }
  /// The gradient of output K when forward node C is that output, else zero.
  template <std::size_t C, std::size_t K>
  static constexpr auto seed() {
    if constexpr (out_node[K] == static_cast<int>(C)) return gsym<K, T>{};
    else return zero_t{};
  }

  template <class X>
  static constexpr bool is_zero = std::is_same_v<X, zero_t>;

  /// The adjoint of forward node C: the sum of its users' contributions and its output
  /// seeds; one contribution as it is; several, each summed to C's shape first; an input's
  /// adjoint is always summed to the input's shape. (A fold over packs, no tuples: this runs
  /// once per forward node.)
  template <std::size_t C>
  static constexpr auto adjoint(fptrs fp) {
    if constexpr (!has_adjoint[C]) {
      return zero_t{};
    } else {
      return [&]<std::size_t... U, std::size_t... K>(std::index_sequence<U...>, std::index_sequence<K...>) {
        constexpr std::size_t live = (std::size_t{0} + ... + (is_zero<decltype(user_contribution<C, U>(fp))> ? 0 : 1)) +
                                     (std::size_t{0} + ... + (out_node[K] == static_cast<int>(C) ? 1 : 0));
        constexpr bool reduce_each = live > 1 || fcg.kind[C] == gkind::input;
        auto wrap = [](const auto& v) {
          using V = std::remove_cvref_t<decltype(v)>;
          if constexpr (is_zero<V> || !reduce_each) return v;
          else return sumto_expr<C, V>{{}, v};
        };
        return fold_add(wrap(user_contribution<C, U>(fp))..., wrap(seed<C, K>())...);
      }
      (std::make_index_sequence<users.second[C]>{}, std::make_index_sequence<n_out>{});
    }
  }

  /// Forward ids whose adjoints are roots of the joint tree, latest first (users before
  /// operands, so every adj_ref points back to an earlier root).
  template <std::size_t C>
  using adjoint_t = decltype(adjoint<C>(fptrs{}));
  static constexpr std::array<bool, MF> adjoint_live = []<std::size_t... C>(std::index_sequence<C...>) {
    return std::array<bool, MF>{!is_zero<adjoint_t<C>>...};
  }
  (std::make_index_sequence<MF>{});

  /// Forward ids with a live adjoint, latest first.
  static constexpr std::size_t n_live = [] {
    std::size_t n = 0;
    for (bool b : adjoint_live) n += b ? 1 : 0;
    return n;
  }();
  static constexpr std::array<std::size_t, n_live> live_ids = [] {
    std::array<std::size_t, n_live> r{};
    std::size_t k = 0;
    for (std::size_t R = 0; R < MF; ++R)
      if (adjoint_live[MF - 1 - R]) r[k++] = MF - 1 - R;
    return r;
  }();

  /// The joint tree: forward outputs, then the live adjoints from the last forward node down.
  static constexpr auto make_joint(const Fn& fn) {
    const auto outs = outputs(fn);
    const auto fj = forward_joint(outs);
    std::array<const void*, FN> fp{};
    std::size_t pos = 0;
    if constexpr (!constant_tree) collect_addresses(fj, fp.data(), pos);  // else `fnode` reads no address
    return [&]<std::size_t... K, std::size_t... J>(std::index_sequence<K...>, std::index_sequence<J...>) {
      return make_joint_of(std::get<K>(outs)..., adjoint<live_ids[J]>(fp.data())...);
    }
    (std::make_index_sequence<n_out>{}, std::make_index_sequence<n_live>{});
  }
  using joint_t = decltype(make_joint(std::declval<const Fn&>()));
  static constexpr std::size_t tree_nodes = tree_size<joint_t>();

  /// Tree index of the root holding each forward node's adjoint (-1: none).
  static constexpr std::array<int, MF> adjoint_root = [] {
    constexpr auto roots = root_indices<joint_t>();
    std::array<int, MF> r{};
    r.fill(-1);
    std::size_t k = n_out;
    for (std::size_t R = 0; R < MF; ++R) {
      const std::size_t C = MF - 1 - R;
      if (adjoint_live[C]) r[C] = roots[k++];
    }
    return r;
  }();
  /// The joint tree's table: its forward part keeps the forward walk's keys (constants read
  /// there when known), so the joint graph's first MF nodes are the forward graph's.
  /// (The forward roots come first and have the forward tree's positions: their entries are
  /// copied, and only the adjoint roots are walked, so no forward node type is walked twice.)
  static constexpr std::array<raw_entry, tree_nodes> jraw = [] {
    std::array<raw_entry, tree_nodes> raw{};
    for (std::size_t t = 0; t < FN; ++t) raw[t] = fraw[t];
    int pos = static_cast<int>(FN);
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      ((raw[static_cast<std::size_t>(fill_raw<false>(
                raw.data(), pos, static_cast<const std::tuple_element_t<n_out + J, children_t<joint_t>>*>(nullptr)))]
            .slot = static_cast<int>(n_out + J)),
       ...);
    }
    (std::make_index_sequence<n_live>{});
    return raw;
  }();
  static constexpr auto cg = canonicalize(jraw, adjoint_root);
  static_assert(
      [] {
        for (std::size_t t = 0; t < FN; ++t)
          if (cg.canon[t] != fcg.canon[t]) return false;
        return true;
      }(),
      "fusegrad internal error: the joint graph does not extend the forward graph");
  static constexpr std::size_t M = cg.count;

  /// Canonical node of the gradient of input i (-1: no gradient).
  static constexpr std::array<int, NIn> grad_node = [] {
    std::array<int, NIn> r{};
    for (std::size_t i = 0; i < NIn; ++i) {
      const int c = input_node[i];
      r[i] = c >= 0 && adjoint_root[static_cast<std::size_t>(c)] >= 0
                 ? cg.canon[static_cast<std::size_t>(adjoint_root[static_cast<std::size_t>(c)])]
                 : -1;
    }
    return r;
  }();

  static constexpr partition::joint_graph<M> pgraph = [] {
    partition::joint_graph<M> g{};
    for (std::size_t c = 0; c < M; ++c) {
      auto& n = g.nodes[c];
      n.kind = partition::kind_of(cg.kind[c]);
      n.children[0] = cg.children[c][0];
      n.children[1] = cg.children[c][1];
      n.children[2] = cg.children[c][2];
      n.cost = cg.cost[c];
      n.sibling = cg.sibling[c];
      n.sibling_cost = cg.sibling_cost[c];
    }
    for (int o : out_node) g.nodes[static_cast<std::size_t>(o)].forward_root = true;
    for (int gi : grad_node)
      if (gi >= 0) g.nodes[static_cast<std::size_t>(gi)].backward_root = true;
    return g;
  }();

  template <class Policy>
  static constexpr partition::plan<M> plan = partition::make_plan(pgraph, policy_value<Policy>::value);

  /// (A forward node's type is its type in the forward tree: same position, one lookup.)
  template <std::size_t C, bool Forward = (C < MF)>
  struct node_type {
    using type = typename node_type_at<joint_t, jraw, cg.rep[C]>::type;
  };
  template <std::size_t C>
  struct node_type<C, true> {
    using type = fnode_t<C>;
  };
  template <std::size_t C>
  using node_t = typename node_type<C>::type;
  /// Canonical node C of an instance whose node addresses (post-order) are `nodes`.
  template <std::size_t C>
  static const node_t<C>& node(const void* const* nodes) {
    return *static_cast<const node_t<C>*>(nodes[cg.rep[C]]);
  }

  /// Whether the whole joint tree is a constant (`constant_joint`): the forward tree is
  /// (`constant_tree`) and every derivative rule it uses is constant-evaluable. Then no code
  /// compiled per function builds the joint tree or walks it at run time: an instance reads
  /// its node addresses and states from constant tables.
  static constexpr bool constant_backward = [] {
    if constexpr (!constant_tree) return false;
    else return requires {
        typename std::bool_constant<(static_cast<void>(make_joint(Fn{})), true)>;
      };
  }();
  /// The joint tree of every function object (with `constant_backward`; else an empty joint).
  static constexpr auto constant_joint = [] {
    if constexpr (constant_backward) return make_joint(Fn{});
    else return detail::joint<>{};
  }();

  /// The joint tree of one compiled function object (its run-time constants; with
  /// `constant_backward`, `constant_joint` instead), the addresses of its nodes and each
  /// canonical node's run-time state (op object, keepdim flag); built once per function object
  /// and element type.
  struct instance {
    std::conditional_t<constant_backward, detail::joint<>, joint_t> joint;
    std::array<const void*, tree_nodes> nodes{};
    std::array<const void*, M> state{};
    mutable shape_memo memo;  ///< what its calls inferred about shapes (compile/shape_memo.hpp)
  };
  static std::shared_ptr<const instance> instantiate([[maybe_unused]] const Fn& fn) {
    if constexpr (constant_backward) {
      // Copied as blocks of memory (an initialiser would be compiled as one store per node).
      std::shared_ptr<instance> p(new instance{});
      constexpr auto& tables = constant_node_tables<analysis>::value;
      std::memcpy(p->nodes.data(), tables.nodes.data(), sizeof p->nodes);
      std::memcpy(p->state.data(), tables.states.data(), sizeof p->state);
      return p;
    } else {
      std::shared_ptr<instance> p(new instance{make_joint(fn), {}, {}, {}});
      std::size_t pos = 0;
      collect_addresses(p->joint, p->nodes.data(), pos);
      p->state = node_tables<analysis>::states(p->nodes.data());
      return p;
    }
  }
};

}  // namespace detail
}  // namespace fusegrad
