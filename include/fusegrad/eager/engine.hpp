#pragma once
/// \file fusegrad/eager/engine.hpp
/// The backward engine: runs a backward pass in reverse topological order (or hands it to
/// compiled autograd's runner), and `tensor::backward` / `fg::backward`.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <queue>
#include <cstdint>
#include <vector>

#include "fusegrad/eager/engine_table.hpp"
#include "fusegrad/eager/grad_journal.hpp"
#include "fusegrad/eager/grad_sum.hpp"
#include "fusegrad/eager/hooks.hpp"
#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/node.hpp"
#include "fusegrad/eager/record.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad {

namespace detail {

/// The root of a backward pass: hands the initial gradients to the roots' edges.
template <Element T>
class graph_root final : public node<T> {
 public:
  graph_root(typename node<T>::edge_list e, std::vector<tensor<T>> grads) : grads_(std::move(grads)) {
    this->set_next_edges(std::move(e));
  }
  [[nodiscard]] std::string_view name() const override { return "GraphRoot"; }
  /// Applied once: each pass makes its root.
  std::vector<tensor<T>> apply(std::vector<tensor<T>>&) override { return std::move(grads_); }

 private:
  std::vector<tensor<T>> grads_;
};

/// What runs a backward pass instead of the engine when compiled autograd is compiled in
/// (fusegrad/compiled_autograd/compiled_autograd.hpp installs it; it calls `run_engine` itself).
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

/// What a backward pass does besides computing: keep the graph, record the backward itself
/// (create_graph), and, for `fg::autograd::grad`, which gradient edges to capture instead of
/// accumulating into leaves (`captured[i]` receives the gradient flowing into `capture[i]`).
template <Element T>
struct pass_options {
  bool retain_graph = false;
  bool create_graph = false;
  const std::vector<edge<T>>* capture = nullptr;
  std::vector<tensor<T>>* captured = nullptr;
};

template <Element T>
void engine_pass(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads, const pass_options<T>& opt);

/// Marks (`slot::needed`) the nodes below `root` from which one of `capture`'s edges can be
/// reached: the only ones `fg::autograd::grad` runs.
template <Element T>
void mark_needed(engine_table<T>& table, node<T>* root, const std::vector<edge<T>>& capture) {
  thread_local std::vector<std::pair<node<T>*, std::size_t>> stack;
  stack.clear();
  stack.emplace_back(root, 0);
  table.at(root).needed = 0;
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    const auto& edges = n->next_edges();
    if (next < edges.size()) {
      node<T>* c = edges[next++].fn.get();
      if (!c) continue;
      if (table.at(c).needed == -1) {
        table.at(c).needed = 0;
        stack.emplace_back(c, 0);
      }
      continue;
    }
    bool needed = false;
    for (const auto& e : capture) needed = needed || e.fn.get() == n;
    for (const auto& e : edges) needed = needed || (e.fn && table.at(e.fn.get()).needed == 1);
    table.at(n).needed = needed ? 1 : 0;  // looked up again: a lookup may grow the table
    stack.pop_back();
  }
}

/// Hands the gradients flowing into `n` to the captured edges that point at it (after the
/// tensors' hooks, which the engine ran on them).
template <Element T>
void capture_into(node<T>& n, std::vector<tensor<T>>& in, const pass_options<T>& opt) {
  for (std::size_t i = 0; i < opt.capture->size(); ++i) {
    const auto& e = (*opt.capture)[i];
    if (e.fn.get() != &n || e.input_nr >= in.size() || !in[e.input_nr].defined()) continue;
    tensor<T> g = in[e.input_nr];
    if (n.accumulates())  // a leaf's own hooks, as a backward runs them
      if (auto leaf = static_cast<accumulate_grad<T>&>(n).variable(); leaf.defined())
        g = run_hooks(leaf.raw_impl()->leaf_hooks, std::move(g));
    (*opt.captured)[i] = std::move(g);
  }
}

/// PyTorch's engine, one thread: runs ready nodes latest-first.
template <Element T>
void run_engine(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads, bool retain_graph) {
  engine_pass<T>(roots, std::move(grads), pass_options<T>{retain_graph});
}

/// The roots' gradient edges, each root checked, and its gradient checked (created for a
/// one-element root without one).
template <Element T>
typename node<T>::edge_list root_edges(const std::vector<tensor<T>>& roots, std::vector<tensor<T>>& grads) {
  typename node<T>::edge_list edges;  // inline for one or two roots
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const auto& r = roots[i];
    edge<T> e = gradient_edge(r);
    if (!e.valid())
      fail("backward", "element ", i,
           " of tensors does not require grad and does not have a "
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
    edges.push_back(std::move(e));
  }
  return edges;
}

/// Sets grad mode for a pass (a create_graph backward records itself) and restores it after.
struct pass_grad_mode {
  bool was = is_grad_enabled();
  explicit pass_grad_mode(bool on) { set_grad_enabled(on); }
  pass_grad_mode(const pass_grad_mode&) = delete;
  pass_grad_mode& operator=(const pass_grad_mode&) = delete;
  ~pass_grad_mode() { set_grad_enabled(was); }
};

/// The engine table of this thread's pass, released after it.
template <Element T>
struct pass_table {
  engine_tables<T>& tables = engine_tables<T>::local();
  engine_table<T>& table = tables.acquire();
  pass_table() = default;
  pass_table(const pass_table&) = delete;
  pass_table& operator=(const pass_table&) = delete;
  ~pass_table() { tables.release(); }
};

/// Counts, for every node reachable from `root`, how many edges lead into it.
template <Element T>
void count_dependencies(engine_table<T>& table, node<T>* root) {
  thread_local std::vector<node<T>*> stack_buffer;
  std::vector<node<T>*> stack;
  stack.swap(stack_buffer);  // reused capacity; a nested pass gets an empty one
  stack.clear();
  stack.push_back(root);
  table.at(root);
  while (!stack.empty()) {
    node<T>* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next_edges()) {
      if (!e.valid()) continue;
      bool fresh = false;
      ++table.at(e.fn.get(), &fresh).deps;
      if (fresh) stack.push_back(e.fn.get());
    }
  }
  stack.swap(stack_buffer);
}

/// Whether `n` runs on the gradients `in` flowing into it: one of them is defined (or it has
/// no outputs), and for `fg::autograd::grad` (which first captures them) it is needed and no
/// AccumulateGrad.
template <Element T>
bool runs_node(node<T>& n, std::vector<tensor<T>>& in, const typename engine_table<T>::slot& own,
               const pass_options<T>& opt) {
  bool any = n.num_outputs() == 0 || std::any_of(in.begin(), in.end(), [](const tensor<T>& t) { return t.defined(); });
  if (opt.capture) [[unlikely]] {
    if (any) capture_into(n, in, opt);
    any = any && own.needed == 1 && !n.accumulates();
  }
  return any;
}

/// Fills the gradients a node materializes (zeros for absent ones), runs their pre-hooks
/// (unless the node applies them itself), and applies the node.
template <Element T>
std::vector<tensor<T>> apply_node(node<T>& n, std::vector<tensor<T>>& in) {
  for (std::size_t i = 0; i < n.num_outputs(); ++i) {
    if (!in[i].defined()) {
      if (!n.materialize_grads()) continue;  // absent: the node skips it
      in[i] = empty<T>(n.output_shape(i));
      fill(in[i], T(0));
    }
    if (!n.applies_hooks()) in[i] = run_hooks(n.pre_hooks(i), std::move(in[i]));
  }
  return n.apply(in);
}

/// Adds the gradients `out` that `n` returned into the buffers of the nodes its edges lead
/// to, and hands each node whose last dependency this was to `push_ready`.
template <Element T, class Push>
void pass_on(engine_table<T>& table, node<T>& n, std::vector<tensor<T>>& out, const Push& push_ready) {
  const auto& edges = n.next_edges();
  for (std::size_t j = 0; j < edges.size(); ++j) {
    const auto& e = edges[j];
    if (!e.valid()) continue;
    auto& next = table.find(e.fn.get());
    if (j < out.size() && out[j].defined()) {
      if (out[j].shape() != e.fn->output_shape(e.input_nr))
        fail("backward", n.name(), " returned a gradient of shape ", to_string(out[j].shape()), " for its input ", j,
             "; expected ", to_string(e.fn->output_shape(e.input_nr)));
      auto& buf = next.buffer;
      buf.resize(e.fn->num_outputs());
      auto& slot = buf[e.input_nr];
      if (!slot.defined()) slot = std::move(out[j]);
      else slot = add_grads(slot, out[j]);
    }
    if (--next.deps == 0) push_ready(e.fn);
  }
}

/// Runs the ready nodes from `root` on, latest first, each once all the edges into it have
/// handed it their gradients.
template <Element T>
void run_ready_nodes(engine_table<T>& table, std::shared_ptr<node<T>> root, const pass_options<T>& opt) {
  const bool retain_graph = opt.retain_graph || opt.create_graph;
  struct later_first {
    bool operator()(const std::shared_ptr<node<T>>& a, const std::shared_ptr<node<T>>& b) const {
      return a->sequence_nr() < b->sequence_nr();
    }
  };
  // The ready nodes, latest first (a binary heap, as std::priority_queue keeps it), in a vector
  // whose capacity the thread reuses, as the gradient buffers keep theirs in the table: a pass
  // allocates no bookkeeping once the thread has run one of its size.
  thread_local std::vector<std::shared_ptr<node<T>>> ready_buffer;
  std::vector<std::shared_ptr<node<T>>> ready;
  ready.swap(ready_buffer);  // a nested pass gets an empty one
  ready.clear();
  auto push_ready = [&ready](std::shared_ptr<node<T>> r) {
    ready.push_back(std::move(r));
    std::push_heap(ready.begin(), ready.end(), later_first{});
  };
  push_ready(std::move(root));
  std::vector<tensor<T>> in;
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), later_first{});
    std::shared_ptr<node<T>> n = std::move(ready.back());
    ready.pop_back();
    auto& own = table.find(n.get());
    in.swap(own.buffer);  // the slot's buffer, given back below with its capacity
    in.resize(n->num_outputs());
    if (!runs_node(*n, in, own, opt)) {  // nothing flows into this node (or nothing is asked of it): nothing flows out
      in.clear();
      in.swap(own.buffer);
      for (const auto& e : n->next_edges())
        if (e.valid() && --table.find(e.fn.get()).deps == 0) push_ready(e.fn);
      continue;
    }
    std::vector<tensor<T>> out = apply_node(*n, in);
    in.clear();
    in.swap(own.buffer);
    if (!retain_graph) n->release_saved();
    pass_on(table, *n, out, push_ready);
  }
  ready.swap(ready_buffer);
}

/// One backward pass: the roots' edges under a graph root, the dependency count of every
/// node below it (and, for `fg::autograd::grad`, which are needed), then the ready nodes run.
/// The gradients written into leaves are kept only if the whole pass succeeds.
template <Element T>
void engine_pass(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads, const pass_options<T>& opt) {
  grad_transaction<T> all_or_nothing;  // (grad_journal.hpp; compiled autograd's runner opens its own)
  typename node<T>::edge_list edges = root_edges(roots, grads);
  pass_grad_mode mode(opt.create_graph);
  auto root = make_pooled<graph_root<T>>(std::move(edges), std::move(grads));
  pass_table<T> pass;
  count_dependencies(pass.table, root.get());
  // fg::autograd::grad: only the nodes from which a captured edge can be reached run, and
  // no AccumulateGrad does (nothing is written into .grad()).
  if (opt.capture) mark_needed(pass.table, root.get(), *opt.capture);
  run_ready_nodes<T>(pass.table, root, opt);
}

}  // namespace detail

template <Element T>
void tensor<T>::backward(const tensor& gradient, backward_options opts) const {
  checked("backward");
  if (opts.create_graph) [[unlikely]]  // the eager engine, recording (compiled autograd does not capture it)
    return detail::engine_pass<T>({*this}, {gradient}, detail::pass_options<T>{opts.retain_graph, true});
  detail::run_backward<T>({*this}, {gradient}, opts.retain_graph);
}

template <Element T>
void backward(const std::vector<tensor<T>>& outputs, const std::vector<tensor<T>>& grads = {},
              backward_options opts = {}) {
  std::vector<tensor<T>> g = grads;
  if (g.empty()) g.resize(outputs.size());
  if (g.size() != outputs.size())
    detail::fail("backward", "got ", g.size(), " gradients for ", outputs.size(), " outputs; expected one per output");
  if (opts.create_graph) [[unlikely]]
    return detail::engine_pass<T>(outputs, std::move(g), detail::pass_options<T>{opts.retain_graph, true});
  detail::run_backward<T>(outputs, std::move(g), opts.retain_graph);
}

/// `fg::backward({y1, y2})`.
template <Element T>
void backward(std::initializer_list<tensor<T>> outputs, std::initializer_list<tensor<T>> grads = {},
              backward_options opts = {}) {
  backward(std::vector<tensor<T>>(outputs), std::vector<tensor<T>>(grads), opts);
}

namespace autograd {

/// Options of `fg::autograd::grad` (PyTorch's `torch.autograd.grad`).
struct grad_options {
  bool retain_graph = false;  ///< keep the graph for another backward (implied by create_graph)
  bool create_graph = false;  ///< record the backward: the gradients have a history (double backward)
  bool allow_unused = false;  ///< an input the outputs do not depend on gets an undefined gradient
};

/// The gradients of `outputs` (seeded with `grad_outputs`; implicit ones for one-element
/// outputs when empty) with respect to `inputs`, returned rather than accumulated into
/// `.grad()`. With `create_graph` they are on the tape themselves, so code such as a
/// gradient penalty or a Newton step differentiates them again.
template <Element T>
std::vector<tensor<T>> grad(const std::vector<tensor<T>>& outputs, const std::vector<tensor<T>>& inputs,
                            const std::vector<tensor<T>>& grad_outputs, grad_options o) {
  if (outputs.empty()) detail::fail("autograd::grad", "got no outputs; expected at least one");
  std::vector<tensor<T>> g = grad_outputs;
  if (g.empty()) g.resize(outputs.size());
  if (g.size() != outputs.size())
    detail::fail("autograd::grad", "got ", g.size(), " grad_outputs for ", outputs.size(),
                 " outputs; expected one per output");
  std::vector<edge<T>> capture;
  capture.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) detail::fail("autograd::grad", "input ", i, " is undefined; expected a tensor");
    if (!inputs[i].requires_grad())
      detail::fail("autograd::grad", "input ", i, " (shape ", to_string(inputs[i].shape()),
                   ") does not require grad; expected inputs with requires_grad(true)");
    capture.push_back(detail::gradient_edge(inputs[i]));
  }
  std::vector<tensor<T>> captured(inputs.size());
  detail::engine_pass<T>(outputs, std::move(g),
                         detail::pass_options<T>{o.retain_graph, o.create_graph, &capture, &captured});
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!captured[i].defined() && !o.allow_unused)
      detail::fail("autograd::grad", "input ", i, " (shape ", to_string(inputs[i].shape()),
                   ") was not used to compute the outputs; expected inputs the outputs depend on, "
                   "or allow_unused = true");
  return captured;
}
template <Element T>
std::vector<tensor<T>> grad(const std::vector<tensor<T>>& outputs, const std::vector<tensor<T>>& inputs,
                            grad_options o = {}) {
  return grad(outputs, inputs, std::vector<tensor<T>>{}, o);
}
/// `fg::autograd::grad({y1, y2}, {x, w}, {.create_graph = true})`.
template <Element T>
std::vector<tensor<T>> grad(std::initializer_list<tensor<T>> outputs, std::initializer_list<tensor<T>> inputs,
                            grad_options o = {}) {
  return grad(std::vector<tensor<T>>(outputs), std::vector<tensor<T>>(inputs), std::vector<tensor<T>>{}, o);
}
template <Element T>
std::vector<tensor<T>> grad(std::initializer_list<tensor<T>> outputs, std::initializer_list<tensor<T>> inputs,
                            std::initializer_list<tensor<T>> grad_outputs, grad_options o = {}) {
  return grad(std::vector<tensor<T>>(outputs), std::vector<tensor<T>>(inputs), std::vector<tensor<T>>(grad_outputs), o);
}
/// One output, one input: `fg::autograd::grad(y, x, {.create_graph = true})`.
template <Element T>
tensor<T> grad(const tensor<T>& output, const tensor<T>& input, grad_options o = {}) {
  return grad(std::vector<tensor<T>>{output}, std::vector<tensor<T>>{input}, std::vector<tensor<T>>{}, o)[0];
}

}  // namespace autograd

}  // namespace fusegrad
