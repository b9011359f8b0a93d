#pragma once
/// \file fusegrad/ir/op_table.hpp
/// The one list of element-wise ops the run-time IR can hold (a node's `op` is an index into
/// it), and the hook through which eager ops reach the run-time tracer.
///
/// Only declarations here, so that the eager op layer (`apply_op`, `sum`, ...) can ask
/// "is a tracer recording on this thread?" without depending on the tracer.

#include <cstdint>
#include <functional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/shape.hpp"

namespace fusegrad {
template <Element T>
class tensor;
template <Element T>
struct hook;

namespace ops {
struct neg_op; struct exp_op; struct log_op; struct sin_op; struct cos_op; struct tanh_op;
struct sigmoid_op; struct relu_op; struct abs_op; struct sqrt_op; struct step_op; struct sign_op;
struct add_op; struct sub_op; struct mul_op; struct div_op; struct maximum_op; struct pow_op;
struct gt_op; struct ge_op; struct lt_op; struct le_op; struct eq_op; struct ne_op;
template <Element T> struct add_scalar_op;
template <Element T> struct sub_scalar_op;
template <Element T> struct rsub_scalar_op;
template <Element T> struct mul_scalar_op;
template <Element T> struct div_scalar_op;
template <Element T> struct rdiv_scalar_op;
template <Element T> struct pow_scalar_op;
}  // namespace ops

namespace detail {
/// A list of types (the IR's op table).
template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};

/// Index of type `E` in a type list (-1: absent).
template <class E, class... Ts>
constexpr int type_index(type_list<Ts...>) {
  int i = 0, r = -1;
  ((r = (r < 0 && std::is_same_v<E, Ts>) ? i : r, ++i), ...);
  return r;
}
}  // namespace detail

namespace ir {
template <Element T>
class graph;

/// Every element-wise op the IR can hold, in one list. Ops with state hold exactly one scalar
/// of the element type (the node's `scalar`).
template <Element T>
using op_table = detail::type_list<
    ops::neg_op, ops::exp_op, ops::log_op, ops::sin_op, ops::cos_op, ops::tanh_op, ops::sigmoid_op,
    ops::relu_op, ops::abs_op, ops::sqrt_op, ops::step_op, ops::sign_op,                   //
    ops::add_op, ops::sub_op, ops::mul_op, ops::div_op, ops::maximum_op, ops::pow_op,      //
    ops::gt_op, ops::ge_op, ops::lt_op, ops::le_op, ops::eq_op, ops::ne_op,                //
    ops::add_scalar_op<T>, ops::sub_scalar_op<T>, ops::rsub_scalar_op<T>, ops::mul_scalar_op<T>,
    ops::div_scalar_op<T>, ops::rdiv_scalar_op<T>, ops::pow_scalar_op<T>>;

/// Index of `Op` in `op_table<T>` (-1 for ops the IR does not know, e.g. a user's own).
template <class Op, Element T>
inline constexpr int op_index = detail::type_index<Op>(op_table<T>{});

template <class Op, class T>
concept KnownOp = Element<T> && op_index<Op, T> >= 0;
}  // namespace ir

namespace detail {
enum class reduce_op : std::uint8_t { sum, mean, max };

/// What the run-time tracer implements: eager ops on this thread hand their work to it
/// instead of computing (see fusegrad/jit/jit.hpp).
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
  virtual std::vector<tensor<T>> replay(const ir::graph<T>& g, const std::vector<int>& outputs,
                                        const std::vector<tensor<T>>& inputs, const std::vector<shape>* sizes,
                                        const std::vector<std::function<tensor<T>(const tensor<T>&, const tensor<T>&)>>* fns) = 0;
  /// A function the tracer does not see into, called on `a` (and `*b`) when the graph runs:
  /// a `call_hook` node (a tensor hook; `out` is `a`'s shape) or a `call` node giving shape
  /// `out` (named `name` in the printed graph).
  virtual tensor<T> call(bool hook, std::string_view name, const shape& out,
                         std::function<tensor<T>(const tensor<T>&, const tensor<T>&)> fn, const tensor<T>& a,
                         const tensor<T>* b) = 0;
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
