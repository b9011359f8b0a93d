#pragma once
/// \file fusegrad/eager/node.hpp
/// The tape's node classes: `node` (a backward function with its gradient edges and hooks),
/// `saving_node` (saved tensors and their versions) and `rule_node` (an op's backward rule).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fusegrad/core/mutex.hpp"
#include "fusegrad/core/small_vector.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad {

/// The lists a tape node keeps (its edges, output shapes, hook lists): the first `N` elements
/// in the node itself, more in a vector from this thread's small-object pool (`detail::pooled`).
/// A recorded op made about ten heap allocations, a third of its cost at small sizes; most
/// nodes have one or two inputs and one output.
template <class X, std::size_t N>
class node_list {
 public:
  node_list() = default;
  node_list(node_list&& o) noexcept { *this = std::move(o); }
  node_list& operator=(node_list&& o) noexcept {
    if (this == &o) return *this;
    more_ = std::move(o.more_);
    for (std::size_t i = 0; i < N; ++i) inline_[i] = std::move(o.inline_[i]);
    size_ = o.size_;
    o.size_ = 0;
    o.more_.clear();
    return *this;
  }
  node_list(const node_list&) = delete;
  node_list& operator=(const node_list&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  X* begin() noexcept { return size_ <= N ? inline_ : more_.data(); }
  X* end() noexcept { return begin() + size_; }
  const X* begin() const noexcept { return size_ <= N ? inline_ : more_.data(); }
  const X* end() const noexcept { return begin() + size_; }
  X& operator[](std::size_t i) noexcept { return begin()[i]; }
  const X& operator[](std::size_t i) const noexcept { return begin()[i]; }
  X& at(std::size_t i) {
    if (i >= size_) throw std::out_of_range("fusegrad::node_list::at");
    return begin()[i];
  }
  const X& at(std::size_t i) const {
    if (i >= size_) throw std::out_of_range("fusegrad::node_list::at");
    return begin()[i];
  }
  void push_back(X x) {
    if (size_ < N) {
      inline_[size_++] = std::move(x);
      return;
    }
    if (size_ == N) {  // the inline elements move out with the new one
      more_.reserve(2 * N + 2);
      for (std::size_t i = 0; i < N; ++i) more_.push_back(std::move(inline_[i]));
    }
    more_.push_back(std::move(x));
    ++size_;
  }

 private:
  X inline_[N] = {};
  std::vector<X, detail::pooled<X>> more_;
  std::size_t size_ = 0;
};

/// A node of the backward graph (PyTorch's `torch::autograd::Node`). It receives one
/// gradient per output of the forward op and returns one per input (`next_edges()`).
template <Element T>
class node {
 public:
  node() : sequence_nr_(detail::next_id()) {}
  /// Frees the graph below this node without recursing on its depth (PyTorch's `deleteNode`):
  /// a producer that only this node keeps alive is taken over and its own edges taken in
  /// turn, so that each node dies holding no last reference to another. Dropping a chain of
  /// 200,000 ops would otherwise nest 200,000 destructor calls and overflow the stack.
  virtual ~node() {
    std::vector<std::shared_ptr<node>> dying;
    auto take = [&dying](edge_list& edges) {
      for (auto& e : edges)
        if (e.fn && e.fn.use_count() == 1) dying.push_back(std::move(e.fn));
    };
    take(edges_);
    while (!dying.empty()) {
      const std::shared_ptr<node> n = std::move(dying.back());
      dying.pop_back();
      take(n->edges_);
    }  // `n` is freed here, with no edge left that it alone keeps alive
  }
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  /// PyTorch's name for this node kind: "MulBackward0", "AccumulateGrad", ...
  [[nodiscard]] virtual std::string_view name() const = 0;
  /// Whether this is a leaf's `AccumulateGrad` node (`detail::accumulate_grad`, the only one
  /// that says so): what the engine and compiled autograd's key walk ask of every node,
  /// without comparing names, a `dynamic_cast` or a virtual call.
  [[nodiscard]] bool accumulates() const noexcept { return accumulates_; }
  /// Computes input gradients from output gradients (`grads[i]` has `output_shape(i)`).
  /// An undefined entry in the result means "no gradient for that input".
  virtual std::vector<tensor<T>> apply(std::vector<tensor<T>>& grads) = 0;
  /// Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}
  /// The tensors this node saved for backward (empty once released).
  [[nodiscard]] virtual std::vector<tensor<T>> saved_tensors() const { return {}; }
  /// What `apply` reads besides its incoming gradients, handed over without running it
  /// (PyTorch's `compiled_args`/`collect`, for compiled autograd's cache key and the inputs of
  /// a captured backward on a cache hit): `params`, a fingerprint of the constants its rule
  /// holds (scalars, dims, which inputs take gradients), and the tensors it reads appended to
  /// `tensors` (its saved tensors, checked as `apply` checks them: the same errors), as
  /// pointers valid until the node is applied or freed. False: the node cannot say, and its
  /// rule must run (under the tracer) every time.
  virtual bool collect(std::uint64_t& params, std::vector<const tensor<T>*>& tensors) {
    (void)params;
    (void)tensors;
    return false;
  }
  /// The rule's scalar that is not among the constants of `params` but an input of a captured
  /// graph (`saving_node::set_scalar_input`; fixed at record time), in `s`; false: none.
  virtual bool scalar_input(T& s) const {
    (void)s;
    return false;
  }
  /// Compiled autograd's capture: the 0-d tensor the rule reads its scalar input from, in place
  /// of the constant, the next time it runs (undefined: the constant again); returns the
  /// previous one, undefined once a rule has run with it (see `saving_node`).
  virtual tensor<T> exchange_scalar_input(tensor<T> s) { return s; }

  /// A node's gradient edges: one per input, up to two held in the node.
  using edge_list = node_list<edge<T>, 2>;
  [[nodiscard]] const edge_list& next_edges() const noexcept { return edges_; }
  [[nodiscard]] std::size_t num_outputs() const noexcept { return output_shapes_.size(); }
  [[nodiscard]] const shape& output_shape(std::size_t i) const { return output_shapes_.at(i); }
  /// Every output's shape, and below every output's hooks (`pre_hooks`), in output order.
  [[nodiscard]] const node_list<shape, 1>& output_shapes() const noexcept { return output_shapes_; }
  /// Creation order; the engine runs later nodes first.
  [[nodiscard]] std::uint64_t sequence_nr() const noexcept { return sequence_nr_; }
  /// Hooks run on the gradient of output `i` before `apply` (non-leaf tensor hooks).
  [[nodiscard]] std::vector<hook<T>>& pre_hooks(std::size_t i) { return pre_hooks_.at(i); }
  [[nodiscard]] const node_list<std::vector<hook<T>>, 1>& pre_hook_lists() const noexcept { return pre_hooks_; }

  /// Whether the engine hands `apply` zeros for an output whose gradient nothing produced
  /// (the default), or leaves it undefined and runs none of its hooks (PyTorch's
  /// `ctx.set_materialize_grads(False)`): a node that can skip the work for an unused output,
  /// e.g. a compiled graph's backward, which must not multiply its zero by a derivative.
  [[nodiscard]] bool materialize_grads() const noexcept { return materialize_grads_; }
  void set_materialize_grads(bool m) noexcept { materialize_grads_ = m; }
  /// Whether `apply` runs the hooks of its outputs (`pre_hooks`) itself rather than the engine
  /// before it: a compiled graph's backward, where an output also used inside the graph gets
  /// part of its gradient from within, which its hooks must see (and run in order with the
  /// graph's own hooks on it).
  [[nodiscard]] bool applies_hooks() const noexcept { return applies_hooks_; }
  void set_applies_hooks(bool a) noexcept { applies_hooks_ = a; }

  void set_next_edges(edge_list e) { edges_ = std::move(e); }

 protected:
  /// Made by `detail::accumulate_grad` only (see `accumulates`).
  void set_accumulates() noexcept { accumulates_ = true; }

 public:
  void add_output(shape s) {
    output_shapes_.push_back(std::move(s));
    pre_hooks_.push_back({});
  }

 private:
  edge_list edges_;
  node_list<shape, 1> output_shapes_;
  node_list<std::vector<hook<T>>, 1> pre_hooks_;
  std::uint64_t sequence_nr_;
  bool materialize_grads_ = true;
  bool applies_hooks_ = false;
  bool accumulates_ = false;
};

namespace detail {

/// What every op's tape node does besides calling its rule: it keeps the saved tensors and
/// their versions, refuses a second backward after they were freed and saved tensors that
/// were modified in place. One class per element type, whatever the op.
template <Element T>
class saving_node : public node<T> {
 public:
  saving_node(std::string_view name, std::vector<tensor<T>> saved) : name_(name), saved_(std::move(saved)) {
    versions_.reserve(saved_.size());
    for (const auto& t : saved_) {
      versions_.push_back(t.defined() && t.impl()->store ? t.impl()->store->version() : 0);
      had_saved_ = had_saved_ || t.defined();
    }
  }
  [[nodiscard]] std::string_view name() const override { return name_; }
  /// Locked, like `release_saved`: concurrent backwards through a shared node (retain_graph)
  /// run it in turn, and one that frees it makes the other's a clean error.
  std::vector<tensor<T>> apply(std::vector<tensor<T>>& grads) override {
    std::lock_guard lock(mutex_);
    check_saved();
    // A backward with create_graph runs with grad mode on: the rule's ops are recorded, on
    // the saved tensors as they were in the forward (the outputs of this node reconnected).
    // Compiled autograd's capture hands a rule with a scalar input its scalar as a 0-d tensor
    // after the saved tensors (used up here, by the capturing thread's traced run only: the
    // capture checks that every such rule ran so).
    std::vector<tensor<T>> r;
    if (is_grad_enabled()) {
      r = apply_with_graph(grads);
    } else if (scalar_input_.defined() && active_recorder<T>()) [[unlikely]] {
      std::vector<tensor<T>> with_scalar = saved_;
      with_scalar.push_back(std::move(scalar_input_));
      scalar_input_ = tensor<T>{};
      r = run_rule(with_scalar, grads);
    } else {
      r = run_rule(saved_, grads);
    }
    if (sums_to_inputs_) sum_to_inputs(r);
    return r;
  }
  /// The saved tensors, checked as `apply` checks them, and the fingerprint of the rule's
  /// constants given at record time (none: the node cannot be collected).
  bool collect(std::uint64_t& params, std::vector<const tensor<T>*>& tensors) override {
    if (!has_params_) return false;
    std::lock_guard lock(mutex_);
    check_saved();
    params = params_;
    for (const auto& t : saved_) tensors.push_back(&t);
    return true;
  }
  bool scalar_input(T& s) const override {
    s = scalar_;
    return has_scalar_input_;
  }
  tensor<T> exchange_scalar_input(tensor<T> s) override {
    std::lock_guard lock(mutex_);
    std::swap(scalar_input_, s);
    return s;
  }
  /// Frees the saved tensors; their slots stay, undefined, for the rule of a node that saved
  /// nothing and may run again.
  void release_saved() override {
    tensor<T> freed[4];  // freed after the lock is released (no allocation for up to 4)
    std::vector<tensor<T>> more;
    std::lock_guard lock(mutex_);
    released_ = true;
    std::size_t k = 0;
    for (auto& t : saved_)
      if (t.defined()) {
        if (k < 4) freed[k++] = std::move(t);
        else more.push_back(std::move(t));
      }
  }
  /// Which saved tensors are outputs of this node (held detached: saving an output makes no
  /// reference cycle) and the node itself, so that a create_graph backward reconnects them.
  void set_saved_outputs(std::vector<int> slots, std::weak_ptr<node<T>> self) {
    output_slot_ = std::move(slots);
    self_ = std::move(self);
  }
  /// Whether the rule is written with recording ops, so that a create_graph backward through
  /// it is itself differentiable (double backward). A rule that is not gives its results a
  /// node that throws when a second backward reaches it (PyTorch's "not implemented").
  void set_double_backward(bool d) noexcept { double_backward_ = d; }
  [[nodiscard]] bool double_backward() const noexcept { return double_backward_; }
  [[nodiscard]] std::vector<tensor<T>> saved_tensors() const override {
    std::lock_guard lock(mutex_);
    return released_ ? std::vector<tensor<T>>{} : saved_;
  }
  /// Makes `apply` sum each input's gradient to that input's shape, as its edge records it
  /// (the inverse of broadcasting, done once here rather than by each rule holding its
  /// inputs' shapes; PyTorch's engine does it in `validate_outputs`).
  void set_sums_to_inputs() noexcept { sums_to_inputs_ = true; }
  /// Sets the fingerprint of the rule's constants (what makes the node collectable).
  void set_params(std::uint64_t p) noexcept {
    params_ = p;
    has_params_ = true;
  }
  /// The rule's one scalar `s`, which it also takes as a 0-d tensor after the saved tensors
  /// (`detail::scalar_is_input`): left out of `params` (`scalar_input` says it), so that
  /// compiled autograd makes it an input of the captured graph, not a constant of its key.
  void set_scalar_input(T s) noexcept {
    scalar_ = s;
    has_scalar_input_ = true;
  }

 protected:
  virtual std::vector<tensor<T>> run_rule(const std::vector<tensor<T>>& saved, std::vector<tensor<T>>& grads) = 0;

 private:
  /// `apply` in a create_graph backward (defined in record.hpp, with the tape's recording).
  std::vector<tensor<T>> apply_with_graph(std::vector<tensor<T>>& grads);
  /// See `set_sums_to_inputs` (defined in record.hpp, with the recorded `sum_to`).
  void sum_to_inputs(std::vector<tensor<T>>& grads) const;
  /// Refuses freed or modified saved tensors (`mutex_` held).
  void check_saved() const {
    if (released_ && had_saved_)
      fail("backward", "trying to backward through ", name_,
           " a second time, but its saved tensors were freed by the first backward; "
           "expected backward(..., {.retain_graph = true}) on the first call");
    for (std::size_t i = 0; i < saved_.size(); ++i) {
      const auto& t = saved_[i];
      if (t.defined() && t.impl()->store && t.impl()->store->version() != versions_[i])
        fail("backward", "saved tensor ", i, " of ", name_, " (shape ", to_string(t.shape()),
             ") was modified in place after it was saved (version ", t.impl()->store->version(), "); expected version ",
             versions_[i], " - run backward before updating it");
    }
  }

  std::string_view name_;
  mutable light_mutex mutex_;  ///< guards `saved_` and `released_` (PyTorch's `Node::mutex_`)
  std::vector<tensor<T>> saved_;
  small_vector<std::uint64_t, 4> versions_;
  std::vector<int> output_slot_;  ///< per saved tensor: which output of this node it is, or -1 (empty: none)
  std::weak_ptr<node<T>> self_;
  bool double_backward_ = false;
  std::uint64_t params_ = 0;
  tensor<T> scalar_input_;  ///< set by compiled autograd's capture only (`exchange_scalar_input`)
  T scalar_{};
  bool has_scalar_input_ = false;
  bool had_saved_ = false;
  bool released_ = false;
  bool has_params_ = false;
  bool sums_to_inputs_ = false;
};

/// A node whose backward is a callable `rule(saved, grads) -> input grads`: the form every
/// built-in op and custom function takes on the eager tape. One class per element type: the
/// rule is held type-erased (in the node when it is small, as op rules are), so an op costs
/// the compiler two small functions (call and destroy its rule) instead of a node class with
/// its vtable, destructors and shared_ptr control block.
template <Element T>
class rule_node final : public saving_node<T> {
 public:
  template <class Rule>
  rule_node(std::string_view name, std::vector<tensor<T>> saved, Rule rule)
      : saving_node<T>(name, std::move(saved)), call_(&call<Rule>), drop_(&drop<Rule>) {
    if constexpr (inline_rule<Rule>) rule_ = ::new (static_cast<void*>(buf_)) Rule(std::move(rule));
    else rule_ = new Rule(std::move(rule));
  }
  rule_node(const rule_node&) = delete;
  rule_node& operator=(const rule_node&) = delete;
  ~rule_node() override { drop_(rule_); }

 private:
  /// Room in the node itself for the rules of the built-in ops (a reduction's: its input shape
  /// and dim mask, twice wrapped): a larger rule is allocated. The node with its control block
  /// stays in the pool's 1 KiB class (static_assert below).
  static constexpr std::size_t buffer = 256;
  template <class Rule>
  static constexpr bool inline_rule = sizeof(Rule) <= buffer && alignof(Rule) <= alignof(std::max_align_t);
  using call_fn = std::vector<tensor<T>> (*)(void*, const std::vector<tensor<T>>&, std::vector<tensor<T>>&);

  template <class Rule>
  static std::vector<tensor<T>> call(void* r, const std::vector<tensor<T>>& saved, std::vector<tensor<T>>& grads) {
    return (*static_cast<Rule*>(r))(saved, grads);
  }
  template <class Rule>
  static void drop(void* r) noexcept {
    if constexpr (inline_rule<Rule>) static_cast<Rule*>(r)->~Rule();
    else delete static_cast<Rule*>(r);
  }
  std::vector<tensor<T>> run_rule(const std::vector<tensor<T>>& saved, std::vector<tensor<T>>& grads) override {
    return call_(rule_, saved, grads);
  }

  alignas(std::max_align_t) unsigned char buf_[buffer];
  void* rule_ = nullptr;
  call_fn call_;
  void (*drop_)(void*) noexcept;
};
static_assert(sizeof(rule_node<double>) + 64 <= 1024,
              "fusegrad: a tape node with its shared_ptr control block must fit the pool's 1 KiB size class; "
              "shrink rule_node's inline buffer");

}  // namespace detail

template <Element T>
std::string tensor<T>::grad_fn_name() const {
  const auto& f = grad_fn();
  return f ? std::string(f->name()) : std::string();
}

}  // namespace fusegrad
