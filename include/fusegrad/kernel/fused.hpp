#pragma once
/// \file fusegrad/kernel/fused.hpp
/// The `fused` backend (Inductor's counterpart): each stage of the schedule is ONE pass over
/// memory. The pass loads its operands as xsimd batches (a broadcast operand is splatted),
/// evaluates every element-wise node of the stage in registers with the very `value`
/// functions eager mode uses, stores what later stages read, and accumulates the stage's
/// reductions as the tiles pass (sums with the one definition of core/accumulate.hpp, so
/// they equal eager mode's bits). Every element goes through the op's own SIMD `value`.
///
/// The backend's parts, each in its file: the loops' plan (fusegrad/kernel/layout.hpp, from
/// the schedule of fusegrad/kernel/schedule.hpp), the per-stage row bodies
/// (fusegrad/kernel/row_body.hpp) and the run-time runner (fusegrad/kernel/fused_runner.hpp).
/// This file ties them into `backend::fused`.

#include <cstddef>
#include <string_view>

#include "fusegrad/compile/backend.hpp"
#include "fusegrad/compile/node_eval.hpp"
#include "fusegrad/kernel/fused_runner.hpp"
#include "fusegrad/kernel/layout.hpp"
#include "fusegrad/kernel/row_body.hpp"
#include "fusegrad/kernel/schedule.hpp"

namespace fusegrad::detail {

/// The leaves' values and every other scheduled node's shape, in topological order (the
/// inputs' values alone where the shapes are known: `fused_evaluate`).
template <Element T>
void fused_shapes(node_eval<T>& g, const role* roles, const bool* active, std::size_t m) {
  for (std::size_t c = 0; c < m; ++c) {
    if (roles[c] == role::none) continue;
    const bool input = g.desc[c].kind == gkind::input || g.desc[c].kind == gkind::grad_input;
    if (roles[c] == role::leaf && active[c] && input) g.values[c] = g.eval(static_cast<int>(c));
    if (roles[c] == role::leaf) g.shapes[c] = g.values[c].shape();
    else g.infer_shape(static_cast<int>(c));
  }
}

/// Whether pass `Active` of `A` also gets loops for `unreduced<A>` (its gradients summed to
/// unbroadcast shapes as the identity): where those take fewer loops over memory. Each loop
/// saved is a store and a re-read of the values that crossed it, whether the one loop keeps
/// its batches in registers (the ten-layer tanh chain's backward stores and re-reads each
/// layer's term otherwise: see docs/compile.md, "Gradients summed to an operand's shape") or
/// runs node by node over tiles, in L1 (the 40-node test function's backward: two loops against
/// ten; docs/performance.md, "fg::compile").
template <class A, const auto& Active, const auto& Keep>
constexpr bool unreduced_loops_pay() {
  if constexpr (!reads_a_sum_to_shape<A, Active>()) return false;
  else return schedule_v<unreduced<A>, Active, Keep>.stages < schedule_v<A, Active, Keep>.stages;
}

/// Whether every `sumto` node of pass `Active` that `unreduced` reads as the identity keeps
/// its operand's shape.
template <class A, const auto& Active, Element T>
bool sums_unreduced(const node_eval<T>& g) {
  static constexpr auto sums = index_list([] {
    std::array<bool, A::M> m{};
    for (std::size_t c = 0; c < A::M; ++c)
      m[c] = Active[c] && A::cg.kind[c] == gkind::sumto && unreduced<A>::cg.kind[c] == gkind::custom;
    return m;
  });
  for (std::size_t c : sums)
    if (!(g.shapes[c] == g.shapes[static_cast<std::size_t>(A::cg.children[c][0])])) return false;
  return true;
}

/// Runs the loops of graph `G` (the analysis, or `unreduced` of it) over `g`.
template <class G, const auto& Active, const auto& Keep, Element T>
void fused_run(node_eval<T>& g, stage_choices* choices) {
  static constexpr auto& layout = fused_layout_v<G, Active, Keep>;
  fused_runner<T> run(fused_view_v<G, Active, Keep>, fused_bodies<G, Active, Keep, T>::value.data(), g, choices);
  // A single stage never forms a row group (`fused_runner::run` would run it as `stage(0)`):
  // calling `stage` directly keeps the row groups' loops out of a TU whose passes are all
  // single stages (they are compiled where a graph has more).
  if constexpr (layout.stages == 1) run.stage(0);
  else run.run(layout.stages);
  // A kept broadcast-of-a-reduction is materialised directly.
  static constexpr auto kept_unreduce = index_list([] { return layout.kept_unreduce; });
  for (std::size_t c : kept_unreduce) run.eval(static_cast<int>(c));
}

template <class A, const auto& Active, const auto& Keep, Element T>
void fused_evaluate(eval_context<A, T>& ctx) {
  static constexpr auto& sch = schedule_v<A, Active, Keep>;
  node_eval<T> g = nodes_of<A>(ctx.instance, ctx.values, ctx.shapes, ctx.inputs, ctx.grads);
  if (!ctx.shapes_known) {
    fused_shapes(g, sch.roles.data(), Active.data(), A::M);
  } else {  // the shapes of an earlier call: only the inputs' values to fetch
    static constexpr auto inputs = index_list([] {
      std::array<bool, A::M> m{};
      for (std::size_t c = 0; c < A::M; ++c)
        m[c] = Active[c] && sch.roles[c] == role::leaf &&
               (A::cg.kind[c] == gkind::input || A::cg.kind[c] == gkind::grad_input);
      return m;
    });
    for (std::size_t c : inputs) ctx.values[c] = g.eval(static_cast<int>(c));
  }
  // Where a pass sums gradients to their operands' shapes between element-wise nodes, a
  // second set of loops for the case where nothing was broadcast (Inductor specialises on
  // shapes the same way), chosen per call by the shapes just inferred.
  if constexpr (unreduced_loops_pay<A, Active, Keep>())
    if (sums_unreduced<A, Active>(g)) return fused_run<unreduced<A>, Active, Keep>(g, ctx.choices);
  fused_run<A, Active, Keep>(g, ctx.choices);
}

}  // namespace fusegrad::detail

namespace fusegrad::backend {
/// One vectorised pass over memory per fusion group, forward and backward (the default).
struct fused {
  static constexpr std::string_view name = "fused";
  bool fullgraph = false;  ///< as a compiled-autograd backend: a graph break throws
  static constexpr bool runs_graph = true;
  static constexpr bool reads_known_shapes = true;  ///< see `eval_context::shapes_known`
  template <class A, const auto& Active, const auto& Keep, Element T>
  static void evaluate(eval_context<A, T>& ctx) {
    detail::fused_evaluate<A, Active, Keep, T>(ctx);
  }
};
}  // namespace fusegrad::backend
