#pragma once
/// \file fusegrad/compile/compiled_graph.hpp
/// A compiled function's graph as run-time tables (`compiled_graph`, built per analysis and
/// backend by `compiled_graph_of`), and `run_compiled`, which runs its forward and puts its
/// one `CompiledFunctionBackward` node on the tape: the run-time side of `fg::compile`,
/// compiled once per element type.

#include <algorithm>
#include <array>
#include <memory>
#include <span>
#include <vector>

#include "fusegrad/compile/backend.hpp"
#include "fusegrad/compile/node_eval.hpp"
#include "fusegrad/compile/shape_memo.hpp"
#include "fusegrad/core/reused_vector.hpp"
#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad::detail {

template <std::size_t M>
constexpr std::array<bool, M> to_array(const bool (&a)[M]) {
  std::array<bool, M> r{};
  for (std::size_t i = 0; i < M; ++i) r[i] = a[i];
  return r;
}

/// What running a compiled function needs of its graph at run time: constant tables (pointers
/// into constexpr arrays) and the backend's evaluation of the forward and of the backward. The
/// code that runs a compiled function and its `CompiledFunctionBackward` node (`run_compiled`)
/// reads only this, so it is compiled once per element type, not once per graph.
template <Element T>
struct compiled_graph {
  /// Evaluates the nodes of one pass on an instance (`A::instance`).
  /// `shapes_known`, `choices`: see `eval_context`.
  using eval_fn = void (*)(const void* instance, std::vector<tensor<T>>& values, std::vector<shape>& shapes,
                           bool shapes_known, stage_choices* choices, const std::vector<tensor<T>>& inputs,
                           const std::vector<tensor<T>>& grads);
  std::size_t m, n_in, n_out;
  const int* out_node;     ///< per output, its canonical node
  const int* saved_nodes;  ///< the plan's saved nodes
  int saved_count;
  const int* grad_node;         ///< per input, the canonical node of its gradient (-1: none)
  const bool* backward_active;  ///< the nodes the backward evaluates (recomputed or backward)
  const node_desc* desc;
  const std::array<int, 3>* children;
  const tile_fn<T>* kernels;
  const user_number_fn* user_numbers;
  matmul_fn<T> matmul;  ///< see `node_eval::matmul`
  eval_fn forward, backward;
  bool reads_known_shapes;  ///< the backend honours `shapes_known` (else it is always false)
};

/// Pass `Active` of analysis `A` on an instance, with backend `B`.
///
/// The passes' masks (`Active`, `Keep`, and every template of the schedule and the fused
/// loops keyed on them) are template arguments BY REFERENCE to the named arrays of
/// `compiled_graph_of`, never by value: GCC 12 mangles a class-type template argument such as
/// `std::array<bool, M>{false, false, true}` without the positions of its zero elements (as
/// `{true}`, like `{true, false, false}`), and it finds template parameter objects by their
/// mangled name, so two different masks of one length were ONE template argument: the
/// schedule of one pass (of any graph in the program) was used for another, which read
/// values it never computed. A reference is mangled by the name of the array, which is unique.
template <class B, class A, const auto& Active, const auto& Keep, Element T>
void evaluate_pass(const void* instance, std::vector<tensor<T>>& values, std::vector<shape>& shapes, bool shapes_known,
                   stage_choices* choices, const std::vector<tensor<T>>& inputs, const std::vector<tensor<T>>& grads) {
  const auto& inst = *static_cast<const typename A::instance*>(instance);
  eval_context<A, T> ctx{inst, inst.nodes.data(), values, shapes, inputs, grads, shapes_known, choices};
  B::template evaluate<A, Active, Keep, T>(ctx);
}

/// The `compiled_graph` of analysis `A` under backend `B` and policy `Policy`.
template <class B, class Policy, class A>
struct compiled_graph_of {
  using T = typename A::element_type;
  static constexpr std::size_t M = A::M;
  static constexpr auto& P = A::template plan<Policy>;
  static constexpr std::array<bool, M> forward = to_array(P.forward);
  /// What the caller reads after the forward: the outputs and the saved values.
  static constexpr std::array<bool, M> keep = [] {
    std::array<bool, M> k{};
    for (int o : A::out_node) k[static_cast<std::size_t>(o)] = true;
    for (std::size_t s = 0; s < M; ++s) k[s] = k[s] || P.saved[s];
    return k;
  }();
  static constexpr std::array<bool, M> backward = [] {
    std::array<bool, M> a{};
    for (std::size_t c = 0; c < M; ++c) a[c] = P.recompute[c] || P.backward[c];
    return a;
  }();
  static constexpr std::array<bool, M> grad_roots = [] {
    std::array<bool, M> r{};
    for (int gi : A::grad_node)
      if (gi >= 0) r[static_cast<std::size_t>(gi)] = true;
    return r;
  }();
  static constexpr compiled_graph<T> value{M,
                                           A::n_in,
                                           A::n_out,
                                           A::out_node.data(),
                                           P.saved_nodes,
                                           P.saved_count,
                                           A::grad_node.data(),
                                           backward.data(),
                                           node_tables<A>::desc.data(),
                                           A::cg.children.data(),
                                           node_tables<A>::kernels.data(),
                                           node_tables<A>::user_numbers.data(),
                                           node_tables<A>::matmul,
                                           &evaluate_pass<B, A, forward, keep, T>,
                                           &evaluate_pass<B, A, backward, grad_roots, T>,
                                           reads_known_shapes<B>()};
};

/// `ts` as they are when every defined one is contiguous (the usual case: no list copied),
/// else `copies` filled with them, the strided ones as contiguous copies (the same values).
template <Element T>
const std::vector<tensor<T>>& contiguous_list(const std::vector<tensor<T>>& ts, std::vector<tensor<T>>& copies) {
  const auto readable = [](const tensor<T>& t) { return !t.defined() || t.is_contiguous(); };
  if (std::all_of(ts.begin(), ts.end(), readable)) return ts;
  copies.reserve(ts.size());
  for (const auto& t : ts) copies.push_back(readable(t) ? t : contiguous_copy(t));
  return copies;
}

/// The forward's shapes of a call of `G` on `in`: remembered in `memo` (null: none) from an
/// earlier call on inputs of the same shapes, else inferred by the forward itself, which
/// `run_forward` runs either way into `values`.
template <Element T>
std::shared_ptr<shape_plan> run_forward(const compiled_graph<T>& G, const void* inst, shape_memo* memo,
                                        const std::vector<tensor<T>>& in, const std::vector<tensor<T>>& inputs,
                                        std::vector<tensor<T>>& values) {
  const std::vector<tensor<T>> no_grads;
  if (!G.reads_known_shapes) memo = nullptr;
  if (memo)
    if (std::shared_ptr<shape_plan> plan = memo->find(&G, in)) {
      G.forward(inst, values, plan->forward, true, &plan->forward_choices, inputs, no_grads);
      return plan;
    }
  auto plan = std::make_shared<shape_plan>();
  plan->graph = &G;
  plan->m = G.m;
  // The nodes' shapes, then the inputs' (the backward's sums to them, and the memo's key).
  plan->forward.reserve(G.m + in.size());
  plan->forward.resize(G.m);
  G.forward(inst, values, plan->forward, false, nullptr, inputs, no_grads);
  for (const auto& t : in) plan->forward.push_back(t.shape());
  if (memo) memo->insert(plan);  // only once the forward has passed every check
  return plan;
}

/// A call's outputs into `outs` (`G.n_out` of them), taken out of `values` (which the call no
/// longer reads): their nodes' values, an input's or a value given out twice copied (each
/// output its own tensor).
template <Element T>
void take_outputs(const compiled_graph<T>& G, std::vector<tensor<T>>& values, std::span<tensor<T>> outs) {
  for (std::size_t k = 0; k < G.n_out; ++k) {
    const auto node = static_cast<std::size_t>(G.out_node[k]);
    std::size_t first = k;  // the first output of the same node
    for (std::size_t q = 0; q < k && first == k; ++q)
      if (G.out_node[q] == G.out_node[k]) first = q;
    if (first < k) outs[k] = contiguous_copy(outs[first]);
    else if (G.desc[node].kind == gkind::input) outs[k] = contiguous_copy(values[node]);
    else outs[k] = std::move(values[node]);
  }
}

/// The forward's values the backward reads, in `G.saved_nodes` order.
template <Element T>
std::vector<tensor<T>> saved_values(const compiled_graph<T>& G, const std::vector<tensor<T>>& values) {
  std::vector<tensor<T>> saved;
  saved.reserve(static_cast<std::size_t>(G.saved_count));
  for (int s = 0; s < G.saved_count; ++s) saved.push_back(values[static_cast<std::size_t>(G.saved_nodes[s])]);
  return saved;
}

/// Runs the backward of a call (its shapes: `plan`) on the outputs' gradients `gs` into
/// `values`, which hold the saved ones: node by node when an output's gradient is absent or
/// the backward is traced, else the compiled backward.
template <Element T>
void run_graph_backward(const compiled_graph<T>& G, const void* inst, const void* const* state, shape_plan& plan,
                        std::vector<tensor<T>>& values, const std::vector<tensor<T>>& gs) {
  const std::vector<shape>& shapes = plan.forward;
  const std::vector<tensor<T>> no_inputs;
  const bool all_given = std::all_of(gs.begin(), gs.end(), [](const tensor<T>& x) { return x.defined(); });
  std::vector<tensor<T>> copies;
  const std::vector<tensor<T>>& grads = contiguous_list(gs, copies);
  if (!all_given) [[unlikely]] {
    // Outputs nothing used: node by node, leaving their gradients' terms out.
    std::vector<shape> sh = shapes;  // the forward's, which this pass extends
    for (std::size_t c = 0; c < G.m; ++c)
      if (const node_desc& d = G.desc[c];
          d.kind == gkind::grad_input && !grads[static_cast<std::size_t>(d.index)].defined())
        sh[c] = sh[static_cast<std::size_t>(G.out_node[d.index])];
    auto* rec = active_recorder<T>();
    const std::size_t from = rec ? rec->inline_begin() : 0;
    node_eval<T>{G.desc, G.children, G.kernels, G.user_numbers, G.matmul, state, values, sh, no_inputs, grads}
        .run_given(G.backward_active, G.m);
    if (rec) rec->inline_end(from);
  } else if (auto* rec = active_recorder<T>()) [[unlikely]] {
    // A traced backward (compiled autograd): node by node into the captured graph;
    // the nodes print as aot<id>_<k>.
    const std::size_t from = rec->inline_begin();
    std::vector<shape> sh = shapes;
    node_eval<T>{G.desc, G.children, G.kernels, G.user_numbers, G.matmul, state, values, sh, no_inputs, grads}.run(
        G.backward_active, G.m);
    rec->inline_end(from);
  } else {
    // The backward's shapes follow from the forward's and the gradients': where
    // each gradient has its output's shape (the usual case), the plan keeps them.
    bool usual = G.reads_known_shapes;
    for (std::size_t k = 0; k < G.n_out && usual; ++k)
      usual = grads[k].shape() == shapes[static_cast<std::size_t>(G.out_node[k])];
    if (std::vector<shape>* known = usual ? plan.backward_shapes() : nullptr) {
      G.backward(inst, values, *known, true, &plan.backward_choices, no_inputs, grads);
    } else {
      std::vector<shape> sh = shapes;  // the forward's, which this pass extends
      G.backward(inst, values, sh, false, nullptr, no_inputs, grads);
      if (usual) plan.publish_backward(std::move(sh));
    }
  }
}

/// The gradients of the inputs that take one (`wants`), from the backward's `values`: each
/// summed to its input's shape, and a copy where it would be strided or the output's
/// gradient `gs[0]` itself.
template <Element T>
std::vector<tensor<T>> input_gradients(const compiled_graph<T>& G, const std::vector<tensor<T>>& values,
                                       const std::vector<shape>& shapes, const small_vector<unsigned char, 8>& wants,
                                       const std::vector<tensor<T>>& gs) {
  std::vector<tensor<T>> result(G.n_in);
  for (std::size_t i = 0; i < G.n_in; ++i) {
    if (!wants[i] || G.grad_node[i] < 0) continue;
    const tensor<T>& gi = values[static_cast<std::size_t>(G.grad_node[i])];
    if (!gi.defined()) continue;  // only absent gradients reach it
    const shape& in_shape = shapes[G.m + i];
    result[i] = gi.shape() == in_shape ? gi : sum_to(gi, in_shape);
    if (!result[i].is_lazy() && (!result[i].is_contiguous() || (gs[0].defined() && result[i].is_same(gs[0]))))
      result[i] = contiguous_copy(result[i]);
  }
  return result;
}

/// `CompiledFunctionBackward`'s apply: the saved values `sv` in place, the backward run on
/// the outputs' gradients `gs`, the inputs' gradients.
template <Element T>
std::vector<tensor<T>> run_compiled_backward(const compiled_graph<T>& G, const void* inst, const void* const* state,
                                             shape_plan& plan, const small_vector<unsigned char, 8>& wants,
                                             const std::vector<tensor<T>>& sv, const std::vector<tensor<T>>& gs) {
  struct backward_values;
  reused_vector<tensor<T>, backward_values> values_buffer;
  std::vector<tensor<T>>& values = *values_buffer;
  values.resize(G.m);
  for (int s = 0; s < G.saved_count; ++s)
    values[static_cast<std::size_t>(G.saved_nodes[s])] = sv[static_cast<std::size_t>(s)];
  run_graph_backward(G, inst, state, plan, values, gs);
  return input_gradients(G, values, plan.forward, wants, gs);
}

/// Puts a call's one `CompiledFunctionBackward` node on the tape, holding the instance, the
/// saved values and the call's shapes.
template <Element T>
void record_backward(const compiled_graph<T>& G, std::shared_ptr<const void> inst, const void* const* state,
                     const std::vector<tensor<T>>& in, std::span<tensor<T>> outs, std::shared_ptr<shape_plan> plan,
                     std::vector<tensor<T>> saved) {
  small_vector<unsigned char, 8> wants;  // which inputs take a gradient
  for (const auto& t : in) wants.push_back(t.requires_grad() ? 1 : 0);
  small_vector<tensor<T>*, 4> out_ptrs;
  for (auto& o : outs) out_ptrs.push_back(&o);
  record<T>("CompiledFunctionBackward", in, std::span<tensor<T>* const>(out_ptrs.data(), out_ptrs.size()),
            std::move(saved),
            [g = &G, inst = std::move(inst), state, plan = std::move(plan), wants = std::move(wants)](
                const std::vector<tensor<T>>& sv, std::vector<tensor<T>>& gs) {
              return run_compiled_backward(*g, inst.get(), state, *plan, wants, sv, gs);
            })
      ->set_materialize_grads(false);  // an unused output's gradient stays absent (run_given)
}

/// Runs a compiled function's forward on `in` and, when a gradient is needed, puts its one
/// `CompiledFunctionBackward` node on the tape (holding the instance, the saved values and the
/// call's shapes). `state`: the instance's node states; `memo`: its shapes of earlier calls;
/// `outs`: where the `G.n_out` outputs go (the caller's: no list allocated per call).
template <Element T>
void run_compiled(const compiled_graph<T>& G, std::shared_ptr<const void> inst, const void* const* state,
                  const std::vector<tensor<T>>& in, shape_memo* memo, std::span<tensor<T>> outs) {
  std::vector<tensor<T>> copies;
  const std::vector<tensor<T>>& inputs = contiguous_list(in, copies);
  const bool grad = needs_grad(in);
  struct forward_values;  // the thread's buffer of every node's value, kept between calls
  reused_vector<tensor<T>, forward_values> values_buffer;
  std::vector<tensor<T>>& values = *values_buffer;
  values.resize(G.m);
  std::shared_ptr<shape_plan> plan = run_forward(G, inst.get(), memo, in, inputs, values);
  if (!grad) return take_outputs(G, values, outs);
  std::vector<tensor<T>> saved = saved_values(G, values);  // before the outputs are taken out
  take_outputs(G, values, outs);
  record_backward(G, std::move(inst), state, in, outs, std::move(plan), std::move(saved));
}
}  // namespace fusegrad::detail
