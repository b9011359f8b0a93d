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
/// Backends (torch.compile's, renamed): `backend::eager` runs `fn` op by op on tensors (the
/// reference); `backend::aot_eager` runs the joint graph and plan node by node; `backend::fused`
/// (default) runs one vectorised loop per fusion group. Any type modelling `Backend` plugs in
/// (fusegrad/compile/backend.hpp; the fused backend: fusegrad/kernel/fused.hpp). What runs a
/// compiled graph at run time is fusegrad/compile/compiled_graph.hpp.

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "fusegrad/compile/analysis.hpp"
#include "fusegrad/compile/backend.hpp"
#include "fusegrad/compile/compiled_graph.hpp"
#include "fusegrad/compile/node_eval.hpp"
#include "fusegrad/core/mutex.hpp"
#include "fusegrad/core/reused_vector.hpp"
#include "fusegrad/jit/log.hpp"
#include "fusegrad/kernel/fused.hpp"  // backend::fused, the default

namespace fusegrad {

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
  light_mutex mutex_;  ///< taken on every call: core/mutex.hpp's lock costs no libpthread call
  std::vector<std::pair<const void*, std::shared_ptr<const void>>> entries_;
};

/// Logs compiled graph `g`'s plan (`FUSEGRAD_LOGS=output_code`): what it saves of its
/// `forward_values` forward values and what its backward computes. `which`: the plan's name.
template <Element T>
void log_plan(std::string_view which, const compiled_graph<T>& g, std::size_t forward_values) {
  std::string text = "fg::compile plan" + std::string(which) + ": saves " + std::to_string(g.saved_count) + " of " +
                     std::to_string(forward_values) + " forward values:";
  for (int k = 0; k < g.saved_count; ++k) text += " %" + std::to_string(g.saved_nodes[k]);
  text += "; the backward computes";
  for (std::size_t c = 0; c < g.m; ++c)
    if (g.backward_active[c]) text += " %" + std::to_string(c);
  logs::emit(logs::output_code, text);
}
}  // namespace detail

/// A function compiled by `fg::compile`. Call it with tensors of one element type.
template <Backend B, class Policy, class Fn>
class compiled_function {
 public:
  explicit compiled_function(Fn fn) : fn_(std::move(fn)) {}
  compiled_function(const compiled_function& other) : fn_(other.fn_) {}
  // NOLINTNEXTLINE(bugprone-unhandled-self-assignment): safe: it copies `fn_` and starts an empty cache
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
      struct input_list;  // the thread's buffer for the inputs, kept between calls
      detail::reused_vector<tensor<T>, input_list> in;
      in->push_back(x0);
      (in->push_back(xs), ...);
      std::array<tensor<T>, A::n_out> outs;
      run_n<T, 1 + sizeof...(Ts)>(*in, outs);
      if constexpr (A::n_out == 1) return std::move(outs[0]);
      else return [&]<std::size_t... K>(std::index_sequence<K...>) {
          return std::tuple{((void)K, std::move(outs[K]))...};
        }
      (std::make_index_sequence<A::n_out>{});
    }
  }

  /// The compile-time analysis of this function for `N` inputs of type `T` (for
  /// `static_assert`s on the plan: `analysis<float, 1>::plan<policy::min_cut>.saved_count`).
  template <Element T, std::size_t N>
  using analysis = detail::analysis<T, Fn, N>;

 private:
  template <Element T, std::size_t N>
  void run_n(const std::vector<tensor<T>>& in, std::span<tensor<T>> outs) const {
    using A = detail::analysis<T, Fn, N>;
    auto inst = cache_->template get<A>(fn_);
    const void* const* state = inst->state.data();
    detail::shape_memo* memo = &inst->memo;
    detail::run_compiled<T>(graph_for<A>(in), std::move(inst), state, in, memo, outs);
  }

 public:
  /// The size class whose plan a call on `in` runs (`policy::cost`): `partition::size_class_of`
  /// the bytes of its inputs, outputs and what the cached plan saves.
  template <Element T, std::size_t N>
  static partition::size_class size_class_for(const std::vector<tensor<T>>& in) {
    using A = detail::analysis<T, Fn, N>;
    std::size_t bytes = 0, largest = 0;
    for (const auto& t : in) {
      bytes += static_cast<std::size_t>(t.numel()) * sizeof(T);
      largest = std::max(largest, static_cast<std::size_t>(t.numel()) * sizeof(T));
    }
    bytes += largest * (A::n_out + static_cast<std::size_t>(A::template plan<policy::cost_cached>.saved_count));
    return partition::size_class_of(bytes);
  }
  /// Whether the cost-based plans of the two size classes differ for `N` inputs of type `T`.
  template <Element T, std::size_t N>
  static constexpr bool plans_differ() {
    using A = detail::analysis<T, Fn, N>;
    constexpr auto& c = A::template plan<policy::cost_cached>;
    constexpr auto& s = A::template plan<policy::cost_streamed>;
    for (std::size_t k = 0; k < A::M; ++k)
      if (c.saved[k] != s.saved[k]) return true;
    return false;
  }
  /// Whether a compiled function holds both cost-based plans for `N` inputs of type `T` and
  /// picks one per call by size: only when, in one of the two size classes, the other class's
  /// plan is estimated to cost `partition::second_plan_gain_percent` or more above the class's
  /// own (`partition::estimated_cost`). A smaller gain is below what the cost model resolves
  /// and not worth compiling the function's loops twice; the function then holds the plan for
  /// values that fit in cache, within that margin of the best in both classes.
  template <Element T, std::size_t N>
  static constexpr bool holds_both_plans() {
    if constexpr (!plans_differ<T, N>()) {
      return false;
    } else {
      using A = detail::analysis<T, Fn, N>;
      constexpr auto& c = A::template plan<policy::cost_cached>;
      constexpr auto& s = A::template plan<policy::cost_streamed>;
      return partition::worth_a_second_plan(A::pgraph, c, s);
    }
  }

 private:
  /// The compiled graph a call on `in` runs: the policy's, or under `policy::cost` the one of
  /// the call's size class (one graph unless `holds_both_plans`).
  template <class A, Element T>
  static const detail::compiled_graph<T>& graph_for(const std::vector<tensor<T>>& in) {
    if constexpr (std::same_as<Policy, policy::cost>) {
      constexpr std::size_t N = A::n_in;
      if constexpr (holds_both_plans<T, N>())
        if (size_class_for<T, N>(in) == partition::size_class::streamed)
          return logged<A, policy::cost_streamed>(" (the cost-based plan for values that stream from memory)");
      return logged<A, policy::cost_cached>(holds_both_plans<T, N>()
                                                ? " (the cost-based plan for values that fit in cache)"
                                                : " (the cost-based plan, one for every size)");
    } else {
      return logged<A, Policy>("");
    }
  }
  /// The compiled graph of plan `P`; its first use logs the plan (`FUSEGRAD_LOGS=output_code`,
  /// written by `detail::log_plan`, compiled once per element type, not once per plan).
  template <class A, class P>
  static const auto& logged(std::string_view which) {
    const auto& g = detail::compiled_graph_of<B, P, A>::value;
    static std::atomic<bool> done{false};
    if (logs::enabled(logs::output_code) && !done.exchange(true, std::memory_order_relaxed))
      detail::log_plan<typename A::element_type>(which, g, A::MF);
    return g;
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
template <Backend B = backend::fused, class Policy = policy::cost, class Fn>
auto compile(Fn fn) {  // returns compiled_function<B, Policy, Fn>; `auto` so that clang names
                       // the unmet Backend concept instead of failing on the return type
  return compiled_function<B, Policy, Fn>(std::move(fn));
}

}  // namespace fusegrad
