#pragma once
/// \file fusegrad/compile/compile.hpp
/// `fg::compile(fn)`: torch.compile at C++ compile time.
///
/// `fn` is a generic function written once with fusegrad ops. Called on symbolic inputs it
/// yields expression types; the C++ compiler derives the backward from them, canonicalises the
/// joint graph, and decides (constexpr) which values the forward saves. At run time a compiled
/// function evaluates the forward with its backend and puts ONE node on the eager tape,
/// `CompiledFunctionBackward`, whose backward runs the derived backward with the same backend.
/// Compiled functions therefore compose with eager ops, hooks and other compiled functions.
///
/// Backends (the seed's table): `backend::eager` runs `fn` op by op on tensors (the
/// reference); `backend::aot_eager` runs the joint graph and plan node by node; `backend::fused`
/// (default) runs one vectorised loop per fusion group. Any type modelling `Backend` plugs in.

#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>

#include "fusegrad/compile/eval_eager.hpp"

namespace fusegrad {

namespace backend {
struct fused;  // the default; defined in fusegrad/kernel/fused.hpp
}

/// The state a graph backend evaluates: values and shapes of canonical nodes.
template <class A, Element T>
struct eval_context {
  const typename A::instance& instance;  ///< the joint tree with its constants, node states
  const void* const* nodes;           ///< node addresses of the instance (`A::node<C>(nodes)`)
  std::vector<tensor<T>>& values;      ///< one slot per canonical node
  std::vector<shape>& shapes;          ///< shapes of evaluated nodes (forward shapes are kept)
  const std::vector<tensor<T>>& inputs;
  const std::vector<tensor<T>>& grads;  ///< gradients of the outputs (backward only)
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
  /// Evaluates the canonical nodes flagged in `Active` (in order); `Keep` says which values
  /// the caller reads afterwards (this backend keeps them all).
  template <class A, const auto& Active, const auto& Keep, Element T>
  static void evaluate(eval_context<A, T>& ctx) {
    detail::nodes_of<A>(ctx.instance, ctx.values, ctx.shapes, ctx.inputs, ctx.grads).run(Active.data(), A::M);
  }
};
}  // namespace backend

/// A compile backend: `name`, and either `runs_graph == false` (the function is run as
/// written) or a static `evaluate<A, Active, Keep>(eval_context&)` that computes the
/// flagged canonical nodes of the joint graph (`Active` and `Keep`: `const auto&` template
/// parameters, references to the pass's named constexpr `std::array<bool, A::M>` masks).
template <class B>
concept Backend = requires {
  { B::name } -> std::convertible_to<std::string_view>;
  { B::runs_graph } -> std::convertible_to<bool>;
};

namespace detail {
/// Per function object: the instances (joint tree with constants) built so far, one per
/// element type and arity, shared by copies of the function object. Thread-safe.
class instance_cache {
 public:
  template <class A, class Fn>
  std::shared_ptr<const typename A::instance> get(const Fn& fn) {
    static constexpr char tag = 0;  // one address per analysis type
    std::lock_guard lock(mutex_);
    for (const auto& [key, p] : entries_)
      if (key == &tag) return std::static_pointer_cast<const typename A::instance>(p);
    auto p = A::instantiate(fn);
    entries_.emplace_back(&tag, p);
    return p;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<const void*, std::shared_ptr<const void>>> entries_;
};

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
  using eval_fn = void (*)(const void* instance, std::vector<tensor<T>>& values, std::vector<shape>& shapes,
                           const std::vector<tensor<T>>& inputs, const std::vector<tensor<T>>& grads);
  std::size_t m, n_in, n_out;
  const int* out_node;         ///< per output, its canonical node
  const int* saved_nodes;      ///< the plan's saved nodes
  int saved_count;
  const int* grad_node;        ///< per input, the canonical node of its gradient (-1: none)
  const bool* backward_active;  ///< the nodes the backward evaluates (recomputed or backward)
  const node_desc* desc;
  const std::array<int, 3>* children;
  const tile_fn<T>* kernels;
  eval_fn forward, backward;
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
void evaluate_pass(const void* instance, std::vector<tensor<T>>& values, std::vector<shape>& shapes,
                   const std::vector<tensor<T>>& inputs, const std::vector<tensor<T>>& grads) {
  const auto& inst = *static_cast<const typename A::instance*>(instance);
  eval_context<A, T> ctx{inst, inst.nodes.data(), values, shapes, inputs, grads};
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
  static constexpr compiled_graph<T> value{
      M, A::n_in, A::n_out, A::out_node.data(), P.saved_nodes, P.saved_count, A::grad_node.data(),
      backward.data(), node_tables<A>::desc.data(), A::cg.children.data(), node_tables<A>::kernels.data(),
      &evaluate_pass<B, A, forward, keep, T>, &evaluate_pass<B, A, backward, grad_roots, T>};
};

/// Runs a compiled function's forward on `in` and, when a gradient is needed, puts its one
/// `CompiledFunctionBackward` node on the tape (holding the instance, the saved values and the
/// forward's shapes). `state`: the instance's node states.
template <Element T>
std::vector<tensor<T>> run_compiled(const compiled_graph<T>& G, std::shared_ptr<const void> inst,
                                    const void* const* state, const std::vector<tensor<T>>& in) {
  std::vector<tensor<T>> inputs;
  inputs.reserve(in.size());
  for (const auto& t : in) inputs.push_back(t.is_contiguous() ? t : contiguous_copy(t));
  const bool grad = needs_grad(in);
  std::vector<tensor<T>> values(G.m);
  std::vector<shape> shapes(G.m);
  const std::vector<tensor<T>> no_grads;
  G.forward(inst.get(), values, shapes, inputs, no_grads);
  std::vector<tensor<T>> outs(G.n_out);
  for (std::size_t k = 0; k < G.n_out; ++k) {
    const auto node = static_cast<std::size_t>(G.out_node[k]);
    bool alias = G.desc[node].kind == gkind::input;
    for (std::size_t q = 0; q < k; ++q) alias = alias || G.out_node[q] == G.out_node[k];
    outs[k] = alias ? contiguous_copy(values[node]) : values[node];
  }
  if (!grad) return outs;

  std::vector<tensor<T>> saved;
  for (int s = 0; s < G.saved_count; ++s) saved.push_back(values[static_cast<std::size_t>(G.saved_nodes[s])]);
  std::vector<shape> in_shapes;
  std::vector<bool> wants;
  for (const auto& t : in) {
    in_shapes.push_back(t.shape());
    wants.push_back(t.requires_grad());
  }
  std::vector<tensor<T>*> out_ptrs;
  for (auto& o : outs) out_ptrs.push_back(&o);
  record<T>("CompiledFunctionBackward", in, out_ptrs, std::move(saved),
            [g = &G, inst = std::move(inst), state, shapes = std::move(shapes), in_shapes = std::move(in_shapes),
             wants = std::move(wants)](const std::vector<tensor<T>>& sv, std::vector<tensor<T>>& gs) {
              const compiled_graph<T>& G = *g;
              std::vector<tensor<T>> values(G.m);
              std::vector<shape> sh = shapes;
              for (int s = 0; s < G.saved_count; ++s)
                values[static_cast<std::size_t>(G.saved_nodes[s])] = sv[static_cast<std::size_t>(s)];
              const std::vector<tensor<T>> no_inputs;
              std::vector<tensor<T>> grads;
              bool all_given = true;
              for (const auto& x : gs) {
                all_given = all_given && x.defined();
                grads.push_back(!x.defined() || x.is_contiguous() ? x : contiguous_copy(x));
              }
              if (!all_given) [[unlikely]] {
                // Outputs nothing used: node by node, leaving their gradients' terms out.
                for (std::size_t c = 0; c < G.m; ++c)
                  if (const node_desc& d = G.desc[c]; d.kind == gkind::grad_input && !grads[static_cast<std::size_t>(d.index)].defined())
                    sh[c] = sh[static_cast<std::size_t>(G.out_node[d.index])];
                auto* rec = active_recorder<T>();
                const std::size_t from = rec ? rec->inline_begin() : 0;
                node_eval<T>{G.desc, G.children, G.kernels, state, values, sh, no_inputs, grads}.run_given(G.backward_active, G.m);
                if (rec) rec->inline_end(from);
              } else if (auto* rec = active_recorder<T>()) [[unlikely]] {
                // A traced backward (compiled autograd): node by node into the captured graph;
                // the nodes print as aot<id>_<k>.
                const std::size_t from = rec->inline_begin();
                node_eval<T>{G.desc, G.children, G.kernels, state, values, sh, no_inputs, grads}.run(G.backward_active, G.m);
                rec->inline_end(from);
              } else {
                G.backward(inst.get(), values, sh, no_inputs, grads);
              }
              std::vector<tensor<T>> result(G.n_in);
              for (std::size_t i = 0; i < G.n_in; ++i) {
                if (!wants[i] || G.grad_node[i] < 0) continue;
                const tensor<T>& gi = values[static_cast<std::size_t>(G.grad_node[i])];
                if (!gi.defined()) continue;  // only absent gradients reach it
                result[i] = gi.shape() == in_shapes[i] ? gi : sum_to(gi, in_shapes[i]);
                if (!result[i].is_lazy() && (!result[i].is_contiguous() || (gs[0].defined() && result[i].is_same(gs[0]))))
                  result[i] = contiguous_copy(result[i]);
              }
              return result;
            })
      ->set_materialize_grads(false);  // an unused output's gradient stays absent (run_given)
  return outs;
}
}  // namespace detail

/// A function compiled by `fg::compile`. Call it with tensors of one element type.
template <Backend B, class Policy, class Fn>
class compiled_function {
 public:
  explicit compiled_function(Fn fn) : fn_(std::move(fn)) {}
  compiled_function(const compiled_function& other) : fn_(other.fn_) {}
  compiled_function& operator=(const compiled_function& other) {
    fn_ = other.fn_;
    cache_ = std::make_shared<detail::instance_cache>();
    return *this;
  }

  template <Element T, std::same_as<tensor<T>>... Ts>
  auto operator()(const tensor<T>& x0, const Ts&... xs) const {
    if constexpr (!B::runs_graph) {
      return fn_(x0, xs...);
    } else {
      using A = detail::analysis<T, Fn, 1 + sizeof...(Ts)>;
      // Inside fg::jit, the generic body is traced into the surrounding graph instead (it
      // fuses with its neighbours there, and reading its inputs would break the graph).
      if constexpr (A::n_out == 1)
        if (detail::active_recorder<T>()) [[unlikely]] {
          if constexpr (forward_runs_as_written<A>()) return tensor<T>(fn_(x0, xs...));
          else return trace_forward<T, 1 + sizeof...(Ts)>({x0, xs...});
        }
      auto outs = run_n<T, 1 + sizeof...(Ts)>({x0, xs...});
      if constexpr (A::n_out == 1) return outs[0];
      else return [&]<std::size_t... K>(std::index_sequence<K...>) {
        return std::tuple{((void)K, outs[K])...};
      }(std::make_index_sequence<A::n_out>{});
    }
  }

  /// The compile-time analysis of this function for `N` inputs of type `T` (for
  /// `static_assert`s on the plan: `analysis<float, 1>::plan<policy::min_cut>.saved_count`).
  template <Element T, std::size_t N>
  using analysis = detail::analysis<T, Fn, N>;

 private:
  template <Element T, std::size_t N>
  std::vector<tensor<T>> run_n(const std::vector<tensor<T>>& in) const {
    using A = detail::analysis<T, Fn, N>;
    auto inst = cache_->template get<A>(fn_);
    const void* const* state = inst->state.data();
    return detail::run_compiled<T>(detail::compiled_graph_of<B, Policy, A>::value, std::move(inst), state, in);
  }

  /// Whether, inside fg::jit, the function runs as written on the lazy tensors instead of
  /// node by node: the IR holds neither a custom op nor a matrix product with its derivative
  /// (node by node, a matmul is an opaque call, and the output would carry no gradient).
  template <class A>
  static constexpr bool forward_runs_as_written() {
    for (std::size_t c = 0; c < A::MF; ++c)
      if (A::cg.kind[c] == detail::gkind::custom || A::cg.kind[c] == detail::gkind::matmul) return true;
    return false;
  }

  /// The forward recorded node by node into the active tracer (its canonical graph: shared
  /// subexpressions once), without instantiating an eager kernel per op.
  template <Element T, std::size_t N>
  tensor<T> trace_forward(const std::vector<tensor<T>>& in) const {  // a tracer is active
    using A = detail::analysis<T, Fn, N>;
    static constexpr std::array<bool, A::M> fwd = [] {
      std::array<bool, A::M> a{};
      for (std::size_t c = 0; c < A::MF; ++c) a[c] = true;
      return a;
    }();
    const auto inst = cache_->template get<A>(fn_);
    std::vector<tensor<T>> values(A::M);
    std::vector<shape> shapes(A::M);
    const std::vector<tensor<T>> no_grads;
    detail::nodes_of<A>(*inst, values, shapes, in, no_grads).run(fwd.data(), A::M);
    return values[static_cast<std::size_t>(A::out_node[0])];
  }

  Fn fn_;
  std::shared_ptr<detail::instance_cache> cache_ = std::make_shared<detail::instance_cache>();
};

/// Compiles `fn` (a generic function of fusegrad ops) with backend `B` and save/recompute
/// policy `Policy`: `fg::compile(fn)`, `fg::compile<fg::backend::aot_eager>(fn)`,
/// `fg::compile<fg::backend::fused, fg::policy::save_all>(fn)`.
template <Backend B = backend::fused, class Policy = policy::min_cut, class Fn>
auto compile(Fn fn) {  // returns compiled_function<B, Policy, Fn>; `auto` so that clang names
                       // the unmet Backend concept instead of failing on the return type
  return compiled_function<B, Policy, Fn>(std::move(fn));
}

}  // namespace fusegrad
