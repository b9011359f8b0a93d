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
  graph_root(std::vector<edge<T>> e, std::vector<tensor<T>> grads) : grads_(std::move(grads)) {
    this->set_next_edges(std::move(e));
  }
  [[nodiscard]] std::string_view name() const override { return "GraphRoot"; }
  std::vector<tensor<T>> apply(std::vector<tensor<T>>&) override { return grads_; }

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

/// Per-node bookkeeping of one backward pass (dependency counts, the gradient buffers), in an
/// open-addressing table keyed by node that a thread reuses from pass to pass: no hash-map
/// nodes allocated per node and pass. A hook that runs a backward of its own (nested passes
/// on one thread) gets the next table of the thread's stack.
template <Element T>
class engine_table {
 public:
  struct slot {
    node<T>* key = nullptr;
    std::size_t deps = 0;
    std::vector<tensor<T>> buffer;
  };
  /// Empties the slots the last pass used (their gradients released), keeping the capacity;
  /// a table grown by one huge pass shrinks back, so that later small passes stay cheap.
  void clear() {
    if (slots_.size() > 4096 && used_.size() * 8 < slots_.size()) {
      std::vector<slot>(64).swap(slots_);
      used_.clear();
      used_.shrink_to_fit();
    } else {
      if (slots_.empty()) slots_.resize(64);
      for (std::size_t i : used_) {
        slot& s = slots_[i];
        s.key = nullptr;
        s.deps = 0;
        s.buffer.clear();  // keeps its capacity
      }
      used_.clear();
    }
  }
  /// The slot of `n`, made on first use; `fresh` tells which.
  slot& at(node<T>* n, bool* fresh = nullptr) {
    if (2 * (used_.size() + 1) > slots_.size()) grow();
    const std::size_t i = probe(slots_, n);
    slot& s = slots_[i];
    if (fresh) *fresh = !s.key;
    if (!s.key) {
      s.key = n;
      used_.push_back(i);
    }
    return s;
  }

 private:
  static std::size_t probe(const std::vector<slot>& v, const node<T>* p) {
    const std::size_t mask = v.size() - 1;
    std::size_t i = static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & mask;
    while (v[i].key && v[i].key != p) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<slot> bigger(std::max<std::size_t>(64, slots_.size() * 2));
    std::vector<std::size_t> used;
    used.reserve(used_.size() * 2);
    for (std::size_t i : used_) {
      const std::size_t j = probe(bigger, slots_[i].key);
      bigger[j] = std::move(slots_[i]);
      used.push_back(j);
    }
    slots_.swap(bigger);
    used_.swap(used);
  }
  std::vector<slot> slots_;      ///< size a power of two
  std::vector<std::size_t> used_;  ///< indices of the slots in use
};

/// This thread's engine tables: one per nested backward pass.
template <Element T>
struct engine_tables {
  std::vector<std::unique_ptr<engine_table<T>>> stack;
  std::size_t depth = 0;
  /// The table of a new pass (released by `done`).
  engine_table<T>& acquire() {
    if (depth == stack.size()) stack.push_back(std::make_unique<engine_table<T>>());
    return *stack[depth++];
  }
  /// Ends the innermost pass: its slots are emptied (no gradient outlives its pass).
  void release() noexcept {
    stack[--depth]->clear();
  }
  static engine_tables& local() {
    thread_local engine_tables t;
    return t;
  }
};

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
  auto root = make_pooled<graph_root<T>>(std::move(root_edges), std::move(grads));

  // Count, for every reachable node, how many edges lead into it.
  auto& tables = engine_tables<T>::local();
  engine_table<T>& table = tables.acquire();
  struct release_table {
    engine_tables<T>& t;
    ~release_table() { t.release(); }
  } release{tables};
  thread_local std::vector<node<T>*> stack_buffer;
  std::vector<node<T>*> stack;
  stack.swap(stack_buffer);  // reused capacity; a nested pass gets an empty one
  stack.clear();
  stack.push_back(root.get());
  table.at(root.get());
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

  struct later_first {
    bool operator()(const std::shared_ptr<node<T>>& a, const std::shared_ptr<node<T>>& b) const {
      return a->sequence_nr() < b->sequence_nr();
    }
  };
  std::priority_queue<std::shared_ptr<node<T>>, std::vector<std::shared_ptr<node<T>>>, later_first> ready;
  ready.push(root);
  while (!ready.empty()) {
    std::shared_ptr<node<T>> n = ready.top();
    ready.pop();
    std::vector<tensor<T>> in = std::move(table.at(n.get()).buffer);
    in.resize(n->num_outputs());
    const bool any = n->num_outputs() == 0 ||
                     std::any_of(in.begin(), in.end(), [](const tensor<T>& t) { return t.defined(); });
    if (!any) {  // nothing flows into this node: nothing flows out of it either
      for (const auto& e : n->next_edges())
        if (e.valid() && --table.at(e.fn.get()).deps == 0) ready.push(e.fn);
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
        auto& buf = table.at(e.fn.get()).buffer;
        buf.resize(e.fn->num_outputs());
        auto& slot = buf[e.input_nr];
        if (!slot.defined()) slot = out[j];
        else slot = add_grads(slot, out[j]);
      }
      if (--table.at(e.fn.get()).deps == 0) ready.push(e.fn);
    }
  }
}

}  // namespace detail

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

}  // namespace fusegrad
