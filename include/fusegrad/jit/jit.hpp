#pragma once
/// \file fusegrad/jit/jit.hpp
/// `fg::jit`: the run-time tracer and the guarded kernel cache (the counterparts of Dynamo,
/// its guards and its automatic dynamic shapes), for code whose graph the C++ compiler
/// cannot see: branches on tensor values, loops whose trip count is data, graphs assembled
/// at run time.
///
/// **Tracing.** While a jitted callable runs, the eager ops of this thread (`apply_op`, `sum`,
/// `mean`, `max`) do not compute: they append nodes to a pending IR graph and return *lazy*
/// tensors. A *sync point* — `item()`, `data()`, `to_vector()`, printing, any op the tracer
/// does not capture (matmul, views, custom ops), `backward()` — flushes the pending graph:
/// it is compiled (or fetched from the cache) and run, the lazy tensors still alive receive
/// their values, and tracing resumes in a new graph (a *graph break*). The end of the call
/// flushes too. With `fullgraph = true` a sync point throws instead, naming the op.
/// Tensor hooks (and `retain_grad`) on lazy tensors are no sync point: they become `call_hook`
/// nodes of the graph's backward, on the hooked node's whole gradient (docs/jit.md).
///
/// **Cache.** Each flushed graph is looked up among the function's entries, most recently
/// used first. An entry is its guards — the graph's structure (ops, edges, constants,
/// outputs), each input's rank and sizes (static values, or dynamic dims accepting any size
/// of at least 2), requires_grad, grad mode, aliasing between inputs, and the element type
/// (one cache per type) — and its compiled programs: a forward tile program that also
/// returns what the backward needs, and a backward tile program derived with each op's own
/// derivative rule, the save/recompute split chosen by the compile-time partitioner's
/// min-cut (the same `constexpr` code, run at run time).
///
/// **Automatic dynamic shapes.** The first compile specialises on sizes. When a size guard
/// fails, the dims that changed are marked dynamic and one shape-generic entry is compiled,
/// which later sizes hit. Sizes 0 and 1 stay specialised. After `recompile_limit` compiles
/// (default 8) a function's misses run eagerly, and one log line says why.
///
/// **Trace once.** With `trace_once = true` (JAX's contract) the function runs, and is traced,
/// once per signature — grad mode, each argument's kind, sizes and requires_grad, aliasing
/// between argument tensors, numbers' values — and a later call with that signature replays
/// the graph's cached programs on its arguments without calling the function. What a replay
/// could not redo is an error while tracing, naming the op: a graph break, a hook, a tensor
/// that is not an argument (captured, made by a factory or a random op, or by an untraced
/// op), a traced tensor kept outside the result (replay.hpp).
///
/// Thread safety: a jitted function may be called from many threads at once; each thread
/// traces on its own and the cache is shared under a mutex (programs are immutable).
///
/// Limits: input tensors must not be modified in place between an op that reads them and the
/// next sync point; dims are at most 64.
///
/// The pieces, in the order a call goes through them: `options.hpp` (`jit_options`),
/// `tracing_scope.hpp` (the thread's tracers, installed for one call), `trace.hpp` (the
/// tracer recording the graph), `flush.hpp` (a sync point: look up, compile, run),
/// `entry.hpp` (cache entries and their guards), `compile_entry.hpp` (an entry's programs),
/// `run_entry.hpp` (running an entry's programs, recording its backward), `replay.hpp`
/// (`trace_once`: signatures, records and their replay), `log.hpp` (counters and logs). This
/// file: the user-facing `fg::jit`.

#include <concepts>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusegrad/core/type_list.hpp"
#include "fusegrad/jit/entry.hpp"
#include "fusegrad/jit/options.hpp"
#include "fusegrad/jit/replay.hpp"
#include "fusegrad/jit/tracing_scope.hpp"

namespace fusegrad {

/// One cache entry, readable.
struct jit_entry_info {
  std::string dtype;   ///< "float32" or "float64"
  std::string guards;  ///< one guard per line
  std::string graph;   ///< the captured graph as code
  std::string code;    ///< the compiled forward (and backward) program
  bool dynamic = false;
};

namespace detail::jit {
/// Entry `e`, readable (`jit_function::entries()`): one function per element type, which the
/// precompiled runtime holds, so that a TU that lists entries does not compile the printers.
template <Element T>
jit_entry_info entry_info(const entry<T>& e) {
  return {std::string(dtype_name<T>()), e.guards_text(), e.fwd_graph.to_string(e.names), e.code_text(), e.dynamic};
}

/// The element types a call with arguments `Args` traces: those its tensor arguments hold
/// (a tensor, a map or range of tensors), both where they hold both or none (a function of
/// what it captured, or of tensors inside a type of the user's own).
template <class... Args>
constexpr traced traced_by() {
  constexpr bool f = (std::is_same_v<typename element_of<std::remove_cvref_t<Args>>::type, float> || ...);
  constexpr bool d = (std::is_same_v<typename element_of<std::remove_cvref_t<Args>>::type, double> || ...);
  if constexpr (f && !d) return traced::float_only;
  else if constexpr (d && !f) return traced::double_only;
  else return traced::both;
}

/// The parameter list of a callable with one non-template call operator (empty otherwise).
template <class M>
struct call_signature {
  static constexpr bool fixed = false;
};
template <class C, class R, class... P>
struct call_signature<R (C::*)(P...) const> {
  static constexpr bool fixed = true;
  using params = type_list<P...>;
};
template <class C, class R, class... P>
struct call_signature<R (C::*)(P...)> : call_signature<R (C::*)(P...) const> {};
template <class F>
constexpr bool has_fixed_signature() {
  if constexpr (requires { &F::operator(); }) return call_signature<decltype(&F::operator())>::fixed;
  else return false;
}

/// Gives a jitted function the call operator of a non-generic callable, so that arguments
/// may be braced lists (`f({{"x", x}, {"y", y}})`).
template <class Derived, class Params>
struct call_with_params {};
template <class Derived, class... P>
struct call_with_params<Derived, type_list<P...>> {
  decltype(auto) operator()(P... p) const { return static_cast<const Derived&>(*this).call(std::forward<P>(p)...); }
};
struct no_fixed_signature {
  explicit no_fixed_signature() = default;
};
/// The base of `jit_function<F>`: F's call operator (`call_with_params`) when F has one
/// fixed signature, else a deleted placeholder that a using-declaration can name.
template <class Derived, class F>
struct fixed_signature_call {
  void operator()(no_fixed_signature) const = delete;  // a generic callable: the template operator() serves
};
template <class Derived, class F>
requires(has_fixed_signature<F>()) struct fixed_signature_call<Derived, F>
    : call_with_params<Derived, typename call_signature<decltype(&F::operator())>::params> {
};
}  // namespace detail::jit

/// A callable traced at run time, with a guarded cache of compiled graphs (see this file's
/// comment). Made by `fg::jit`.
template <class F>
class jit_function : public detail::jit::fixed_signature_call<jit_function<F>, F> {
 public:
  jit_function(F f, jit_options o)
      : fn_(std::move(f)), st_(std::make_shared<detail::jit::function_state>(std::move(o))) {}

  /// Calls the function: ops are traced, and graphs compiled or fetched at each sync point.
  template <class... Args>
  requires(!detail::jit::has_fixed_signature<F>() && std::invocable<const F&, Args...>) decltype(auto) operator()(
      Args&&... args) const {
    return call(std::forward<Args>(args)...);
  }
  using detail::jit::fixed_signature_call<jit_function<F>, F>::operator();

  /// The cache entries, most recently used first, each with its guards and program.
  [[nodiscard]] std::vector<jit_entry_info> entries() const {
    std::lock_guard lock(st_->mu);
    std::vector<jit_entry_info> r;
    auto add = [&]<Element T>(const detail::jit::cache<T>& c) {
      for (const auto& e : c.entries) r.push_back(detail::jit::entry_info(*e));
    };
    add(st_->cache_of<float>());
    add(st_->cache_of<double>());
    return r;
  }
  /// Graphs compiled by this function so far.
  [[nodiscard]] int compiles() const {
    std::lock_guard lock(st_->mu);
    return st_->compiles;
  }
  [[nodiscard]] const jit_options& options() const noexcept { return st_->opts; }

 private:
  template <class D, class P>
  friend struct detail::jit::call_with_params;

  template <class... Args>
  decltype(auto) call(Args&&... args) const {
    if (st_->opts.trace_once) [[unlikely]] {
      using E = typename detail::jit::args_element<Args...>::type;
      using R = std::invoke_result_t<const F&, Args...>;
      if constexpr (!std::is_void_v<E>) {
        if constexpr ((detail::jit::takes_arg<E, Args>() && ...) &&
                      (std::is_void_v<R> || detail::jit::rebuilds<E, R>::value))
          return call_once<E>(std::forward<Args>(args)...);
      }
      detail::fail(
          "jit", "'", st_->opts.name,
          "' is jitted with trace_once=true, which takes tensors of one element "
          "type, std::map<std::string, tensor>, ranges of tensors and numbers as arguments (at least one tensor), "
          "and returns void, a tensor, or a std::vector, std::array, std::map<std::string, ...>, pair or tuple of "
          "these; this function's arguments or result are of another type. Call fg::jit without trace_once");
    }
    namespace J = detail::jit;
    J::tracing_scope<J::deferred_t<void, F>, J::traced_by<Args...>()> fr(*st_);
    int i = 0;
    (fr.name_arg(args, i++), ...);
    using R = std::invoke_result_t<const F&, Args...>;
    if constexpr (std::is_void_v<R>) {
      std::invoke(fn_, std::forward<Args>(args)...);
      fr.finish();
    } else {
      R r = std::invoke(fn_, std::forward<Args>(args)...);
      fr.finish();
      return r;
    }
  }

  /// A `trace_once` call with tensors of element type `E`: a replay when its signature has a
  /// record, else a traced call that leaves one.
  template <Element E, class... Args>
  std::invoke_result_t<const F&, Args...> call_once(Args&&... args) const {
    namespace J = detail::jit;
    using R = std::invoke_result_t<const F&, Args...>;
    J::call_key<E> key;
    (J::add_arg(key, args), ...);
    if (const J::traced_call<E>* c = J::replayer<E>::find(*st_, key)) {
      struct replay_results;
      detail::reused_vector<tensor<E>, replay_results> ts;
      J::replayer<E>::replay(*c, key.tensors, *ts);
      if constexpr (!std::is_void_v<R>) {
        std::size_t t = 0, n = 0, k = 0;
        return J::rebuild<E, R>(*ts, *c, t, n, k);
      } else {
        return;
      }
    }
    J::held_args<E> held;  // (out of `key`: a replay has none to destroy)
    key.hold(held);
    J::tracing_scope<J::deferred_t<void, F>, J::traced_only<E>> fr(*st_);
    int i = 0;
    (fr.name_arg(args, i++), ...);
    J::once_recording<E> rec(*st_);  // (after the scope: its tracer is the thread's recorder)
    std::vector<const detail::tensor_impl<E>*> results;
    std::vector<std::size_t> counts;
    std::vector<std::string> keys;
    if constexpr (std::is_void_v<R>) {
      std::invoke(fn_, std::forward<Args>(args)...);
      fr.finish();
      rec.save(*st_, key, results, std::move(counts), std::move(keys));
    } else {
      R r = std::invoke(fn_, std::forward<Args>(args)...);
      fr.finish();
      J::take_apart<E>(r, results, counts, keys);
      rec.save(*st_, key, results, std::move(counts), std::move(keys));
      return r;
    }
  }

  F fn_;
  std::shared_ptr<detail::jit::function_state> st_;
};

/// Inside a jitted call (or a compiled-autograd capture): ends the pending graph here, like
/// `torch._dynamo.graph_break()`. Elsewhere it does nothing.
inline void graph_break() {
  if (auto* r = detail::active_recorder<float>()) r->sync("graph_break()");
  if (auto* r = detail::active_recorder<double>()) r->sync("graph_break()");
}

/// Traces `f` at run time, compiling and caching its graphs (`torch.compile` for code with
/// data-dependent control flow). `f` takes and returns fusegrad tensors (or containers of them).
template <class F>
jit_function<std::decay_t<F>> jit(F&& f, jit_options o = {}) {
  return jit_function<std::decay_t<F>>(std::forward<F>(f), std::move(o));
}

}  // namespace fusegrad
