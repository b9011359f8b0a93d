#pragma once
/// \file fusegrad/jit/eager_step.hpp
/// The value of a node that a program runs as an *eager step* (on whole tensors, between
/// loops): its eager op (`eval_eager`), or the run's function of a `call_hook` / `call` node
/// (`run_call`).

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/reduce.hpp"
#include "fusegrad/ir/graph.hpp"

namespace fusegrad::detail::jit {

/// The function behind a `call_hook` or `call` node, given to each run of a graph (its
/// second argument is undefined for one-operand calls).
template <Element T>
using call_fn = std::function<tensor<T>(const tensor<T>&, const tensor<T>&)>;

/// The value of `call_hook` or `call` node `n` (of shape `out`): its function, from the run's
/// `fns`, on `a`, `b`.
template <Element T>
tensor<T> run_call(const ir::node<T>& n, const tensor<T>& a, const tensor<T>& b, const std::vector<call_fn<T>>* fns,
                   const shape& out) {
  if (!fns || n.index < 0 || static_cast<std::size_t>(n.index) >= fns->size())
    fusegrad::detail::fail("jit program", "a call node needs function ", n.index, " but the run was given ",
                           fns ? fns->size() : 0, "; expected one function per call slot");
  tensor<T> r = (*fns)[static_cast<std::size_t>(n.index)](a, b);
  if (!r.defined() || r.shape() != out)
    fusegrad::detail::fail("jit program", "function ", n.index, " of a call node returned shape ",
                           r.defined() ? fusegrad::to_string(r.shape()) : std::string("<undefined>"), "; expected ",
                           fusegrad::to_string(out));
  return r;
}

/// Runs node `n` eagerly on its operands' values (`a`, `b`; `ref` holds the shape target):
/// with grad mode on, the eager ops record on the tape, which is how a graph runs when the
/// kernel cache falls back to eager mode.
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): one case per node kind
tensor<T> eval_eager(const ir::node<T>& n, const tensor<T>& a, const tensor<T>& b, const shape& ref) {
  auto dims_of = [&](std::size_t rank) {
    std::vector<index_t> d;
    for (std::size_t i = 0; i < rank; ++i)
      if ((n.dims >> i) & 1U) d.push_back(static_cast<index_t>(i));
    return d;
  };
  switch (n.kind) {
    case ir::node_kind::pointwise:
      if (n.op >= ops::table_size<T>)
        return ops::user_op_at<T>(n.op, "jit").eager(n.scalar, a, n.b >= 0 ? &b : nullptr);
      return visit_op(n, [&](const auto& op) -> tensor<T> {
        using Op = std::remove_cvref_t<decltype(op)>;
        if constexpr (BinaryOp<Op, T>) return apply_op(op, a, b);
        else return apply_op(op, a);
      });
    case ir::node_kind::sum:
    case ir::node_kind::mean:
    case ir::node_kind::max: {
      const auto d = dims_of(a.dim());
      if (a.dim() > 0 && d.empty()) return a;  // reduces nothing
      if (n.kind == ir::node_kind::sum) return fusegrad::sum(a, d, n.keepdim);
      if (n.kind == ir::node_kind::mean) return fusegrad::mean(a, d, n.keepdim);
      return fusegrad::max(a, d, n.keepdim);
    }
    case ir::node_kind::expand: {
      const auto mask = ir::dims_mask(n.dims, ref.size());
      tensor<T> r = a.reshape(fusegrad::detail::reduced_shape(ref, mask, true)).expand(ref);
      if (n.average) r = r / static_cast<T>(fusegrad::detail::reduced_count(ref, mask));
      return r;
    }
    case ir::node_kind::sum_to: return fusegrad::detail::sum_to(a, ref);
    case ir::node_kind::input:
    case ir::node_kind::call_hook:
    case ir::node_kind::call:
    case ir::node_kind::custom: break;
  }
  fusegrad::detail::fail("jit eager step", n.kind == ir::node_kind::input ? "an input node has no value to compute"
                                           : n.kind == ir::node_kind::custom
                                               ? "a custom node needs its inputs (run_custom)"
                                               : "a call node needs the run's functions (run_call)");
}

}  // namespace fusegrad::detail::jit
