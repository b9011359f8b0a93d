#pragma once
/// \file fusegrad/compile/backend.hpp
/// What a compile backend is: the `Backend` concept, the state a graph backend evaluates
/// (`eval_context`), and the two reference backends, `backend::eager` (the function as
/// written) and `backend::aot_eager` (the joint graph node by node). The default backend,
/// `backend::fused`, is built on this in fusegrad/kernel/fused.hpp.

#include <concepts>
#include <string_view>
#include <vector>

#include "fusegrad/compile/node_eval.hpp"

namespace fusegrad {

namespace detail {
class stage_choices;  // compile/shape_memo.hpp
/// Whether backend `B` honours `eval_context::shapes_known` (see `Backend`).
template <class B>
constexpr bool reads_known_shapes() {
  if constexpr (requires { B::reads_known_shapes; }) return B::reads_known_shapes;
  else return false;
}
}  // namespace detail

/// The state a graph backend evaluates: values and shapes of canonical nodes.
template <class A, Element T>
struct eval_context {
  const typename A::instance& instance;  ///< the joint tree with its constants, node states
  const void* const* nodes;              ///< node addresses of the instance (`A::node<C>(nodes)`)
  std::vector<tensor<T>>& values;        ///< one slot per canonical node
  std::vector<shape>& shapes;            ///< shapes of evaluated nodes (forward shapes are kept)
  const std::vector<tensor<T>>& inputs;
  const std::vector<tensor<T>>& grads;  ///< gradients of the outputs (backward only)
  /// `shapes` already holds every node's shape, from an earlier call on inputs of the same
  /// shapes (compile/shape_memo.hpp): the pass reads it and must not write it (other threads
  /// may read it at the same time). Only for backends that say they honour it (`reads_known_shapes`).
  bool shapes_known = false;
  /// Where the pass's loops keep what they chose per stage on these shapes (null: nowhere;
  /// only with `shapes_known`, the choices of calls on the same shapes).
  detail::stage_choices* choices = nullptr;
};

namespace backend {
/// Runs the user's function op by op on eager tensors: the reference.
struct eager {
  static constexpr std::string_view name = "eager";
  bool fullgraph = false;  ///< as a compiled-autograd backend: a graph break throws
  static constexpr bool runs_graph = false;
};

/// The joint graph and plan, evaluated node by node with eager kernels (no fusion).
struct aot_eager {
  static constexpr std::string_view name = "aot_eager";
  bool fullgraph = false;  ///< as a compiled-autograd backend: a graph break throws
  static constexpr bool runs_graph = true;
  static constexpr bool reads_known_shapes = true;
  /// Evaluates the canonical nodes flagged in `Active` (in order); `Keep` says which values
  /// the caller reads afterwards (this backend keeps them all).
  template <class A, const auto& Active, const auto& Keep, Element T>
  static void evaluate(eval_context<A, T>& ctx) {
    auto g = detail::nodes_of<A>(ctx.instance, ctx.values, ctx.shapes, ctx.inputs, ctx.grads);
    g.shapes_known = ctx.shapes_known;
    g.run(Active.data(), A::M);
  }
};
}  // namespace backend

/// A compile backend: `name`, and either `runs_graph == false` (the function is run as
/// written) or a static `evaluate<A, Active, Keep>(eval_context&)` that computes the
/// flagged canonical nodes of the joint graph (`Active` and `Keep`: `const auto&` template
/// parameters, references to the pass's named constexpr `std::array<bool, A::M>` masks).
/// A backend with `static constexpr bool reads_known_shapes = true` is handed the shapes an
/// earlier call inferred (`eval_context::shapes_known`); any other gets a list to fill.
template <class B>
concept Backend = requires {
  { B::name } -> std::convertible_to<std::string_view>;
  { B::runs_graph } -> std::convertible_to<bool>;
};

}  // namespace fusegrad
