#pragma once
/// \file fusegrad/compile/analysis.hpp
/// Everything fusegrad decides at compile time about a function `fn` called on `N` inputs of
/// element type `T`: its forward expressions, the derived backward expressions, the
/// canonical joint graph and the save/recompute plan for a policy.

#include <tuple>

#include "fusegrad/expr/graph.hpp"
#include "fusegrad/partition/plan.hpp"

namespace fusegrad {

/// Save/recompute policies (AOTAutograd's partitioners).
namespace policy {
struct min_cut {};        ///< min-cut: save the fewest tensors, recompute cheap pointwise ops
struct save_all {};       ///< save what eager mode saves
struct recompute_all {};  ///< save only inputs (and reductions/matmuls), recompute the rest
/// Save at most `K` tensors: the least recomputation among save_all, min_cut, recompute_all
/// that fits (recompute_all if none does).
template <int K>
struct memory_budget {};
}  // namespace policy

namespace detail {

template <class P> struct policy_value;
template <> struct policy_value<policy::min_cut> { static constexpr partition::policy value{partition::policy_kind::min_cut, 0}; };
template <> struct policy_value<policy::save_all> { static constexpr partition::policy value{partition::policy_kind::save_all, 0}; };
template <> struct policy_value<policy::recompute_all> { static constexpr partition::policy value{partition::policy_kind::recompute_all, 0}; };
template <int K> struct policy_value<policy::memory_budget<K>> { static constexpr partition::policy value{partition::policy_kind::memory_budget, K}; };

template <class X> inline constexpr bool is_std_tuple_v = false;
template <class... X> inline constexpr bool is_std_tuple_v<std::tuple<X...>> = true;

/// The forward outputs of `fn` on symbolic inputs, always as a tuple.
template <Element T, class Fn, std::size_t... I>
auto symbolic_outputs(const Fn& fn, std::index_sequence<I...>) {
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

/// d(outputs J..)/d(input I), summed over the outputs (zero_t when input I does not matter).
template <std::size_t I, std::size_t J, Element T, class Out, std::size_t Base>
auto sum_adjoints(const Out& outs) {
  if constexpr (J == std::tuple_size_v<Out>) {
    return zero_t{};
  } else {
    using E = std::tuple_element_t<J, Out>;
    return add_adjoint(backprop<I, Base>(std::get<J>(outs), gsym<J, T>{}),
                       sum_adjoints<I, J + 1, T, Out, Base + tree_size<E>()>(outs));
  }
}

template <class X>
auto nonzero_tuple(const X& x) {
  if constexpr (std::is_same_v<X, zero_t>) return std::tuple<>{};
  else return std::tuple<X>(x);
}

/// Everything known at compile time about `fn` on `NIn` inputs of type `T`.
template <Element T, class Fn, std::size_t NIn>
struct analysis {
  static auto outputs(const Fn& fn) { return symbolic_outputs<T>(fn, std::make_index_sequence<NIn>{}); }
  using out_t = decltype(outputs(std::declval<const Fn&>()));
  static constexpr std::size_t n_out = std::tuple_size_v<out_t>;
  static constexpr std::size_t n_in = NIn;

  template <std::size_t I>
  static auto gradient(const out_t& outs) { return sum_adjoints<I, 0, T, out_t, 0>(outs); }
  template <std::size_t I>
  using grad_t = decltype(gradient<I>(std::declval<const out_t&>()));

  static constexpr std::array<bool, NIn> has_grad = []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<bool, NIn>{!std::is_same_v<grad_t<I>, zero_t>...};
  }(std::make_index_sequence<NIn>{});

  /// The joint tree: forward outputs, then the gradient of each input that has one.
  static auto make_joint(const Fn& fn) {
    const auto outs = outputs(fn);
    auto roots = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple_cat(outs, nonzero_tuple(gradient<I>(outs))...);
    }(std::make_index_sequence<NIn>{});
    return std::apply([](const auto&... r) { return joint<std::remove_cvref_t<decltype(r)>...>{{r...}}; }, roots);
  }
  using joint_t = decltype(make_joint(std::declval<const Fn&>()));
  static constexpr std::size_t tree_nodes = tree_size<joint_t>();
  static constexpr auto cg = canonicalize<joint_t>();
  static constexpr std::size_t M = cg.count;

  /// Tree index of each root of the joint tree.
  static constexpr auto root_tree_index = []<std::size_t... R>(std::index_sequence<R...>) {
    std::array<int, sizeof...(R)> idx{};
    std::size_t acc = 0, k = 0;
    ((acc += tree_size<std::tuple_element_t<R, children_t<joint_t>>>(), idx[k++] = static_cast<int>(acc) - 1), ...);
    return idx;
  }(std::make_index_sequence<arity_v<joint_t>>{});

  /// Canonical node of forward output k.
  static constexpr std::array<int, n_out> out_node = [] {
    std::array<int, n_out> r{};
    for (std::size_t k = 0; k < n_out; ++k) r[k] = cg.canon[static_cast<std::size_t>(root_tree_index[k])];
    return r;
  }();
  /// Canonical node of the gradient of input i (-1: no gradient).
  static constexpr std::array<int, NIn> grad_node = [] {
    std::array<int, NIn> r{};
    std::size_t k = n_out;
    for (std::size_t i = 0; i < NIn; ++i)
      r[i] = has_grad[i] ? cg.canon[static_cast<std::size_t>(root_tree_index[k++])] : -1;
    return r;
  }();

  static constexpr partition::joint_graph<M> pgraph = [] {
    partition::joint_graph<M> g{};
    for (std::size_t c = 0; c < M; ++c) {
      auto& n = g.nodes[c];
      switch (cg.kind[c]) {
        case gkind::input: n.kind = partition::node_kind::input; break;
        case gkind::grad_input: n.kind = partition::node_kind::grad_input; break;
        case gkind::pointwise:
        case gkind::custom:
        case gkind::unreduce: n.kind = partition::node_kind::pointwise; break;
        case gkind::reduction:
        case gkind::sumto: n.kind = partition::node_kind::reduction; break;
        case gkind::matmul: n.kind = partition::node_kind::extern_op; break;
      }
      n.children[0] = cg.children[c][0];
      n.children[1] = cg.children[c][1];
      n.children[2] = cg.children[c][2];
    }
    for (int o : out_node) g.nodes[static_cast<std::size_t>(o)].forward_root = true;
    for (int gi : grad_node)
      if (gi >= 0) g.nodes[static_cast<std::size_t>(gi)].backward_root = true;
    return g;
  }();

  template <class Policy>
  static constexpr partition::plan<M> plan = partition::make_plan(pgraph, policy_value<Policy>::value);

  template <std::size_t C>
  using node_t = node_at_t<joint_t, static_cast<std::size_t>(cg.rep[C])>;
  template <std::size_t C>
  static const node_t<C>& node(const joint_t& j) { return get_node<static_cast<std::size_t>(cg.rep[C]), 0>(j); }
};

}  // namespace detail
}  // namespace fusegrad
