#pragma once
/// \file fusegrad/ir/graph.hpp
/// The run-time graph IR (the counterpart of an FX graph): what the run-time tracer records
/// and compiled autograd captures, when the C++ compiler cannot see the graph.
///
/// A node is an op of `ops/` named by its index in one op table (ops/table.hpp), its
/// operands, its scalar constant (for `x * s` and friends) and its shape. Nothing about an op
/// is redefined here: programs run the op struct's own `value` on SIMD tiles, the eager
/// fallback calls the eager op, and `ir::backward` derives the backward graph by calling the
/// op's own derivative rule on `ir::value`s, which append nodes as they are combined (see
/// docs/architecture.md, "The one idea: each op is defined once").

#include <array>
#include <bit>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fusegrad/core/hash.hpp"
#include "fusegrad/core/node_kinds.hpp"
#include "fusegrad/ops/reduce.hpp"
#include "fusegrad/ops/all.hpp"
#include "fusegrad/ops/max.hpp"
#include "fusegrad/ops/user_ops.hpp"

namespace fusegrad {
/// Base of `ir::value`: puts namespace fusegrad among its associated namespaces, so the op
/// functions the derivative rules call (`sin(x)`, `step(y)`) are found for IR values too.
struct ir_value_base {};
}  // namespace fusegrad

namespace fusegrad::ir {

/// The most dims a traced tensor may have (dims are kept as bits of a mask).
inline constexpr std::size_t max_rank = 64;

template <Element T>
struct node {
  node_kind kind = node_kind::input;
  bool keepdim = false;    ///< reductions: reduced dims kept with size 1
  bool average = false;    ///< expand: divide by the number of reduced elements
  int op = -1;             ///< index in ops::table<T> (pointwise)
  int a = -1, b = -1;      ///< operands
  int index = -1;          ///< input index (input)
  int ref = -1;            ///< expand, sum_to: the node whose shape is the target
  std::uint64_t dims = 0;  ///< reductions, expand: bit d set when dim d is reduced
  T scalar{};              ///< the op's constant (ops with state)
  shape sizes;

  /// A node whose shape is written in it, not derived from its operands (traced from eager
  /// code that passed the target shape): its shape is part of the structure.
  [[nodiscard]] bool fixed_shape() const noexcept {
    return ((kind == node_kind::expand || kind == node_kind::sum_to) && ref < 0) || kind == node_kind::call;
  }
  /// Everything but the derived shapes: two traces with equal structure differ in input sizes only.
  [[nodiscard]] bool same_structure(const node& o) const noexcept {
    return (!fixed_shape() || sizes == o.sizes) && kind == o.kind && keepdim == o.keepdim && average == o.average &&
           op == o.op && a == o.a && b == o.b && index == o.index && ref == o.ref && dims == o.dims &&
           std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(scalar) ==
               std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(o.scalar);
  }
};

/// The reduced-dims mask as flags, one per dim of a rank-`rank` operand.
inline std::vector<bool> dims_mask(std::uint64_t dims, std::size_t rank) {
  std::vector<bool> m(rank);
  for (std::size_t d = 0; d < rank; ++d) m[d] = (dims >> d) & 1U;
  return m;
}

template <Element T>
struct value;

/// What a `custom` node's backward reads: user function `fn` (ops/user_ops.hpp), the nodes of
/// its inputs and of the tensors it saved (-1: an undefined one).
struct custom_call {
  int fn = -1;
  std::vector<int> inputs, saved;
  /// Its output needs grad: the function saved `saved` (setup_context ran, as eagerly) and
  /// its backward applies. Otherwise no gradient flows through it (its inputs need none).
  bool differentiable = false;
  bool operator==(const custom_call&) const = default;
};

/// A graph of nodes in topological order (operands before users).
template <Element T>
class graph {
 public:
  [[nodiscard]] const std::vector<node<T>>& nodes() const noexcept { return nodes_; }
  [[nodiscard]] const node<T>& at(int id) const { return nodes_.at(static_cast<std::size_t>(id)); }
  [[nodiscard]] std::size_t size() const noexcept { return nodes_.size(); }
  [[nodiscard]] int num_inputs() const noexcept { return inputs_; }
  [[nodiscard]] bool empty() const noexcept { return nodes_.empty(); }
  /// How many shape buffers `clear()` left for the next graph to reuse (a diagnostic).
  [[nodiscard]] std::size_t spare_shapes() const noexcept { return spare_.size(); }
  /// Empties the graph, keeping its memory for the next one (the tracer reuses its graph).
  /// It keeps at most as many shape buffers as the graph had nodes: a long-lived graph (the
  /// tracer's) does not grow with the graphs it has held. (Defined out of the class, so that
  /// the precompiled runtime's instantiation serves user TUs.)
  void clear();

  graph() = default;
  /// A copy holds the nodes, not the spare shape buffers (they serve the original's next graph).
  graph(const graph& o) : nodes_(o.nodes_), customs_(o.customs_), inputs_(o.inputs_) {}
  graph& operator=(const graph& o) {
    if (this != &o) nodes_ = o.nodes_, customs_ = o.customs_, inputs_ = o.inputs_;
    return *this;
  }
  graph(graph&&) noexcept = default;
  graph& operator=(graph&&) noexcept = default;

  int add_input(const shape& s) {
    node<T> n;
    n.kind = node_kind::input;
    n.index = inputs_++;
    n.sizes = reuse(s);
    return push(std::move(n));
  }

  /// Appends op `op` (index into ops::table<T>, constant `scalar`) on `a` or `a`, `b`.
  int add_pointwise(int op, T scalar, int a, int b = -1) {
    node<T> n;
    n.kind = node_kind::pointwise;
    n.op = op;
    n.a = a;
    n.b = b;
    n.scalar = scalar;
    if (b < 0 || at(a).sizes == at(b).sizes) n.sizes = reuse(at(a).sizes);
    else n.sizes = broadcast_shapes(op_name(op), at(a).sizes, at(b).sizes);
    return push(std::move(n));
  }
  template <class Op>
  int add_pointwise(const Op& op, int a, int b = -1) {
    static_assert(ops::TableOp<Op, T>,
                  "fusegrad::ir: this op is not in the IR's op table (ops::table); custom element-wise "
                  "ops run eagerly, or inside fg::compile");
    return add_pointwise(ops::table_index<Op, T>, fusegrad::detail::op_scalar<T>(op), a, b);
  }

  /// A reduction of `a` over the dims set in `dims` (all dims: pass `all_dims`).
  int add_reduction(node_kind k, int a, std::uint64_t dims = all_dims, bool keepdim = false) {
    node<T> n;
    n.kind = k;
    n.a = a;
    const std::size_t r = at(a).sizes.size();
    n.dims = r == 0 ? 0 : (dims & rank_bits(r));
    n.keepdim = keepdim;
    n.sizes = fusegrad::detail::reduced_shape(at(a).sizes, dims_mask(n.dims, r), keepdim);
    return push(std::move(n));
  }

  /// `a`, the result of reducing node `ref` over `dims`, broadcast back to `ref`'s shape.
  int add_expand(int a, int ref, std::uint64_t dims = all_dims, bool average = false) {
    node<T> n;
    n.kind = node_kind::expand;
    n.a = a;
    n.ref = ref;
    const std::size_t r = at(ref).sizes.size();
    n.dims = r == 0 ? 0 : (dims & rank_bits(r));
    n.average = average;
    n.sizes = at(ref).sizes;
    return push(std::move(n));
  }

  /// `a` summed down to the shape of node `ref` (which `a`'s shape broadcasts from).
  int add_sum_to(int a, int ref) {
    node<T> n;
    n.kind = node_kind::sum_to;
    n.a = a;
    n.ref = ref;
    n.sizes = at(ref).sizes;
    return push(std::move(n));
  }

  /// `a` summed down to a fixed shape `to` (a node traced from eager code: no node holds
  /// the target shape, so entries holding one stay specialised on sizes).
  int add_sum_to_shape(int a, const shape& to) {
    node<T> n;
    n.kind = node_kind::sum_to;
    n.a = a;
    n.sizes = reuse(to);
    return push(std::move(n));
  }
  /// `a`, a reduction over `dims` of a value of shape `to`, broadcast back to `to` (fixed).
  int add_expand_shape(int a, const shape& to, std::uint64_t dims) {
    node<T> n;
    n.kind = node_kind::expand;
    n.a = a;
    n.dims = to.empty() ? 0 : (dims & rank_bits(to.size()));
    n.sizes = reuse(to);
    return push(std::move(n));
  }
  /// True when some node's shape is fixed rather than derived (see `add_sum_to_shape`).
  [[nodiscard]] bool has_fixed_shapes() const noexcept {
    for (const auto& n : nodes_)
      if (n.fixed_shape()) return true;
    return false;
  }

  /// Function number `slot` of the run, a hook, called on `a`'s value (functions are given
  /// to each run, as inputs are: the graph holds only their slots).
  int add_call_hook(int a, int slot) {
    node<T> n;
    n.kind = node_kind::call_hook;
    n.a = a;
    n.index = slot;
    n.sizes = reuse(at(a).sizes);
    return push(std::move(n));
  }
  /// Function number `slot` of the run called on `a` (and `b`), giving a value of shape `out`.
  int add_call(int a, int b, int slot, const shape& out) {
    node<T> n;
    n.kind = node_kind::call;
    n.a = a;
    n.b = b;
    n.index = slot;
    n.sizes = reuse(out);
    return push(std::move(n));
  }

  /// The output of user function `fn` on the nodes `inputs`, whose forward computed `value`
  /// (what it saved is given by `set_custom_saved` once the output exists).
  int add_custom(int fn, int value, std::vector<int> inputs) {
    node<T> n;
    n.kind = node_kind::custom;
    n.a = value;
    n.index = static_cast<int>(customs_.size());
    n.sizes = reuse(at(value).sizes);
    customs_.push_back({fn, std::move(inputs), {}});
    return push(std::move(n));
  }
  /// What custom node `k`'s function saved, its output needing grad (`custom_call::differentiable`).
  void set_custom_saved(int k, std::vector<int> saved) {
    custom_call& c = customs_.at(static_cast<std::size_t>(at(k).index));
    c.saved = std::move(saved);
    c.differentiable = true;
  }
  /// The function call of `custom` node `k`.
  [[nodiscard]] const custom_call& custom_at(int k) const { return customs_.at(static_cast<std::size_t>(at(k).index)); }
  /// Replaces `custom` node `k` by its value, a `detach` node (no gradient flows through it):
  /// once its backward is derived, what a program runs.
  void lower_custom(int k) {
    node<T>& n = nodes_.at(static_cast<std::size_t>(k));
    n.kind = node_kind::pointwise;
    n.op = ops::table_index<ops::detach_op, T>;
    n.index = -1;
  }
  /// This graph with every `custom` node lowered (its function calls kept for printing).
  [[nodiscard]] graph lowered() const {
    graph g = *this;
    for (std::size_t k = 0; k < g.nodes_.size(); ++k)
      if (g.nodes_[k].kind == node_kind::custom) g.lower_custom(static_cast<int>(k));
    return g;
  }
  /// Gives node k the shape `sizes[k]` (a shape-generic graph for another call's sizes).
  void set_sizes(const std::vector<shape>& sizes) {
    for (std::size_t k = 0; k < nodes_.size() && k < sizes.size(); ++k) nodes_[k].sizes = sizes[k];
  }

  /// Appends a copy of `n` whose operands are already remapped (inputs are renumbered).
  int add_copy(node<T> n) {
    if (n.kind == node_kind::custom)
      fusegrad::detail::fail("ir::graph",
                             "a custom node cannot be copied alone (its function call has node ids); "
                             "expected graphs whose custom nodes are lowered");
    if (n.kind == node_kind::input) n.index = inputs_++;
    return push(std::move(n));
  }

  static constexpr std::uint64_t all_dims = ~std::uint64_t{0};
  static constexpr std::uint64_t rank_bits(std::size_t r) noexcept {
    return r >= 64 ? all_dims : (std::uint64_t{1} << r) - 1;
  }

  /// The shape of every node for new input shapes (the shape-generic entries of the kernel
  /// cache): broadcasting is checked again, and throws as eager ops would.
  [[nodiscard]] std::vector<shape> infer_shapes(const std::vector<shape>& input_shapes) const {
    std::vector<shape> s(nodes_.size());
    for (std::size_t k = 0; k < nodes_.size(); ++k) {
      const auto& n = nodes_[k];
      auto of = [&](int c) -> const shape& { return s[static_cast<std::size_t>(c)]; };
      switch (n.kind) {
        case node_kind::input: s[k] = input_shapes.at(static_cast<std::size_t>(n.index)); break;
        case node_kind::pointwise: s[k] = n.b < 0 ? of(n.a) : broadcast_shapes(op_name(n.op), of(n.a), of(n.b)); break;
        case node_kind::sum:
        case node_kind::mean:
        case node_kind::max:
          s[k] = fusegrad::detail::reduced_shape(of(n.a), dims_mask(n.dims, of(n.a).size()), n.keepdim);
          break;
        case node_kind::expand:
        case node_kind::sum_to: s[k] = n.ref >= 0 ? of(n.ref) : n.sizes; break;
        case node_kind::call_hook:
        case node_kind::custom: s[k] = of(n.a); break;
        case node_kind::call: s[k] = n.sizes; break;
      }
    }
    return s;
  }

  /// Order-sensitive hash of the structure (not the shapes): the kernel cache's first key.
  [[nodiscard]] std::uint64_t structure_hash() const noexcept {
    fusegrad::detail::fnv1a h;
    for (const auto& n : nodes_) {
      h.mix(static_cast<std::uint64_t>(n.kind) | (std::uint64_t(n.keepdim) << 8) | (std::uint64_t(n.average) << 9) |
            (static_cast<std::uint64_t>(static_cast<std::uint32_t>(n.op)) << 16));
      h.mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(n.a)) |
            (static_cast<std::uint64_t>(static_cast<std::uint32_t>(n.b)) << 32));
      h.mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(n.index)) |
            (static_cast<std::uint64_t>(static_cast<std::uint32_t>(n.ref)) << 32));
      h.mix(n.dims);
      if (n.fixed_shape())
        for (index_t d : n.sizes) h.mix(static_cast<std::uint64_t>(d));
      if constexpr (sizeof(T) == 4) h.mix(std::bit_cast<std::uint32_t>(n.scalar));
      else h.mix(std::bit_cast<std::uint64_t>(n.scalar));
    }
    for (const custom_call& c : customs_) {
      h.mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(c.fn)) | (std::uint64_t{c.inputs.size()} << 32));
      for (int i : c.inputs) h.mix(static_cast<std::uint32_t>(i));
      for (int i : c.saved) h.mix(static_cast<std::uint32_t>(i) ^ 0x9E3779B9U);
      h.mix(c.differentiable ? 1 : 0);
    }
    return h.value();
  }
  [[nodiscard]] bool same_structure(const graph& o) const noexcept {
    if (nodes_.size() != o.nodes_.size() || customs_ != o.customs_) return false;
    for (std::size_t k = 0; k < nodes_.size(); ++k)
      if (!nodes_[k].same_structure(o.nodes_[k])) return false;
    return true;
  }

  /// The graph as readable code, one line per node (what `FUSEGRAD_LOGS=graph` prints).
  /// `node_names[k]`, where given and not empty, replaces node k's number (`%aot0_3`);
  /// `call_names[i]` names the function in slot i.
  // NOLINTNEXTLINE(readability-function-cognitive-complexity): one case per node kind
  [[nodiscard]] std::string to_string(const std::vector<std::string>& input_names = {},
                                      const std::vector<std::string>& node_names = {},
                                      const std::vector<std::string>& call_names = {}) const {
    std::string s;
    auto dims_str = [](const node<T>& n, std::size_t rank) {
      std::string d = "[";
      for (std::size_t i = 0; i < rank; ++i)
        if ((n.dims >> i) & 1U) d += (d.size() > 1 ? ", " : "") + std::to_string(i);
      return d + "]";
    };
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const auto& n = nodes_[i];
      auto v = [&](int c) {
        std::string r = "%";  // (not "%" + to_string: GCC 12 warns falsely about that form)
        if (static_cast<std::size_t>(c) < node_names.size() && !node_names[static_cast<std::size_t>(c)].empty())
          r += node_names[static_cast<std::size_t>(c)];
        else r += std::to_string(c);
        return r;
      };
      s += v(static_cast<int>(i));
      s += " = ";
      switch (n.kind) {
        case node_kind::input:
          s += "input[" + std::to_string(n.index) + "]";
          if (static_cast<std::size_t>(n.index) < input_names.size())
            s += " '" + input_names[static_cast<std::size_t>(n.index)] + "'";
          break;
        case node_kind::pointwise:
          s += std::string(op_name(n.op)) + "(" + v(n.a) + (n.b >= 0 ? ", " + v(n.b) : std::string()) +
               (op_has_scalar(n.op) ? ", " + scalar_string(n.scalar) : std::string()) + ")";
          break;
        case node_kind::sum:
        case node_kind::mean:
        case node_kind::max: {
          const std::size_t r = at(n.a).sizes.size();
          s += std::string(n.kind == node_kind::sum    ? "sum"
                           : n.kind == node_kind::mean ? "mean"
                                                       : "max") +
               "(" + v(n.a);
          if (r > 0 && n.dims != rank_bits(r)) s += ", dims=" + dims_str(n, r);
          if (n.keepdim) s += ", keepdim=true";
          s += ")";
          break;
        }
        case node_kind::expand:
          s += std::string(n.average ? "expand_mean(" : "expand(") + v(n.a) +
               (n.ref >= 0 ? ", like=" + v(n.ref) : std::string()) + ")";
          break;
        case node_kind::sum_to:
          s += "sum_to(" + v(n.a) + (n.ref >= 0 ? ", like=" + v(n.ref) : std::string()) + ")";
          break;
        case node_kind::call_hook: s += "call_hook(" + v(n.a) + ", fns[" + std::to_string(n.index) + "])"; break;
        case node_kind::custom: {
          const custom_call& c = custom_at(static_cast<int>(i));
          s +=
              "function '" + std::string(ops::user_function_at<T>(c.fn, "ir::graph").name) + "'(" + v(n.a) + "; inputs";
          for (int x : c.inputs) s += " " + v(x);
          if (c.differentiable) {
            s += "; saved";
            for (int x : c.saved) s += x >= 0 ? " " + v(x) : std::string(" none");
          } else {
            s += "; no grad";
          }
          s += ")";
          break;
        }
        case node_kind::call:
          s += "call(" + v(n.a) + (n.b >= 0 ? ", " + v(n.b) : std::string()) + ", fns[" + std::to_string(n.index) + "]";
          if (static_cast<std::size_t>(n.index) < call_names.size())
            s += " '" + call_names[static_cast<std::size_t>(n.index)] + "'";
          s += ")";
          break;
      }
      s += "  # " + fusegrad::to_string(n.sizes) + "\n";
    }
    return s;
  }

  /// Name of op `k` of the op table (for printing and errors).
  static std::string_view op_name(int k) {
    if (k >= ops::table_size<T>) {
      const ops::user_op<T>* u = ops::find_user_op<T>(k);
      return u ? u->name : "?";
    }
    return [&]<class... Ops>(fusegrad::detail::type_list<Ops...>) {
      std::string_view r = "?";
      int i = 0;
      ((r = i++ == k ? Ops::name : r), ...);
      return r;
    }(ops::table<T>{});
  }
  /// Whether op `k` of the op table has a derivative rule (as the tape decides for eager
  /// tensors): a node of an op without one never requires grad.
  static bool op_has_derivative(int k) {
    static constexpr auto table = []<class... Ops>(fusegrad::detail::type_list<Ops...>) {
      return std::array<bool, sizeof...(Ops)>{fusegrad::detail::has_derivative<Ops, value<T>>...};
    }(ops::table<T>{});
    if (k >= ops::table_size<T>) return ops::user_op_at<T>(k, "ir::graph").has_derivative;
    return k >= 0 && static_cast<std::size_t>(k) < table.size() && table[static_cast<std::size_t>(k)];
  }
  static bool op_has_scalar(int k) {
    if (k >= ops::table_size<T>) return ops::user_op_at<T>(k, "ir::graph").has_scalar;
    return [&]<class... Ops>(fusegrad::detail::type_list<Ops...>) {
      bool r = false;
      int i = 0;
      ((r = i++ == k ? !std::is_empty_v<Ops> : r), ...);
      return r;
    }(ops::table<T>{});
  }

 private:
  static std::string scalar_string(T v) {
    std::string s = std::to_string(v);
    while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
    return s;
  }
  int push(node<T> n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }
  /// A copy of `s` in a shape buffer left by `clear()` (no allocation once warm).
  shape reuse(const shape& s) {
    if (spare_.empty()) return s;
    shape r = std::move(spare_.back());
    spare_.pop_back();
    r.assign(s.begin(), s.end());
    return r;
  }
  std::vector<node<T>> nodes_;
  std::vector<custom_call> customs_;  ///< by a custom node's `index`
  std::vector<shape> spare_;
  int inputs_ = 0;
};

template <Element T>
void graph<T>::clear() {
  for (auto& n : nodes_) {
    if (spare_.size() >= nodes_.size()) break;
    spare_.push_back(std::move(n.sizes));
  }
  nodes_.clear();
  customs_.clear();
  inputs_ = 0;
}

/// Calls `f(op)` with the op struct of node `n` (its constant restored); returns f's result.
template <Element T, class F>
decltype(auto) visit_op(const node<T>& n, F&& f) {
  return [&]<class First, class... Ops>(fusegrad::detail::type_list<First, Ops...>) -> decltype(auto) {
    using R = decltype(f(std::declval<const First&>()));
    auto make = [&]<class Op>(std::type_identity<Op>) {
      if constexpr (std::is_empty_v<Op>) return Op{};
      else return std::bit_cast<Op>(n.scalar);
    };
    int i = 0;
    if constexpr (std::is_void_v<R>) {
      (void)((i++ == n.op ? (f(make(std::type_identity<First>{})), true) : false) ||
             ((i++ == n.op ? (f(make(std::type_identity<Ops>{})), true) : false) || ...));
    } else {
      R r{};
      (void)((i++ == n.op ? (r = f(make(std::type_identity<First>{})), true) : false) ||
             ((i++ == n.op ? (r = f(make(std::type_identity<Ops>{})), true) : false) || ...));
      return r;
    }
  }(ops::table<T>{});
}

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
requires UnaryOp<Op, T> ir::value<T> apply_op(const Op& op, const ir::value<T>& x) {
  return {x.g, x.g->add_pointwise(op, x.id)};
}

template <Element T, class Op>
requires BinaryOp<Op, T> ir::value<T> apply_op(const Op& op, const ir::value<T>& a, const ir::value<T>& b) {
  if (a.g != b.g) fusegrad::detail::fail(Op::name, "the operands belong to different IR graphs");
  return {a.g, a.g->add_pointwise(op, a.id, b.id)};
}

template <Element T>
ir::value<T> sum(const ir::value<T>& x) {
  return {x.g, x.g->add_reduction(ir::node_kind::sum, x.id)};
}
template <Element T>
ir::value<T> mean(const ir::value<T>& x) {
  return {x.g, x.g->add_reduction(ir::node_kind::mean, x.id)};
}
template <Element T>
ir::value<T> max(const ir::value<T>& x) {
  return {x.g, x.g->add_reduction(ir::node_kind::max, x.id)};
}

}  // namespace fusegrad
