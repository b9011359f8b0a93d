#pragma once
/// \file fusegrad/jit/tracing_scope.hpp
/// The tracers of a thread (one per element type and nesting depth of jitted calls) and the
/// scope that installs them as the thread's recorders for one jitted call or one
/// compiled-autograd capture.

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusegrad/jit/entry.hpp"
#include "fusegrad/jit/trace.hpp"

namespace fusegrad::detail::jit {

/// `T`, spelled so that it depends on `Tag` (which defers instantiating what names it until
/// `Tag` is known). The tracers below are reached through such types so that a TU
/// instantiates a tracer (its virtual functions pull in the whole run-time compiler) only
/// when it makes a jitted call or turns compiled autograd on, not by including the header
/// (instantiated there, the tracers and compiled autograd's runner made every TU that
/// included it compile for far longer).
template <class T, class Tag>
using deferred_t = std::conditional_t<sizeof(Tag*) == 0, Tag, T>;

/// The element types a jitted call traces. Each is a tracer of its own, and each tracer a
/// TU instantiates is the whole run-time compiler for that type once more: a call traces
/// only the types its arguments hold (a TU that jits float functions never compiles the
/// double one), both where it cannot tell.
enum class traced : unsigned char { float_only = 1, double_only = 2, both = 3 };
/// `T` alone.
template <Element T>
inline constexpr traced traced_only = std::is_same_v<T, float> ? traced::float_only : traced::double_only;

/// The tracers of element type `T` of this thread, reused by its jitted calls: one per
/// nesting depth (null until a call at that depth traces `T`).
template <Element T>
std::vector<std::unique_ptr<trace<T>>>& trace_stack() {
  thread_local std::vector<std::unique_ptr<trace<T>>> s;
  return s;
}
inline std::size_t& trace_depth() noexcept {
  thread_local std::size_t d = 0;
  return d;
}
/// This thread's tracer of `T` at nesting depth `depth`, begun for a call of `st`.
template <Element T>
trace<T>& begin_tracer(std::size_t depth, function_state& st) {
  auto& stack = trace_stack<T>();
  if (stack.size() <= depth) stack.resize(depth + 1);
  if (!stack[depth]) stack[depth] = std::make_unique<trace<T>>();
  stack[depth]->begin(st);
  return *stack[depth];
}

/// The tracers of one jitted call on this thread (installed for its duration), for the
/// element types `Which`. A type it does not trace has no recorder meanwhile: its ops run
/// eagerly, op by op, with the values a trace would give (an outer call's lazy tensors of
/// that type are computed when they are read). Name it as `tracing_scope<deferred_t<void, X>,
/// W>` with some template parameter `X` of the caller.
template <class Tag, traced Which = traced::both>
class tracing_scope {
  using F = deferred_t<float, Tag>;
  using D = deferred_t<double, Tag>;
  static constexpr bool traces_float = Which != traced::double_only;
  static constexpr bool traces_double = Which != traced::float_only;

 public:
  explicit tracing_scope(function_state& st) : depth_(trace_depth()) {
    if constexpr (traces_float) f_ = &begin_tracer<F>(depth_, st);
    if constexpr (traces_double) d_ = &begin_tracer<D>(depth_, st);
    ++trace_depth();
    prev_f_ = std::exchange(active_recorder<float>(), f_);
    prev_d_ = std::exchange(active_recorder<double>(), d_);
  }
  tracing_scope(const tracing_scope&) = delete;
  tracing_scope& operator=(const tracing_scope&) = delete;
  ~tracing_scope() {
    if (!finished_) {
      if constexpr (traces_float) f_->abandon();
      if constexpr (traces_double) d_->abandon();
    }
    active_recorder<float>() = prev_f_;
    active_recorder<double>() = prev_d_;
    --trace_depth();
  }
  /// Names the tensors of an argument for logs and guards ('x' for a map key, arg0, arg1[2]).
  template <class A>
  void name_arg(const A& a, int i) {
    using X = std::remove_cvref_t<A>;
    if constexpr (is_tensor_v<X>) {
      name_tensor(a, i, -1, nullptr);
    } else if constexpr (requires {
                           typename X::key_type;
                           typename X::mapped_type;
                         }) {
      if constexpr (is_tensor_v<typename X::mapped_type> && std::is_same_v<typename X::key_type, std::string>)
        for (const auto& [k, v] : a) name_tensor(v, i, -1, &k);
    } else if constexpr (requires {
                           typename X::value_type;
                           a.begin();
                         }) {
      if constexpr (is_tensor_v<typename X::value_type>) {
        int j = 0;
        for (const auto& v : a) name_tensor(v, i, j++, nullptr);
      }
    }
  }
  /// This scope's tracer of element type `T`.
  template <Element T>
  trace<T>& tracer() noexcept {
    static_assert(std::is_same_v<T, float> ? traces_float : traces_double,
                  "this tracing scope does not trace that element type: name it in the scope's `traced` argument");
    if constexpr (std::is_same_v<T, float>) return *f_;
    else return *d_;
  }
  void finish() {
    if constexpr (traces_float) f_->flush("the end of the function", false);
    if constexpr (traces_double) d_->flush("the end of the function", false);
    finished_ = true;
  }

 private:
  template <Element T>
  void name_tensor(const tensor<T>& t, int arg, int elem, const std::string* key) {
    if (!t.defined()) return;
    if constexpr (std::is_same_v<T, float> && traces_float) f_->name(t.raw_impl().get(), arg, elem, key);
    else if constexpr (std::is_same_v<T, double> && traces_double) d_->name(t.raw_impl().get(), arg, elem, key);
  }
  std::size_t depth_;
  trace<F>* f_ = nullptr;
  trace<D>* d_ = nullptr;
  recorder<float>* prev_f_ = nullptr;
  recorder<double>* prev_d_ = nullptr;
  bool finished_ = false;
};

}  // namespace fusegrad::detail::jit
