#pragma once
/// \file fusegrad/compile/node_eval.hpp
/// Evaluates one canonical node of the joint graph on eager tensors (no tape recording): the
/// node-by-node interpreter behind the `aot_eager` backend, and the reference the fused
/// kernels are checked against.

#include <cstring>

#include "fusegrad/compile/analysis.hpp"
#include "fusegrad/eager/matmul.hpp"
#include "fusegrad/eager/pointwise.hpp"
#include "fusegrad/eager/reduce.hpp"
#include "fusegrad/ops/table.hpp"

namespace fusegrad::detail {

/// The shape `s` reduced by `axis` with keepdim (all dims become 1, or the last one).
inline shape keepdim_shape(const shape& s, reduce_axis axis) {
  shape r = s;
  if (axis == reduce_axis::all) std::fill(r.begin(), r.end(), 1);
  else if (!r.empty()) r.back() = 1;
  return r;
}

/// A matmul operand of shape `s` (at least 1-D) as a matrix [rows, last]: rows is the product
/// of the leading dims (not numel / last, which loses the rows when the last dim is 0).
inline std::pair<index_t, index_t> matmul_rows_cols(const shape& s) {
  index_t rows = 1;
  for (std::size_t d = 0; d + 1 < s.size(); ++d) rows *= s[d];
  return {rows, s.back()};
}

/// op(X) for a matmul operand: X as a 2-D matrix [rows, last] (transposed if `t`), viewed
/// as a batch of one for the matrix kernel.
template <Element T>
tensor<T> matmul_operand(const tensor<T>& x, bool t) {
  const tensor<T> m = x.is_contiguous() ? x : contiguous_copy(x);
  const auto [rows, last] = matmul_rows_cols(x.shape());
  return t ? alias(m, {1, last, rows}, {0, 1, last}, m.offset()) : alias(m, {1, rows, last}, {0, last, 1}, m.offset());
}

/// The shape of `op_a(a) · op_b(b)` (the conventions of `matmul_expr`), checked. A forward
/// product (never `ta`; `tb` only from `linear`) is checked as eager `matmul` / `linear`
/// checks it, then for what fg::compile cannot express: a `b` that is not a matrix (eager's
/// vector and batched products). Backward products follow from forward shapes.
inline shape matmul_shape(const shape& a, const shape& b, bool ta, bool tb) {
  if (!ta) {
    if (tb) check_linear(a, b);
    else check_matmul(a, b);
    if (b.size() != 2)
      fail("matmul", "inside fg::compile the second operand is a matrix [k, n]; got shapes ", to_string(a), " and ",
           to_string(b), "; expected a 2-D second operand (vector and batched products: eager or fg::jit)");
  }
  if (a.empty() || b.empty())
    fail("matmul", "both arguments need at least 1 dim, got shapes ", to_string(a), " and ", to_string(b));
  auto [br, bc] = matmul_rows_cols(b);
  if (tb) std::swap(br, bc);
  auto [ar, ac] = matmul_rows_cols(a);
  if (ta) std::swap(ar, ac);
  if (ac != br)
    fail("matmul", "shapes ", to_string(a), " and ", to_string(b), " cannot be multiplied inside fg::compile (", ac,
         " != ", br, "); expected a [..., k] and b [k, n]");
  shape out = ta ? shape{ar, bc} : shape(a.begin(), a.end() - 1);
  if (!ta) out.push_back(bc);
  check_shape("matmul", out);  // [n, 0] x [0, m] can have more elements than either operand
  return out;
}

/// op_a(a) · op_b(b) with the conventions of `matmul_expr` (a keeps leading dims unless
/// transposed, b is always a matrix), without recording: the matrix kernel of eager `mm`.
template <Element T>
tensor<T> matmul_values(const tensor<T>& a, const tensor<T>& b, bool ta, bool tb) {
  const shape out = matmul_shape(a.shape(), b.shape(), ta, tb);  // checks both shapes first
  const tensor<T> c = bmm_values(matmul_operand(a, ta), matmul_operand(b, tb));
  return alias(c, out, contiguous_strides(out), 0);
}

/// The value of a matrix-product node of operands `a` and `b` (see `matmul_values`); while a
/// tracer records, an opaque call. Reached through a graph's tables (`node_tables::matmul`),
/// so that only a TU with a graph holding a product compiles the matrix kernels.
template <Element T>
tensor<T> matmul_node_value(const tensor<T>& a, const tensor<T>& b, bool ta, bool tb) {
  return call_opaque<T>(
      "matmul", matmul_shape(a.shape(), b.shape(), ta, tb),
      [ta, tb](const tensor<T>& x, const tensor<T>& y) { return matmul_values(x, y, ta, tb); }, a, b);
}
/// `matmul_node_value` for element type `T`, or null in the tables of a graph without products.
template <Element T>
using matmul_fn = tensor<T> (*)(const tensor<T>&, const tensor<T>&, bool, bool);

// ---- canonical nodes as data -----------------------------------------------------------
//
// What run-time code needs to know about a canonical node (its kind, operands, op, reduction,
// which input it is) is a constexpr `node_desc`; its run-time state (an op's constant, a
// reduction's keepdim flag) is one pointer per node, collected once per instance. Shape
// inference, node-by-node evaluation and tracing are then ONE function each per element type
// (`node_eval`), whatever the graph: a graph costs the compiler its tables, not code per node.

/// A canonical node as data (see above).
struct node_desc {
  gkind kind = gkind::pointwise;
  int arity = 0;
  int index = -1;                                    ///< an input or output gradient: which one
  int op = -1;                                       ///< element-wise: the op's index in ops::table (-1: a user's op)
  bool scalar = false;                               ///< element-wise: the op holds one scalar of the element type
  std::string_view name;                             ///< element-wise: the op's name (for error messages)
  detail::reduce_op rkind = detail::reduce_op::sum;  ///< reduction, sumto (sum), unreduce: which
  reduce_axis raxis = reduce_axis::all;
  int source = -1;              ///< sumto/unreduce: the forward node whose shape it takes
  bool ta = false, tb = false;  ///< matmul: transposed operands
};

template <class E, Element T>
constexpr node_desc describe() {
  node_desc d;
  d.kind = kind_of<E>();
  d.arity = static_cast<int>(arity_v<E>);
  if constexpr (is_leaf_v<E>) {
    d.index = static_cast<int>(E::index);
  } else if constexpr (is_pointwise_v<E>) {
    using Op = std::remove_cvref_t<decltype(std::declval<const E&>().op)>;
    d.op = ops::table_index<Op, T>;
    d.scalar = !std::is_empty_v<Op>;
    d.name = Op::name;
  } else if constexpr (is_reduce_v<E>) {
    []<detail::reduce_op K, reduce_axis X, class U>(node_desc& r, std::type_identity<reduce_expr<K, X, U>>) {
      r.rkind = K, r.raxis = X;
    }(d, std::type_identity<E>{});
  } else if constexpr (is_sumto_v<E>) {
    []<std::size_t K, class U>(node_desc& r, std::type_identity<sumto_expr<K, U>>) { r.source = static_cast<int>(K); }(
        d, std::type_identity<E>{});
  } else if constexpr (is_unreduce_v<E>) {
    []<detail::reduce_op K, reduce_axis X, std::size_t KK, class U>(node_desc& r,
                                                                    std::type_identity<unreduce_expr<K, X, KK, U>>) {
      r.rkind = K, r.raxis = X, r.source = static_cast<int>(KK);
    }(d, std::type_identity<E>{});
  } else if constexpr (is_matmul_v<E>) {
    d.ta = E::ta, d.tb = E::tb;
  }
  return d;
}

/// A node's run-time state: its op object (element-wise), its keepdim flag (reduction).
template <class E>
constexpr const void* state_of(const E& node) {
  if constexpr (is_pointwise_v<E>) return &node.op;
  else if constexpr (is_reduce_v<E>) return &node.keepdim;
  else return nullptr;
}
template <class E>
const void* state_of(const void* node) {
  return state_of(*static_cast<const E*>(node));
}

/// The addresses and the states of a constant tree's nodes, in post-order: `collect_addresses`
/// and the states in one walk, typed (a constant evaluation cannot read a node through the
/// `void` pointer `collect_addresses` gives).
template <class E>
constexpr void collect_nodes(const E& e, const void** addresses, const void** states, std::size_t& pos) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (collect_nodes(child<I>(e), addresses, states, pos), ...); }
  (std::make_index_sequence<arity_v<E>>{});
  if constexpr (!is_joint_v<E>) {
    addresses[pos] = &e;
    states[pos++] = state_of(e);
  }
}

/// The node addresses (post-order) and the canonical nodes' states of `A::constant_joint`
/// (with `A::constant_backward`).
template <class A>
struct constant_node_tables {
  struct tables {
    std::array<const void*, A::tree_nodes> nodes{};
    std::array<const void*, A::M> states{};
  };
  static constexpr tables value = [] {
    tables t;
    std::array<const void*, A::tree_nodes> at{};
    std::size_t pos = 0;
    collect_nodes(A::constant_joint, t.nodes.data(), at.data(), pos);
    for (std::size_t c = 0; c < A::M; ++c) t.states[c] = at[static_cast<std::size_t>(A::cg.rep[c])];
    return t;
  }();
};

/// The tile kernel of an element-wise node type (null for other nodes).
template <class E, Element T>
constexpr tile_fn<T> kernel_of() {
  if constexpr (is_pointwise_v<E>) return &tile_kernel<std::remove_cvref_t<decltype(std::declval<const E&>().op)>, T>;
  else return nullptr;
}

/// The IR's number of a user's element-wise op (fusegrad/ops/user_ops.hpp), given on first use.
using user_number_fn = int (*)();
/// Of an element-wise node type whose op is a user's that the run-time tracer can record
/// (null for other nodes): how a compiled function traced inside fg::jit records it.
template <class E, Element T>
constexpr user_number_fn user_number_of() {
  if constexpr (is_pointwise_v<E>) {
    using Op = std::remove_cvref_t<decltype(std::declval<const E&>().op)>;
    if constexpr (ops::TraceableUserOp<Op, T>) return &user_op_number<Op, T>;
  }
  return nullptr;
}

/// `matmul_node_value` where graph `A` holds a matrix product, else null (and not instantiated).
template <class A>
constexpr bool holds_matmul() {
  for (std::size_t c = 0; c < A::M; ++c)
    if (A::cg.kind[c] == gkind::matmul) return true;
  return false;
}
template <class A, Element T>
constexpr matmul_fn<T> matmul_of() {
  if constexpr (holds_matmul<A>()) return &matmul_node_value<T>;
  else return nullptr;
}

/// The tables of analysis `A`: per canonical node its description and, for element-wise
/// nodes, its tile kernel (and a user op's number).
template <class A>
struct node_tables {
  using T = typename A::element_type;
  static constexpr std::array<node_desc, A::M> desc = []<std::size_t... C>(std::index_sequence<C...>) {
    return std::array<node_desc, A::M>{describe<typename A::template node_t<C>, T>()...};
  }
  (std::make_index_sequence<A::M>{});
  static constexpr std::array<tile_fn<T>, A::M> kernels = []<std::size_t... C>(std::index_sequence<C...>) {
    return std::array<tile_fn<T>, A::M>{kernel_of<typename A::template node_t<C>, T>()...};
  }
  (std::make_index_sequence<A::M>{});
  static constexpr std::array<user_number_fn, A::M> user_numbers = []<std::size_t... C>(std::index_sequence<C...>) {
    return std::array<user_number_fn, A::M>{user_number_of<typename A::template node_t<C>, T>()...};
  }
  (std::make_index_sequence<A::M>{});
  /// The evaluation of the graph's matrix products (null where it has none).
  static constexpr matmul_fn<T> matmul = matmul_of<A, T>();
  /// The state pointers of an instance whose node addresses (post-order) are `nodes`.
  static std::array<const void*, A::M> states(const void* const* nodes) {
    return [&]<std::size_t... C>(std::index_sequence<C...>) {
      return std::array<const void*, A::M>{state_of<typename A::template node_t<C>>(nodes[A::cg.rep[C]])...};
    }
    (std::make_index_sequence<A::M>{});
  }
};

/// One evaluation of a graph's canonical nodes: their tables, state and values. Shape
/// inference, evaluation on eager tensors and recording into the run-time tracer, one
/// function each per element type.
template <Element T>
struct node_eval {
  // The larger members are defined out of the class (not inline), so that the precompiled
  // runtime's extern declaration (fusegrad/runtime.hpp) keeps them out of user TUs.
  const node_desc* desc;
  const std::array<int, 3>* children;
  const tile_fn<T>* kernels;
  const user_number_fn* user_numbers;
  matmul_fn<T> matmul;  ///< the value of a matrix-product node (null: the graph has none)
  const void* const* state;
  std::vector<tensor<T>>& values;
  std::vector<shape>& shapes;
  const std::vector<tensor<T>>& inputs;
  const std::vector<tensor<T>>& grads;  ///< gradients of the outputs (backward only)
  bool shapes_known = false;            ///< `run` leaves `shapes` as they are (see `eval_context::shapes_known`)

  const tensor<T>& arg(int c, int k) const {
    return values[static_cast<std::size_t>(children[static_cast<std::size_t>(c)][static_cast<std::size_t>(k)])];
  }
  const shape& arg_shape(int c, int k) const {
    return shapes[static_cast<std::size_t>(children[static_cast<std::size_t>(c)][static_cast<std::size_t>(k)])];
  }
  bool keepdim(int c) const { return *static_cast<const bool*>(state[static_cast<std::size_t>(c)]); }
  T scalar(int c) const {
    T s{};
    if (desc[c].scalar) std::memcpy(&s, state[static_cast<std::size_t>(c)], sizeof(T));
    return s;
  }

  /// Sets `shapes[c]` from the shapes of c's operands (a leaf: from its value).
  void infer_shape(int c);

  /// The dims a reduction node (or the broadcast of its gradient back) spans in shape `s`:
  /// all of them, or the last one (none for a 0-d value: dim -1 of a 0-d tensor is the
  /// value itself, as in eager mode).
  static std::vector<bool> reduction_mask(const node_desc& d, const shape& s) {
    std::vector<bool> mask(s.size(), d.raxis == reduce_axis::all);
    if (!mask.empty()) mask.back() = true;
    return mask;
  }
  /// The reduction of a reduction node.
  static reduce_op reduction_op(const node_desc& d) {
    return d.rkind == detail::reduce_op::sum    ? reduce_op::sum
           : d.rkind == detail::reduce_op::mean ? reduce_op::mean
                                                : reduce_op::max;
  }

  /// Element-wise node c (an op of the IR's op table, or a user's it can record) recorded into
  /// tracer `r`.
  tensor<T> record_pointwise(recorder<T>& r, int c) const {
    const int op = desc[c].op >= 0 ? desc[c].op : user_numbers[static_cast<std::size_t>(c)]();
    return r.pointwise(op, scalar(c), arg(c, 0), desc[c].arity == 2 ? &arg(c, 1) : nullptr);
  }

  /// The value of node c from the values of its operands. While a tracer records (a compiled
  /// function's forward inside fg::jit, its backward inside a captured backward), the node
  /// is recorded instead: element-wise ops, reductions and their adjoints as IR nodes, matmul
  /// as an opaque call.
  tensor<T> eval(int c) const;

  /// The gradient of a reduction (`d`) broadcast back to its input's shape `to`.
  static tensor<T> unreduce_values(const node_desc& d, const tensor<T>& g, const shape& to);

  /// Evaluates the nodes flagged in `active` (in order), keeping their shapes. While a tracer
  /// records, this records them (element-wise nodes of the IR's op table straight into the
  /// graph, no eager kernel involved).
  void run(const bool* active, std::size_t m);
  /// `run` of a backward pass where some output gradients are absent (undefined in `grads`;
  /// the caller sets the shapes of their `grad_input` nodes): a node whose operands include
  /// an absent one is absent too, uncomputed (the backward is linear in the gradients, so it
  /// would be zero), except a sum or difference with a present operand, where the absent
  /// term counts as zero. Nothing multiplies a zero by a local derivative that may be inf or
  /// NaN, as eager mode never visits a node whose gradient is absent.
  void run_given(const bool* active, std::size_t m);
};

template <Element T>
void node_eval<T>::infer_shape(int c) {
  const node_desc& d = desc[c];
  shape& out = shapes[static_cast<std::size_t>(c)];
  switch (d.kind) {
    case gkind::input:
    case gkind::grad_input: out = values[static_cast<std::size_t>(c)].shape(); break;
    case gkind::custom: out = arg_shape(c, d.arity - 1); break;
    case gkind::pointwise:
      if (d.arity == 1 || arg_shape(c, 0) == arg_shape(c, 1)) out = arg_shape(c, 0);
      else out = broadcast_shapes(d.name, arg_shape(c, 0), arg_shape(c, 1));
      break;
    case gkind::reduction: {
      const shape& x = arg_shape(c, 0);
      const std::vector<bool> mask = reduction_mask(d, x);
      check_reduction(reduction_op(d), x, mask);  // what eager checks (the fused loops compute none of it)
      out = reduced_shape(x, mask, keepdim(c));
      break;
    }
    case gkind::sumto:
    case gkind::unreduce: out = shapes[static_cast<std::size_t>(d.source)]; break;
    case gkind::matmul: out = matmul_shape(arg_shape(c, 0), arg_shape(c, 1), d.ta, d.tb); break;
  }
}

template <Element T>
tensor<T> node_eval<T>::eval(int c) const {
  const node_desc& d = desc[c];
  const auto u = static_cast<std::size_t>(c);
  switch (d.kind) {
    case gkind::input: return inputs[static_cast<std::size_t>(d.index)];
    case gkind::grad_input: return grads[static_cast<std::size_t>(d.index)];
    case gkind::custom: return arg(c, d.arity - 1);
    case gkind::pointwise:
      if (d.op >= 0 || user_numbers[u])
        if (auto* r = active_recorder<T>()) [[unlikely]]
          return record_pointwise(*r, c);
      return pointwise_values<T>(d.name, kernels[u], state[u], arg(c, 0), d.arity == 2 ? &arg(c, 1) : nullptr);
    case gkind::reduction: {
      const tensor<T>& x = arg(c, 0);
      return reduce_values(reduction_op(d), x, reduction_mask(d, x.shape()), keepdim(c));
    }
    case gkind::sumto: return sum_to(arg(c, 0), shapes[static_cast<std::size_t>(d.source)]);
    case gkind::unreduce: return unreduce_values(d, arg(c, 0), shapes[static_cast<std::size_t>(d.source)]);
    case gkind::matmul: return matmul(arg(c, 0), arg(c, 1), d.ta, d.tb);
  }
  return {};
}

template <Element T>
tensor<T> node_eval<T>::unreduce_values(const node_desc& d, const tensor<T>& g, const shape& to) {
  const shape ks = keepdim_shape(to, d.raxis);
  const index_t n = numel(to) / std::max<index_t>(numel(ks), 1);
  if (auto* r = active_recorder<T>()) [[unlikely]] {
    tensor<T> e = r->expand(g, to, reduction_mask(d, to));
    if (d.rkind != detail::reduce_op::mean) return e;
    const ops::div_scalar_op<T> div{static_cast<T>(n)};
    return r->pointwise(ops::table_index<ops::div_scalar_op<T>, T>, op_scalar<T>(div), e, nullptr);
  }
  no_grad guard;
  tensor<T> e = g.reshape(ks).expand(to);
  if (d.rkind == detail::reduce_op::mean) return map(ops::div_scalar_op<T>{static_cast<T>(n)}, e);
  return contiguous_copy(e);
}

template <Element T>
void node_eval<T>::run(const bool* active, std::size_t m) {
  for (std::size_t c = 0; c < m; ++c)
    if (active[c]) {
      values[c] = eval(static_cast<int>(c));
      if (!shapes_known) shapes[c] = values[c].shape();
    }
}

template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the node loop with its cases for absent operands
void node_eval<T>::run_given(const bool* active, std::size_t m) {
  constexpr int add = ops::table_index<ops::add_op, T>, sub = ops::table_index<ops::sub_op, T>;
  for (std::size_t c = 0; c < m; ++c) {
    if (!active[c]) continue;
    const node_desc& d = desc[c];
    if (d.kind == gkind::grad_input && !grads[static_cast<std::size_t>(d.index)].defined()) {
      values[c] = tensor<T>{};
      continue;
    }
    int operands = 0, absent = 0;
    for (const int o : children[c])
      if (o >= 0) ++operands, absent += values[static_cast<std::size_t>(o)].defined() ? 0 : 1;
    if (absent == 0) {
      values[c] = eval(static_cast<int>(c));
    } else if (d.kind == gkind::pointwise && (d.op == add || d.op == sub) && absent < operands) {
      std::array<int, 3> zeroed{-1, -1, -1};  // the absent term as zeros, for this node only
      for (std::size_t k = 0; k < 3; ++k)
        if (const int o = children[c][k]; o >= 0 && !values[static_cast<std::size_t>(o)].defined()) {
          tensor<T> z = empty<T>(shapes[static_cast<std::size_t>(o)]);
          fill(z, T(0));
          values[static_cast<std::size_t>(o)] = std::move(z);
          zeroed[k] = o;
        }
      values[c] = eval(static_cast<int>(c));
      for (const int o : zeroed)
        if (o >= 0) values[static_cast<std::size_t>(o)] = tensor<T>{};
    } else {
      values[c] = tensor<T>{};
      infer_shape(static_cast<int>(c));
      continue;
    }
    shapes[c] = values[c].shape();
  }
}

/// The node evaluation of an instance of analysis `A` (its tables and state).
template <class A, Element T>
node_eval<T> nodes_of(const typename A::instance& inst, std::vector<tensor<T>>& values, std::vector<shape>& shapes,
                      const std::vector<tensor<T>>& inputs, const std::vector<tensor<T>>& grads) {
  return {node_tables<A>::desc.data(),
          A::cg.children.data(),
          node_tables<A>::kernels.data(),
          node_tables<A>::user_numbers.data(),
          node_tables<A>::matmul,
          inst.state.data(),
          values,
          shapes,
          inputs,
          grads};
}

}  // namespace fusegrad::detail
