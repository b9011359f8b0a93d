#pragma once
/// \file fusegrad/ir/graph.hpp
/// The run-time graph IR (the counterpart of an FX graph): what the run-time tracer records
/// and compiled autograd captures, when the C++ compiler cannot see the graph.
///
/// A node is an op of `ops/` named by its index in one op table, its operands, its scalar
/// constant (for `x * s` and friends) and its shape. Nothing about an op is redefined here:
/// the interpreter runs the op struct's own `value` on SIMD batches, and `ir::backward`
/// derives the backward graph by calling the op's own derivative rule on `ir::value`s,
/// which append nodes as they are combined (see DESIGN.md, "The one idea").

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "fusegrad/expr/tree.hpp"  // type_list, type_index
#include "fusegrad/ops/abs.hpp"
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/cos.hpp"
#include "fusegrad/ops/div.hpp"
#include "fusegrad/ops/exp.hpp"
#include "fusegrad/ops/log.hpp"
#include "fusegrad/ops/maximum.hpp"
#include "fusegrad/ops/mul.hpp"
#include "fusegrad/ops/neg.hpp"
#include "fusegrad/ops/pow.hpp"
#include "fusegrad/ops/relu.hpp"
#include "fusegrad/ops/sigmoid.hpp"
#include "fusegrad/ops/sin.hpp"
#include "fusegrad/ops/sqrt.hpp"
#include "fusegrad/ops/step.hpp"
#include "fusegrad/ops/sub.hpp"
#include "fusegrad/ops/tanh.hpp"

namespace fusegrad {
/// Base of `ir::value`: puts namespace fusegrad among its associated namespaces, so the op
/// functions the derivative rules call (`sin(x)`, `step(y)`) are found for IR values too.
struct ir_value_base {};
}  // namespace fusegrad

namespace fusegrad::ir {

/// Every element-wise op the IR can hold, in one list: a node's `op` is an index into it.
/// Ops with state hold exactly one scalar of the element type (the node's `scalar`).
template <Element T>
using op_table = detail::type_list<
    ops::neg_op, ops::exp_op, ops::log_op, ops::sin_op, ops::cos_op, ops::tanh_op, ops::sigmoid_op,
    ops::relu_op, ops::abs_op, ops::sqrt_op, ops::step_op, ops::sign_op,                   //
    ops::add_op, ops::sub_op, ops::mul_op, ops::div_op, ops::maximum_op, ops::pow_op,      //
    ops::gt_op, ops::ge_op, ops::lt_op, ops::le_op, ops::eq_op, ops::ne_op,                //
    ops::add_scalar_op<T>, ops::sub_scalar_op<T>, ops::rsub_scalar_op<T>, ops::mul_scalar_op<T>,
    ops::div_scalar_op<T>, ops::rdiv_scalar_op<T>, ops::pow_scalar_op<T>>;

template <class Op, Element T>
inline constexpr int op_index = detail::type_index<Op>(op_table<T>{});

template <class Op, class T>
concept KnownOp = Element<T> && op_index<Op, T> >= 0;

/// What a node computes.
enum class node_kind : std::uint8_t {
  input,      ///< input `index` of the graph
  pointwise,  ///< op `op` of the op table on `a` (and `b`), broadcasting
  sum,        ///< sum of all elements of `a` (a 0-d value)
  mean,       ///< mean of all elements of `a`
  max,        ///< max of all elements of `a`
  expand,     ///< `a` (0-d) broadcast to this node's shape (the backward of a full reduction)
};

template <Element T>
struct node {
  node_kind kind = node_kind::input;
  int op = -1;         ///< index in op_table<T> (pointwise)
  int a = -1, b = -1;  ///< operands
  int index = -1;      ///< input index (input)
  T scalar{};          ///< the op's constant (ops with state)
  shape sizes;
};

/// A graph of nodes in topological order (operands before users).
template <Element T>
class graph {
 public:
  [[nodiscard]] const std::vector<node<T>>& nodes() const noexcept { return nodes_; }
  [[nodiscard]] const node<T>& at(int id) const { return nodes_.at(static_cast<std::size_t>(id)); }
  [[nodiscard]] std::size_t size() const noexcept { return nodes_.size(); }
  [[nodiscard]] int num_inputs() const noexcept { return inputs_; }

  int add_input(shape s) {
    node<T> n;
    n.kind = node_kind::input;
    n.index = inputs_++;
    n.sizes = std::move(s);
    return push(std::move(n));
  }

  /// Appends op `op` on operand `a` (unary) or `a`, `b` (binary, broadcasting).
  template <class Op>
  int add_pointwise(const Op& op, int a, int b = -1) {
    static_assert(KnownOp<Op, T>,
                  "fusegrad::ir: this op is not in the IR's op table (ir::op_table); custom element-wise "
                  "ops run eagerly, or inside fg::compile");
    node<T> n;
    n.kind = node_kind::pointwise;
    n.op = op_index<Op, T>;
    n.a = a;
    n.b = b;
    if constexpr (!std::is_empty_v<Op>) {
      static_assert(sizeof(Op) == sizeof(T) && std::is_trivially_copyable_v<Op>,
                    "fusegrad::ir: an op with state must hold exactly one scalar of the element type");
      n.scalar = std::bit_cast<T>(op);
    }
    n.sizes = b < 0 ? at(a).sizes : broadcast_shapes(Op::name, at(a).sizes, at(b).sizes);
    return push(std::move(n));
  }

  int add_reduction(node_kind k, int a) {
    node<T> n;
    n.kind = k;
    n.a = a;
    return push(std::move(n));
  }

  int add_expand(int a, shape to) {
    node<T> n;
    n.kind = node_kind::expand;
    n.a = a;
    n.sizes = std::move(to);
    return push(std::move(n));
  }

  /// The graph as readable code, one line per node (what `FUSEGRAD_LOGS=graph` prints).
  [[nodiscard]] std::string to_string() const {
    std::string s;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const auto& n = nodes_[i];
      s += "%" + std::to_string(i) + " = ";
      switch (n.kind) {
        case node_kind::input: s += "input[" + std::to_string(n.index) + "]"; break;
        case node_kind::pointwise:
          s += std::string(op_name(n.op)) + "(%" + std::to_string(n.a) +
               (n.b >= 0 ? ", %" + std::to_string(n.b) : std::string()) +
               (op_has_scalar(n.op) ? ", " + std::to_string(n.scalar) : std::string()) + ")";
          break;
        case node_kind::sum: s += "sum(%" + std::to_string(n.a) + ")"; break;
        case node_kind::mean: s += "mean(%" + std::to_string(n.a) + ")"; break;
        case node_kind::max: s += "max(%" + std::to_string(n.a) + ")"; break;
        case node_kind::expand: s += "expand(%" + std::to_string(n.a) + ")"; break;
      }
      s += "  # " + fusegrad::to_string(n.sizes) + "\n";
    }
    return s;
  }

  /// Name of op `k` of the op table (for printing).
  static std::string_view op_name(int k) {
    return [&]<class... Ops>(detail::type_list<Ops...>) {
      std::string_view r = "?";
      int i = 0;
      ((r = i++ == k ? Ops::name : r), ...);
      return r;
    }(op_table<T>{});
  }
  static bool op_has_scalar(int k) {
    return [&]<class... Ops>(detail::type_list<Ops...>) {
      bool r = false;
      int i = 0;
      ((r = i++ == k ? !std::is_empty_v<Ops> : r), ...);
      return r;
    }(op_table<T>{});
  }

 private:
  int push(node<T> n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }
  std::vector<node<T>> nodes_;
  int inputs_ = 0;
};

/// A node of a graph under construction, as a value fusegrad's ops accept: `fg::cos(v)`,
/// `v * 2.0`, `a + b` append nodes. Derivative rules called on values build backward graphs.
template <Element T>
struct value : ir_value_base {
  value() = default;
  value(graph<T>* graph_, int id_) : g(graph_), id(id_) {}
  using element_type = T;
  graph<T>* g = nullptr;
  int id = -1;
  [[nodiscard]] const fusegrad::shape& sizes() const { return g->at(id).sizes; }
};

}  // namespace fusegrad::ir

namespace fusegrad {

template <Element T>
struct operand_traits<ir::value<T>> {
  static constexpr bool value = true;
  using element_type = T;
};

template <Element T, class Op>
  requires UnaryOp<Op, T>
ir::value<T> apply_op(const Op& op, const ir::value<T>& x) {
  return {x.g, x.g->add_pointwise(op, x.id)};
}

template <Element T, class Op>
  requires BinaryOp<Op, T>
ir::value<T> apply_op(const Op& op, const ir::value<T>& a, const ir::value<T>& b) {
  if (a.g != b.g) fusegrad::detail::fail(Op::name, "the operands belong to different IR graphs");
  return {a.g, a.g->add_pointwise(op, a.id, b.id)};
}

template <Element T> ir::value<T> sum(const ir::value<T>& x) { return {x.g, x.g->add_reduction(ir::node_kind::sum, x.id)}; }
template <Element T> ir::value<T> mean(const ir::value<T>& x) { return {x.g, x.g->add_reduction(ir::node_kind::mean, x.id)}; }
template <Element T> ir::value<T> max(const ir::value<T>& x) { return {x.g, x.g->add_reduction(ir::node_kind::max, x.id)}; }

}  // namespace fusegrad
