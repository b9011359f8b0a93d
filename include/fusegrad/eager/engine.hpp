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
#include <unordered_map>
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
