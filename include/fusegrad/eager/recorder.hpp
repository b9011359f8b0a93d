#pragma once
/// \file fusegrad/eager/recorder.hpp
/// The hook through which eager ops reach a run-time tracer: while a recorder is active on a
/// thread, the eager ops of that thread (`apply_op`, `sum`, `mean`, `max`, the engine's
/// gradient sums) hand their work to it instead of computing (see fusegrad/jit/trace.hpp).
/// Only the interface is here, so eager mode does not depend on the tracer.

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/ops/reduce.hpp"

namespace fusegrad {
template <Element T>
class tensor;
template <Element T>
struct hook;
namespace ir {
template <Element T>
class graph;
}  // namespace ir
namespace detail {
/// What the run-time tracer implements: eager ops on this thread hand their work to it
/// instead of computing (see fusegrad/jit/trace.hpp).
template <Element T>
struct recorder {
  /// Op `op` of the op table (its constant `scalar`) on `a` (and `*b`).
  virtual tensor<T> pointwise(int op, T scalar, const tensor<T>& a, const tensor<T>* b) = 0;
  /// A reduction of `x` over the dims where `mask` is true.
  virtual tensor<T> reduce(reduce_op k, const tensor<T>& x, const std::vector<bool>& mask, bool keepdim) = 0;
  /// `g` summed down to `target` (the inverse of broadcasting).
  virtual tensor<T> sum_to(const tensor<T>& g, const shape& target) = 0;
  /// `g`, a reduction over the dims where `mask` is true, broadcast back to `target`.
  virtual tensor<T> expand(const tensor<T>& g, const shape& target, const std::vector<bool>& mask) = 0;
  /// Ends the pending graph here (compiles and runs it), as a sync point would.
  virtual void sync(std::string_view why) = 0;
  /// Appends graph `g` (its inputs bound to `inputs`) and returns its `outputs`: how the
  /// backward of a traced function is inlined into a traced backward (compiled autograd).
  /// `sizes`, when given, are the nodes' shapes (a shape-generic graph run on other sizes).
  /// `fns` are the functions of `g`'s `call_hook` and `call` nodes, by slot (null: it has none).
  virtual std::vector<tensor<T>> replay(
      const ir::graph<T>& g, const std::vector<int>& outputs, const std::vector<tensor<T>>& inputs,
      const std::vector<shape>* sizes,
      const std::vector<std::function<tensor<T>(const tensor<T>&, const tensor<T>&)>>* fns) = 0;
  /// A function the tracer does not see into, called on `a` (and `*b`) when the graph runs:
  /// a `call_hook` node (a tensor hook; `out` is `a`'s shape) or a `call` node giving shape
  /// `out` (named `name` in the printed graph). `hook_id`: the hook's id (0 for a `call`).
  virtual tensor<T> call(bool hook, std::string_view name, const shape& out,
                         std::function<tensor<T>(const tensor<T>&, const tensor<T>&)> fn, const tensor<T>& a,
                         const tensor<T>* b, std::uint64_t hook_id) = 0;
  /// The output of user function number `fn` (a `fg::function<F>`, ops/user_ops.hpp) on
  /// `inputs`, whose forward computed `value` (recorded as the ops it ran); `saved(y)`, given
  /// the output `y`, returns what the function saves for its backward.
  virtual tensor<T> custom(int fn, const tensor<T>& value, const std::vector<tensor<T>>& inputs,
                           const std::function<std::vector<tensor<T>>(const tensor<T>&)>& saved) = 0;
  /// Brackets the nodes of an inlined backward (a compiled function's): `inline_end(from)`,
  /// `from` what `inline_begin()` returned, names them `aot<id>_<k>` in the printed graph.
  virtual std::size_t inline_begin() = 0;
  virtual void inline_end(std::size_t from) = 0;
  /// Marks `g` as the gradient an `AccumulateGrad` node hands to a leaf (for the printed graph).
  virtual void accumulate_grad(const tensor<T>& g) = 0;
  /// `t.register_hook` on a tensor this recorder holds uncomputed: `h` runs on `t`'s gradient
  /// in the backward of the graph captured around it. False: `t` is not this recorder's.
  virtual bool add_hook(const tensor<T>& t, const hook<T>& h) = 0;
  /// `t.remove_hook(id)` on such a tensor (`removed`: whether `id` was one of its hooks).
  /// False: `t` is not this recorder's.
  virtual bool remove_hook(const tensor<T>& t, std::uint64_t id, bool& removed) = 0;
  /// The caller's C++ reads the values of computed tensor `t` (`item`, `to_vector`, `at`;
  /// op `op`): a recorder that replays without calling the function refuses it where `t` is,
  /// or views, one of the call's arguments.
  virtual void read_values(const tensor<T>& t, std::string_view op) = 0;

 protected:
  ~recorder() = default;
};

/// The recorder active on this thread (null: ops compute eagerly).
template <Element T>
inline recorder<T>*& active_recorder() noexcept {
  thread_local recorder<T>* r = nullptr;
  return r;
}
}  // namespace detail
}  // namespace fusegrad
