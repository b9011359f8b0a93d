#pragma once
/// \file fusegrad/core/node_kinds.hpp
/// What a node of each of fusegrad's graphs is, in one place: the four kinds and the mappings
/// between them. Each graph keeps the kind its own passes need:
///   - `detail::gkind`: a canonical node of `fg::compile`'s expression graph (expr/graph.hpp);
///   - `ir::node_kind`: a node of the run-time IR that `fg::jit` and compiled autograd trace
///     (ir/graph.hpp);
///   - `partition::node_kind`: a node of the save/recompute partitioner's joint graph
///     (partition/plan.hpp), which both of those are mapped to;
///   - `detail::role`: what `fg::compile`'s scheduler does with an expression node
///     (kernel/schedule.hpp).
/// The same concept under two names: `gkind::unreduce` is `ir::node_kind::expand` (a reduced
/// value broadcast back), `gkind::custom` is `ir::node_kind::call` (a function the graph cannot
/// see into), and `gkind::matmul` is what the partitioner calls an `extern_op`. The mappings
/// below are `switch`es without a default, checked by `static_assert` to map every kind.

#include <cstdint>

namespace fusegrad::detail {

/// What a canonical node is, for scheduling and partitioning.
enum class gkind : unsigned char { input, grad_input, pointwise, reduction, sumto, unreduce, matmul, custom };

/// What the scheduler does with a canonical node: loads it (`leaf`), computes it in a stage's
/// loop (`compute`), accumulates it there (`reduce`), broadcasts a reduced value back
/// (`unreduce`), runs it before a loop (`matmul`), or leaves it out (`none`).
enum class role : unsigned char { none, leaf, compute, reduce, unreduce, matmul };

}  // namespace fusegrad::detail

namespace fusegrad::ir {

/// What a node computes.
enum class node_kind : std::uint8_t {
  input,      ///< input `index` of the graph
  pointwise,  ///< op `op` of the op table on `a` (and `b`), broadcasting
  sum,        ///< sum of `a` over the dims in `dims` (all of them: a 0-d value unless keepdim)
  mean,       ///< mean of `a` over `dims`
  max,        ///< max of `a` over `dims`
  expand,     ///< `a` (reduced over `dims` of node `ref`) broadcast back to `ref`'s shape,
              ///< divided by the reduced count when `average` (the backward of reductions)
  sum_to,     ///< `a` summed down to the shape of node `ref` (the inverse of broadcasting)
  call_hook,  ///< function `index` of the run (a tensor hook, not traced) called on `a`'s
              ///< value; its result has `a`'s shape
  call,       ///< function `index` of the run (an op the tracer cannot see into: matmul's and
              ///< views' backwards) called on `a` (and `b`); its shape is written in the node
  custom,     ///< the output of a user's `fg::function`: the value of `a` (its forward, traced as
              ///< the nodes before it), whose gradient flows to the function's inputs through
              ///< its own backward, not through `a` (`graph::custom_at(k)`: which function, its
              ///< inputs and what it saved)
};

[[nodiscard]] constexpr bool is_reduction(node_kind k) noexcept {
  return k == node_kind::sum || k == node_kind::mean || k == node_kind::max;
}

}  // namespace fusegrad::ir

namespace fusegrad::partition {

/// What a node of the joint graph is; decides how the partitioner may treat it.
enum class node_kind : unsigned char {
  input,       ///< a forward input (primal); recomputable for free, but saving it counts as a saved tensor
  grad_input,  ///< a gradient of a forward output (tangent); only the backward has it
  pointwise,   ///< cheap element-wise op: may be saved or recomputed
  reduction,   ///< sum/mean/max: never recomputed in the backward (saved when the backward needs it)
  extern_op,   ///< matmul/linear: never recomputed in the backward (saved when needed)
  constant     ///< a value needing no storage (e.g. a literal); never saved, always available
};

/// The partitioner's kind of a canonical node of an expression graph. A user's function
/// (`custom`) is element-wise there, and a broadcast of a reduced value is recomputable.
constexpr node_kind kind_of(detail::gkind k) {
  switch (k) {
    case detail::gkind::input: return node_kind::input;
    case detail::gkind::grad_input: return node_kind::grad_input;
    case detail::gkind::pointwise:
    case detail::gkind::custom:
    case detail::gkind::unreduce: return node_kind::pointwise;
    case detail::gkind::reduction:
    case detail::gkind::sumto: return node_kind::reduction;
    case detail::gkind::matmul: return node_kind::extern_op;
  }
  throw "fusegrad: not a gkind";  // unreachable; not a constant expression, so the check below fails
}

/// The partitioner's kind of a node of the run-time IR; an input is a gradient of an output
/// when `grad_input` (its index is past the function's own inputs). What the tracer cannot
/// see into (calls, a user's function's output) and every reduction is never recomputed.
constexpr node_kind kind_of(ir::node_kind k, bool grad_input) {
  switch (k) {
    case ir::node_kind::input: return grad_input ? node_kind::grad_input : node_kind::input;
    case ir::node_kind::pointwise:
    case ir::node_kind::expand: return node_kind::pointwise;
    case ir::node_kind::sum:
    case ir::node_kind::mean:
    case ir::node_kind::max:
    case ir::node_kind::sum_to:
    case ir::node_kind::call_hook:
    case ir::node_kind::call:
    case ir::node_kind::custom: return node_kind::reduction;
  }
  throw "fusegrad: not an ir::node_kind";
}

}  // namespace fusegrad::partition

namespace fusegrad::detail {

/// The scheduler's role of a canonical node that a program evaluates (the scheduler makes an
/// input `leaf`, or `none` when nothing reads it).
constexpr role role_of(gkind k) {
  switch (k) {
    case gkind::input:
    case gkind::grad_input: return role::leaf;
    case gkind::pointwise:
    case gkind::custom: return role::compute;
    case gkind::reduction:
    case gkind::sumto: return role::reduce;
    case gkind::unreduce: return role::unreduce;
    case gkind::matmul: return role::matmul;
  }
  throw "fusegrad: not a gkind";
}

/// Whether `f` maps every kind from the first to `last` (a `switch` that misses one throws,
/// which is not a constant expression).
template <class Kind, class F>
constexpr bool maps_every_kind(Kind last, F f) {
  for (int k = 0; k <= static_cast<int>(last); ++k) (void)f(static_cast<Kind>(k));
  return true;
}
static_assert(maps_every_kind(gkind::custom, [](gkind k) { return partition::kind_of(k); }),
              "fusegrad: partition::kind_of must map every gkind");
static_assert(maps_every_kind(gkind::custom, [](gkind k) { return role_of(k); }),
              "fusegrad: role_of must map every gkind");
static_assert(maps_every_kind(ir::node_kind::custom,
                              [](ir::node_kind k) {
                                return partition::kind_of(k, false) == partition::kind_of(k, true) ||
                                       k == ir::node_kind::input;
                              }),
              "fusegrad: partition::kind_of must map every ir::node_kind");

}  // namespace fusegrad::detail
