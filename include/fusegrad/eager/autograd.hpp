#pragma once
/// \file fusegrad/eager/autograd.hpp
/// The tape: autograd nodes, gradient edges, AccumulateGrad, tensor hooks, and the engine
/// that runs a backward pass in reverse topological order.

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <new>
#include <queue>
#include <unordered_map>

#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/ir/op_table.hpp"

namespace fusegrad {

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
    auto take = [&dying](std::vector<edge<T>>& edges) {
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
  /// Computes input gradients from output gradients (`grads[i]` has `output_shape(i)`).
  /// An undefined entry in the result means "no gradient for that input".
  virtual std::vector<tensor<T>> apply(std::vector<tensor<T>>& grads) = 0;
  /// Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}
  /// The tensors this node saved for backward (empty once released).
  [[nodiscard]] virtual std::vector<tensor<T>> saved_tensors() const { return {}; }

  [[nodiscard]] const std::vector<edge<T>>& next_edges() const noexcept { return edges_; }
  [[nodiscard]] std::size_t num_outputs() const noexcept { return output_shapes_.size(); }
  [[nodiscard]] const shape& output_shape(std::size_t i) const { return output_shapes_.at(i); }
  /// Creation order; the engine runs later nodes first.
  [[nodiscard]] std::uint64_t sequence_nr() const noexcept { return sequence_nr_; }
  /// Hooks run on the gradient of output `i` before `apply` (non-leaf tensor hooks).
  [[nodiscard]] std::vector<hook<T>>& pre_hooks(std::size_t i) { return pre_hooks_.at(i); }

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

  void set_next_edges(std::vector<edge<T>> e) { edges_ = std::move(e); }
  void add_output(shape s) {
    output_shapes_.push_back(std::move(s));
    pre_hooks_.emplace_back();
  }

 private:
  std::vector<edge<T>> edges_;
  std::vector<shape> output_shapes_;
  std::vector<std::vector<hook<T>>> pre_hooks_;
  std::uint64_t sequence_nr_;
  bool materialize_grads_ = true;
  bool applies_hooks_ = false;
};

namespace detail {

/// a + b, element-wise: how gradients are summed.
struct accumulate_values {
  template <class V> V value(const V& a, const V& b) const { return a + b; }
};

/// a + b for gradients: computed, or recorded when a tracer is active (compiled autograd).
template <Element T>
tensor<T> add_grads(const tensor<T>& a, const tensor<T>& b) {
  if (auto* r = active_recorder<T>()) [[unlikely]]
    return r->pointwise(ir::op_index<ops::add_op, T>, T{}, a, &b);
  return zip("backward", accumulate_values{}, a, b);
}

/// Runs `h` on `g` and checks that a replacement keeps the shape.
template <Element T>
tensor<T> apply_hook(const hook<T>& h, tensor<T> g) {
  std::optional<tensor<T>> r = h.fn(g);
  if (!r) return g;
  if (!r->defined() || r->shape() != g.shape())
    fail("register_hook", "hook ", h.id, " returned a gradient of shape ",
         r->defined() ? to_string(r->shape()) : std::string("<undefined>"),
         "; expected the incoming gradient's shape ", to_string(g.shape()));
  return *r;
}

/// Runs hook `h` on gradient `g`; in a traced backward (compiled autograd), records it as a
/// `call_hook` node instead, unless it is generic and is traced like any other code.
template <Element T>
tensor<T> run_hook(const hook<T>& h, tensor<T> g) {
  if (!h.traced)
    if (auto* r = active_recorder<T>()) [[unlikely]]
      return r->call(true, "hook", g.shape(), [h](const tensor<T>& v, const tensor<T>&) { return apply_hook(h, v); }, g, nullptr);
  return apply_hook(h, std::move(g));
}

/// Puts the hooks of one tensor in the order they run, as PyTorch (>= 2.0) does: registration
/// order, except that `retain_grad`'s hook runs last, after every other hook. `hook_of(x)`:
/// the hook of element `x` (the one place of the rule; the eager engine and fg::jit's
/// captured backwards both order with it).
template <class It, class HookOf>
void order_hooks(It first, It last, HookOf hook_of) {
  std::stable_partition(first, last, [&](const auto& x) { return !hook_of(x).retains_grad; });
}

/// Runs the hooks `hs` on `g` in order (`order_hooks`), over a snapshot of the list: a hook
/// that registers or removes hooks (itself included) changes the list for the next backward,
/// not the running one, as in PyTorch; the copies share each hook's callable, which stays
/// alive while it runs.
template <Element T>
tensor<T> run_hooks(const std::vector<hook<T>>& hs, tensor<T> g) {
  if (hs.empty()) return g;
  std::vector<hook<T>> snapshot = hs;
  order_hooks(snapshot.begin(), snapshot.end(), [](const hook<T>& h) -> const hook<T>& { return h; });
  for (const auto& h : snapshot) g = run_hook(h, std::move(g));
  return g;
}

/// `f(a, b)` (`b` may be undefined): computed now, or, in a traced backward where an operand
/// is lazy, recorded as an opaque `call` node of shape `out` that runs `f` on the values (how
/// the backwards of matmul and views stay inside one captured graph).
template <Element T, class F>
tensor<T> call_opaque(std::string_view name, const shape& out, F f, const tensor<T>& a, const tensor<T>& b = {}) {
  if (auto* r = active_recorder<T>()) [[unlikely]]
    if (a.is_lazy() || b.is_lazy())
      return r->call(false, name, out, std::move(f), a, b.defined() ? &b : nullptr);
  return f(a, b);
}

/// Whether nothing but `g` refers to its values: a fresh, dense, owned buffer that a leaf's
/// `.grad()` can take over instead of copying (PyTorch's AccumulateGrad steals such grads).
template <Element T>
bool owned_alone(const tensor<T>& g) {
  const auto& i = g.impl();
  return i && i.use_count() == 1 && !i->grad_fn && i->store && i->store.use_count() == 1 && i->store->owned() &&
         i->offset == 0 && static_cast<std::size_t>(g.numel()) == i->store->size() && g.is_contiguous();
}

/// The node that accumulates into a leaf's `.grad()`; runs the leaf's hooks first.
template <Element T>
class accumulate_grad final : public node<T> {
 public:
  explicit accumulate_grad(const std::shared_ptr<tensor_impl<T>>& leaf) : leaf_(leaf) {
    this->add_output(leaf->sizes);
  }
  [[nodiscard]] std::string_view name() const override { return "AccumulateGrad"; }
  std::vector<tensor<T>> apply(std::vector<tensor<T>>& grads) override {
    auto leaf = leaf_.lock();
    if (!leaf) return {};
    tensor<T> g = run_hooks(leaf->leaf_hooks, std::move(grads.at(0)));
    // Concurrent backwards into one leaf take turns (the hooks above ran unlocked).
    std::lock_guard lock(leaf->mutex);
    if (g.is_lazy()) {  // a traced backward: the gradient is a value of the captured graph
      auto* r = active_recorder<T>();
      if (leaf->grad.defined()) leaf->grad = add_grads(leaf->grad, g);
      else if (g.raw_impl().use_count() == 1 || !r) leaf->grad = std::move(g);
      else leaf->grad = r->pointwise(ir::op_index<ops::mul_scalar_op<T>, T>, T(1), g, nullptr);  // its own copy
      if (r) r->accumulate_grad(leaf->grad);
    } else if (!leaf->grad.defined()) {
      leaf->grad = owned_alone(g) ? std::move(g) : contiguous_copy(g);
    } else {
      leaf->grad = zip("AccumulateGrad", accumulate_values{}, leaf->grad, g);
    }
    return {};
  }
  /// The leaf this node accumulates into (null if it has been destroyed).
  [[nodiscard]] tensor<T> variable() const {
    auto l = leaf_.lock();
    return l ? tensor<T>(l) : tensor<T>{};
  }

 private:
  std::weak_ptr<tensor_impl<T>> leaf_;
};

/// The root of a backward pass: hands the initial gradients to the roots' edges.
template <Element T>
class graph_root final : public node<T> {
 public:
  graph_root(std::vector<edge<T>> e, std::vector<tensor<T>> grads) : grads_(std::move(grads)) {
    this->set_next_edges(std::move(e));
  }
  [[nodiscard]] std::string_view name() const override { return "GraphRoot"; }
  std::vector<tensor<T>> apply(std::vector<tensor<T>>&) override { return grads_; }

 private:
  std::vector<tensor<T>> grads_;
};

/// What every op's tape node does besides calling its rule: it keeps the saved tensors and
/// their versions, refuses a second backward after they were freed and saved tensors that
/// were modified in place. One class per element type, whatever the op.
template <Element T>
class saving_node : public node<T> {
 public:
  saving_node(std::string_view name, std::vector<tensor<T>> saved) : name_(name), saved_(std::move(saved)) {
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
    if (released_ && had_saved_)
      fail("backward", "trying to backward through ", name_,
           " a second time, but its saved tensors were freed by the first backward; "
           "expected backward(..., {.retain_graph = true}) on the first call");
    for (std::size_t i = 0; i < saved_.size(); ++i) {
      const auto& t = saved_[i];
      if (t.defined() && t.impl()->store && t.impl()->store->version() != versions_[i])
        fail("backward", "saved tensor ", i, " of ", name_, " (shape ", to_string(t.shape()),
             ") was modified in place after it was saved (version ", t.impl()->store->version(),
             "); expected version ", versions_[i], " - run backward before updating it");
    }
    return run_rule(saved_, grads);
  }
  /// Frees the saved tensors; their slots stay, undefined, for the rule of a node that saved
  /// nothing and may run again.
  void release_saved() override {
    std::vector<tensor<T>> freed;  // freed after the lock is released
    std::lock_guard lock(mutex_);
    released_ = true;
    freed.reserve(saved_.size());
    for (auto& t : saved_)
      if (t.defined()) freed.push_back(std::move(t));
  }
  [[nodiscard]] std::vector<tensor<T>> saved_tensors() const override {
    std::lock_guard lock(mutex_);
    return released_ ? std::vector<tensor<T>>{} : saved_;
  }

 protected:
  virtual std::vector<tensor<T>> run_rule(const std::vector<tensor<T>>& saved, std::vector<tensor<T>>& grads) = 0;

 private:
  std::string_view name_;
  mutable std::mutex mutex_;  ///< guards `saved_` and `released_` (PyTorch's `Node::mutex_`)
  std::vector<tensor<T>> saved_;
  std::vector<std::uint64_t> versions_;
  bool had_saved_ = false;
  bool released_ = false;
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
  static constexpr std::size_t buffer = 80;
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

/// The AccumulateGrad node of a leaf that requires grad (made on first use, then reused).
template <Element T>
std::shared_ptr<node<T>> grad_accumulator(const tensor<T>& leaf) {
  auto& impl = *leaf.impl();
  std::lock_guard lock(impl.mutex);  // two threads' forwards may use one leaf
  if (!impl.grad_accumulator) impl.grad_accumulator = std::make_shared<accumulate_grad<T>>(leaf.impl());
  return impl.grad_accumulator;
}

/// Where the gradient of `t` must flow: its producer, its AccumulateGrad, or nowhere.
template <Element T>
edge<T> gradient_edge(const tensor<T>& t) {
  if (!t.defined()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  if (t.requires_grad()) return {grad_accumulator(t), 0};
  return {};
}

/// True when an op on these inputs must record a node.
template <Element T, class... Ts>
bool needs_grad(const tensor<T>& first, const Ts&... rest) {
  if (!is_grad_enabled()) return false;
  return (first.defined() && first.requires_grad()) || ((rest.defined() && rest.requires_grad()) || ...);
}
template <Element T>
bool needs_grad(const std::vector<tensor<T>>& ts) {
  if (!is_grad_enabled()) return false;
  return std::any_of(ts.begin(), ts.end(), [](const auto& t) { return t.defined() && t.requires_grad(); });
}

/// Puts node `n` on the tape: one edge per input, producing `outputs` (one function per
/// element type, whatever the node).
template <Element T>
std::shared_ptr<node<T>> attach(std::shared_ptr<node<T>> n, const std::vector<tensor<T>>& inputs,
                                const std::vector<tensor<T>*>& outputs) {
  std::vector<edge<T>> e;
  e.reserve(inputs.size());
  for (const auto& in : inputs) e.push_back(gradient_edge(in));
  n->set_next_edges(std::move(e));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    auto& impl = *outputs[i]->impl();
    impl.grad_fn = n;
    impl.output_nr = i;
    impl.requires_grad = true;
    n->add_output(impl.sizes);
  }
  return n;
}

/// Saved tensors as detached aliases (saving an output makes no reference cycle).
template <Element T>
std::vector<tensor<T>> detached(std::vector<tensor<T>> saved) {
  for (auto& s : saved)
    if (s.defined()) s = s.detach();
  return saved;
}

/// Records `name` on the tape: a node with one edge per input, saving `saved` (held as
/// detached aliases so saving an output makes no reference cycle), producing `outputs`.
template <Element T, class Rule>
std::shared_ptr<node<T>> record(std::string_view name, const std::vector<tensor<T>>& inputs,
                                const std::vector<tensor<T>*>& outputs,
                                std::vector<tensor<T>> saved, Rule rule) {
  return attach<T>(std::make_shared<rule_node<T>>(name, detached(std::move(saved)), std::move(rule)), inputs,
                   outputs);
}

/// What runs a backward pass instead of the engine when compiled autograd is compiled in
/// (fusegrad/jit/compiled_autograd.hpp installs it; it calls `run_engine` itself).
template <Element T>
using backward_runner = void (*)(const std::vector<tensor<T>>&, std::vector<tensor<T>>, bool);
template <Element T>
inline std::atomic<backward_runner<T>>& compiled_backward_runner() noexcept {
  static std::atomic<backward_runner<T>> r{nullptr};
  return r;
}

template <Element T>
void run_engine(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads, bool retain_graph);

/// Runs the backward pass from `roots` seeded with `grads`: the engine, or compiled autograd.
template <Element T>
void run_backward(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads, bool retain_graph) {
  if (auto r = compiled_backward_runner<T>().load(std::memory_order_acquire)) [[unlikely]]
    return r(roots, std::move(grads), retain_graph);
  run_engine(roots, std::move(grads), retain_graph);
}

/// PyTorch's engine, one thread: runs ready nodes latest-first.
template <Element T>
void run_engine(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads,
                bool retain_graph) {
  std::vector<edge<T>> root_edges;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const auto& r = roots[i];
    edge<T> e = gradient_edge(r);
    if (!e.valid())
      fail("backward", "element ", i, " of tensors does not require grad and does not have a "
           "grad_fn; expected a tensor computed from inputs with requires_grad(true)");
    if (!grads[i].defined()) {
      if (r.numel() != 1)
        fail("backward", "grad can be implicitly created only for one-element outputs, got shape ",
             to_string(r.shape()), "; expected backward(gradient) with a gradient of that shape");
      grads[i] = empty<T>(r.shape());
      fill(grads[i], T(1));
    } else if (grads[i].shape() != r.shape()) {
      fail("backward", "gradient has shape ", to_string(grads[i].shape()), " but the output has shape ",
           to_string(r.shape()), "; expected equal shapes");
    }
    root_edges.push_back(std::move(e));
  }
  no_grad guard;
  auto root = std::make_shared<graph_root<T>>(std::move(root_edges), std::move(grads));

  // Count, for every reachable node, how many edges lead into it.
  std::unordered_map<node<T>*, std::size_t> deps;
  std::vector<node<T>*> stack{root.get()};
  std::unordered_map<node<T>*, bool> seen{{root.get(), true}};
  while (!stack.empty()) {
    node<T>* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    }
  }

  struct later_first {
    bool operator()(const std::shared_ptr<node<T>>& a, const std::shared_ptr<node<T>>& b) const {
      return a->sequence_nr() < b->sequence_nr();
    }
  };
  std::priority_queue<std::shared_ptr<node<T>>, std::vector<std::shared_ptr<node<T>>>, later_first> ready;
  std::unordered_map<node<T>*, std::vector<tensor<T>>> buffers;
  ready.push(root);
  while (!ready.empty()) {
    std::shared_ptr<node<T>> n = ready.top();
    ready.pop();
    std::vector<tensor<T>> in = std::move(buffers[n.get()]);
    buffers.erase(n.get());
    in.resize(n->num_outputs());
    const bool any = n->num_outputs() == 0 ||
                     std::any_of(in.begin(), in.end(), [](const tensor<T>& t) { return t.defined(); });
    if (!any) {  // nothing flows into this node: nothing flows out of it either
      for (const auto& e : n->next_edges())
        if (e.valid() && --deps[e.fn.get()] == 0) ready.push(e.fn);
      continue;
    }
    for (std::size_t i = 0; i < n->num_outputs(); ++i) {
      if (!in[i].defined()) {
        if (!n->materialize_grads()) continue;  // absent: the node skips it
        in[i] = empty<T>(n->output_shape(i));
        fill(in[i], T(0));
      }
      if (!n->applies_hooks()) in[i] = run_hooks(n->pre_hooks(i), std::move(in[i]));
    }
    std::vector<tensor<T>> out = n->apply(in);
    if (!retain_graph) n->release_saved();
    const auto& edges = n->next_edges();
    for (std::size_t j = 0; j < edges.size(); ++j) {
      const auto& e = edges[j];
      if (!e.valid()) continue;
      if (j < out.size() && out[j].defined()) {
        if (out[j].shape() != e.fn->output_shape(e.input_nr))
          fail("backward", n->name(), " returned a gradient of shape ", to_string(out[j].shape()),
               " for its input ", j, "; expected ", to_string(e.fn->output_shape(e.input_nr)));
        auto& buf = buffers[e.fn.get()];
        buf.resize(e.fn->num_outputs());
        auto& slot = buf[e.input_nr];
        if (!slot.defined()) slot = out[j];
        else slot = add_grads(slot, out[j]);
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn);
    }
  }
}

}  // namespace detail

template <Element T>
std::string tensor<T>::grad_fn_name() const {
  const auto& f = grad_fn();
  return f ? std::string(f->name()) : std::string();
}

template <Element T>
void tensor<T>::backward(const tensor& gradient, backward_options opts) const {
  checked("backward");
  detail::run_backward<T>({*this}, {gradient}, opts.retain_graph);
}

template <Element T>
void backward(const std::vector<tensor<T>>& outputs, const std::vector<tensor<T>>& grads = {},
              backward_options opts = {}) {
  std::vector<tensor<T>> g = grads;
  if (g.empty()) g.resize(outputs.size());
  if (g.size() != outputs.size())
    detail::fail("backward", "got ", g.size(), " gradients for ", outputs.size(),
                 " outputs; expected one per output");
  detail::run_backward<T>(outputs, std::move(g), opts.retain_graph);
}

/// `fg::backward({y1, y2})`.
template <Element T>
void backward(std::initializer_list<tensor<T>> outputs, std::initializer_list<tensor<T>> grads = {},
              backward_options opts = {}) {
  backward(std::vector<tensor<T>>(outputs), std::vector<tensor<T>>(grads), opts);
}

namespace detail {

/// Puts hook `h` on tensor `t` (which requires grad): into the captured graph of the fg::jit
/// trace that `t` is pending in, else onto the tape (its grad_fn's output slot, or the leaf).
template <Element T>
void install_hook(const tensor<T>& t, hook<T> h) {
  auto& i = *t.raw_impl();  // defined: the callers checked
  if (i.lazy) [[unlikely]] {  // traced by fg::jit: the hook joins the captured graph's backward
    if (auto* r = active_recorder<T>(); r && r->add_hook(t, h)) return;
    i.lazy->realize("register_hook");  // another trace's tensor: computed, then hooked as usual
  }
  if (i.grad_fn) i.grad_fn->pre_hooks(i.output_nr).push_back(std::move(h));
  else i.leaf_hooks.push_back(std::move(h));
}

}  // namespace detail

template <Element T>
template <TensorHook<T> F>
std::uint64_t tensor<T>::register_hook(F&& f) {
  auto& i = checked("register_hook");
  if (!i.requires_grad)
    detail::fail("register_hook", "cannot register a hook on a tensor that does not require "
                 "grad; expected requires_grad(true) or a result of such a tensor");
  hook<T> h{detail::next_id(), {}, generic_callable<F>};
  // Held by shared_ptr: the snapshots that run hooks (and compiled autograd's call nodes)
  // share one callable, its state included, which a hook removing itself cannot free early.
  auto g = std::make_shared<std::decay_t<F>>(std::forward<F>(f));
  if constexpr (std::is_void_v<std::invoke_result_t<F&, const tensor<T>&>>) {
    h.fn = [g](const tensor<T>& t) -> std::optional<tensor<T>> {
      (*g)(t);
      return std::nullopt;
    };
  } else {
    h.fn = [g](const tensor<T>& t) -> std::optional<tensor<T>> { return std::optional<tensor<T>>((*g)(t)); };
  }
  const auto id = h.id;
  detail::install_hook(*this, std::move(h));
  return id;
}

template <Element T>
bool tensor<T>::remove_hook(std::uint64_t id) {
  auto& i = checked("remove_hook");
  if (i.lazy) [[unlikely]] {
    bool removed = false;
    if (auto* r = detail::active_recorder<T>(); r && r->remove_hook(*this, id, removed)) return removed;
    i.lazy->realize("remove_hook");
  }
  auto& hs = i.grad_fn ? i.grad_fn->pre_hooks(i.output_nr) : i.leaf_hooks;
  const auto it = std::find_if(hs.begin(), hs.end(), [&](const auto& h) { return h.id == id; });
  if (it == hs.end()) return false;
  hs.erase(it);
  return true;
}

template <Element T>
void tensor<T>::retain_grad() {
  auto& i = checked("retain_grad");
  if (!i.grad_fn && !(i.lazy && i.requires_grad)) return;  // leaves keep their gradient anyway
  if (i.retains_grad) return;
  i.retains_grad = true;
  std::weak_ptr<detail::tensor_impl<T>> self = impl_;
  hook<T> h{detail::next_id(), [self](const tensor<T>& g) -> std::optional<tensor<T>> {
              if (auto s = self.lock()) {
                std::lock_guard lock(s->mutex);  // concurrent backwards through this tensor
                s->grad = s->grad.defined() ? detail::zip("retain_grad", detail::accumulate_values{}, s->grad, g)
                                            : detail::contiguous_copy(g);
              }
              return std::nullopt;
            }};
  h.retains_grad = true;  // runs after the tensor's other hooks, whenever they were registered
  detail::install_hook(*this, std::move(h));
}

}  // namespace fusegrad
