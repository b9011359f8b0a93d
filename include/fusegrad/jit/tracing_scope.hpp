#pragma once
/// \file fusegrad/jit/tracing_scope.hpp
/// The tracers of a thread (one float/double pair per nesting depth of jitted calls) and the
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
/// `Tag` is known). The tracer types below are templates over a tag
/// so that a TU instantiates the tracer (its virtual functions pull in the whole run-time
/// compiler, for float and double) only when it makes a jitted call or turns compiled
/// autograd on, not by including the header (instantiated there, the tracers and compiled
/// autograd's runner made every TU that included it compile for far longer).
template <class T, class Tag>
using deferred_t = std::conditional_t<sizeof(Tag*) == 0, Tag, T>;

/// The tracers of one thread, reused by its jitted calls (one pair per nesting depth).
template <class Tag = void>
struct thread_tracers {
  trace<deferred_t<float, Tag>> f;
  trace<deferred_t<double, Tag>> d;
};
template <class Tag>
std::vector<std::unique_ptr<thread_tracers<Tag>>>& trace_stack() {
  thread_local std::vector<std::unique_ptr<thread_tracers<Tag>>> s;
  return s;
}
inline std::size_t& trace_depth() noexcept {
  thread_local std::size_t d = 0;
  return d;
}

/// The tracers of one jitted call on this thread (installed for its duration). Name it as
/// `tracing_scope<deferred_t<void, X>>` with some template parameter `X` of the caller.
template <class Tag>
class tracing_scope {
 public:
  explicit tracing_scope(function_state& st) {
    auto& stack = trace_stack<Tag>();
    const std::size_t depth = trace_depth()++;
    if (stack.size() <= depth) stack.push_back(std::make_unique<thread_tracers<Tag>>());
    t_ = stack[depth].get();
    t_->f.begin(st);
    t_->d.begin(st);
    prev_f_ = std::exchange(active_recorder<float>(), &t_->f);
    prev_d_ = std::exchange(active_recorder<double>(), &t_->d);
  }
  tracing_scope(const tracing_scope&) = delete;
  tracing_scope& operator=(const tracing_scope&) = delete;
  ~tracing_scope() {
    if (!finished_) {
      t_->f.abandon();
      t_->d.abandon();
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
    if constexpr (std::is_same_v<T, float>) return t_->f;
    else return t_->d;
  }
  void finish() {
    t_->f.flush("the end of the function", false);
    t_->d.flush("the end of the function", false);
    finished_ = true;
  }

 private:
  template <Element T>
  void name_tensor(const tensor<T>& t, int arg, int elem, const std::string* key) {
    if (!t.defined()) return;
    if constexpr (std::is_same_v<T, float>) t_->f.name(t.raw_impl().get(), arg, elem, key);
    else t_->d.name(t.raw_impl().get(), arg, elem, key);
  }
  thread_tracers<Tag>* t_ = nullptr;
  recorder<float>* prev_f_ = nullptr;
  recorder<double>* prev_d_ = nullptr;
  bool finished_ = false;
};

}  // namespace fusegrad::detail::jit
