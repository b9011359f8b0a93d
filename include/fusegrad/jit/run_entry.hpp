#pragma once
/// \file fusegrad/jit/run_entry.hpp
/// Running a compiled cache entry of `fg::jit` on its inputs: the forward program, the
/// outputs' values handed to their tensors, and the `CompiledFunctionBackward` node recorded
/// on the tape, whose rule runs the entry's backward program. A sync point runs an entry so
/// (flush.hpp), and so does a `trace_once` call that replays its trace (replay.hpp).

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "fusegrad/core/reused_vector.hpp"
#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/views.hpp"
#include "fusegrad/ir/backward.hpp"
#include "fusegrad/jit/compile_entry.hpp"
#include "fusegrad/jit/entry.hpp"
#include "fusegrad/jit/program.hpp"

namespace fusegrad::detail::jit {

/// Gives lazy tensor `dst` the value (and history) of tensor `computed`. A lazy tensor claims contiguous strides from
/// the start, so a value computed as a view (node by node, eagerly) is copied to keep that promise.
template <Element T>
void adopt(tensor_impl<T>& dst, const tensor<T>& computed) {
  const tensor<T> src = fusegrad::contiguous(computed);  // (a clone on the tape when it needs grad)
  const auto& s = *src.impl();
  dst.store = s.store;
  dst.offset = s.offset;
  dst.st = s.st;
  dst.sizes = s.sizes;
  dst.grad_fn = s.grad_fn;
  dst.output_nr = s.output_nr;
  dst.requires_grad = s.requires_grad;
  dst.lazy = nullptr;
  dst.lazy_node = -1;
}

/// Runs entry `e` on `inputs` (`jshapes`: a dynamic entry's node shapes for them, null for a
/// static entry), with the call slots' functions `calls` and the call's tensor hooks `hooks`
/// (node, hook): output `p` of the entry goes to `targets[p]`, and when the entry has a
/// backward, one `CompiledFunctionBackward` node joins the targets to the inputs on the tape.
/// Recording is paused by the caller (the programs' eager steps must compute, not trace).
template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the call with its backward rule's lambda
void run_entry(const std::shared_ptr<const entry<T>>& e, const std::vector<tensor<T>>& inputs,
               std::shared_ptr<const std::vector<shape>> jshapes, const std::vector<ir::call_fn<T>>& calls,
               const std::vector<std::pair<int, hook<T>>>& hooks,
               const std::vector<std::shared_ptr<tensor_impl<T>>>& targets) {
  std::vector<shape> fwd_shapes;
  if (jshapes) fwd_shapes.assign(jshapes->begin(), jshapes->begin() + static_cast<std::ptrdiff_t>(e->fwd_graph.size()));
  std::vector<tensor<T>> res = e->fwd->run(inputs, jshapes ? &fwd_shapes : nullptr, &calls);
  const std::size_t n_out = e->outputs.size();
  for (std::size_t p = 0; p < n_out; ++p) adopt(*targets[p], res[p]);
  if (e->bwd) {
    std::vector<tensor<T>> saved(res.begin() + static_cast<std::ptrdiff_t>(n_out), res.end());
    // The outputs the node is recorded on (the thread's buffers: no allocation per call).
    struct grad_out_list;
    struct grad_out_ptrs;
    reused_vector<tensor<T>, grad_out_list> grad_outs;
    reused_vector<tensor<T>*, grad_out_ptrs> out_ptrs;
    for (int p : e->grad_outputs) grad_outs->emplace_back(targets[static_cast<std::size_t>(p)]);
    for (auto& t : *grad_outs) out_ptrs->push_back(&t);
    const std::size_t n_in = inputs.size();
    // This call's hooks (the graph's, by slot); hooks registered later on its outputs join
    // them in the backward, on each output's whole gradient (`set_applies_hooks`).
    auto graph_hooks = hooks.empty() ? nullptr : std::make_shared<const std::vector<std::pair<int, hook<T>>>>(hooks);
    auto self = std::make_shared<node<T>*>(nullptr);  // the node: the rule lives in it
    // The engine leaves the gradient of an output nothing used undefined (no zeros): the
    // backward of the outputs that received one runs instead (`backward_for`).
    const auto n = record<T>(
        "CompiledFunctionBackward", inputs, *out_ptrs, std::move(saved),
        // NOLINTNEXTLINE(readability-function-cognitive-complexity): the backward rule; not yet split
        [e, jshapes, n_in, graph_hooks, self](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& grads) {
          // The program's inputs and which gradients came (the thread's buffers; a
          // backward nested in this one, from a hook, gets its own).
          struct backward_inputs;
          struct given_grads;
          reused_vector<tensor<T>, backward_inputs> bin_buffer;
          reused_vector<char, given_grads> given_buffer;
          std::vector<tensor<T>>& bin = *bin_buffer;
          std::vector<char>& given = *given_buffer;
          bin.assign(s.begin(), s.end());
          given.resize(grads.size());
          for (std::size_t j = 0; j < grads.size(); ++j) {
            given[j] = grads[j].defined();
            if (given[j]) bin.push_back(grads[j]);
          }
          std::vector<std::pair<int, hook<T>>> hs;  // snapshot, as the engine's `run_hooks`
          if (graph_hooks) hs = *graph_hooks;
          for (std::size_t j = 0; j < grads.size(); ++j)
            for (const auto& h : (*self)->pre_hooks(j))
              hs.emplace_back(e->outputs[static_cast<std::size_t>(e->grad_outputs[j])], h);
          order_hooks(hs.begin(), hs.end(), [](const auto& hk) -> const hook<T>& { return hk.second; });
          std::vector<int> hooked;
          std::vector<ir::call_fn<T>> hook_fns;
          for (const auto& [k, h] : hs) {
            hooked.push_back(k);
            hook_fns.push_back([h = h](const tensor<T>& g, const tensor<T>&) { return apply_hook(h, g); });
          }
          std::vector<shape> bs;
          std::shared_ptr<const backward_code<T>> b = e->bwd;
          if (given != b->given || hooked != b->hooks) {
            std::vector<shape> fwd;
            if (jshapes)
              fwd.assign(jshapes->begin(), jshapes->begin() + static_cast<std::ptrdiff_t>(e->fwd_graph.size()));
            b = backward_for(*e, given, hooked, jshapes ? &fwd : nullptr, bs);
          } else if (jshapes) {
            bs = backward_shapes(*b, *jshapes);
          }
          std::vector<tensor<T>> r;
          if (auto* rec = active_recorder<T>())  // a traced backward: inline this one
            r = rec->replay(b->prog->source(), b->prog->outputs(), bin, jshapes ? &bs : nullptr,
                            hs.empty() ? nullptr : &hook_fns);
          else r = b->prog->run(bin, jshapes ? &bs : nullptr, hs.empty() ? nullptr : &hook_fns);
          std::vector<tensor<T>> out(n_in);
          for (std::size_t j = 0; j < e->wrt.size(); ++j) {
            const int o = b->grad_of[j];
            const auto i = static_cast<std::size_t>(e->wrt[j]);
            out[i] = o >= 0 ? r[static_cast<std::size_t>(o)] : tensor<T>{};
          }
          return out;
        });
    *self = n.get();
    n->set_materialize_grads(false);
    n->set_applies_hooks(true);
  }
}

}  // namespace fusegrad::detail::jit
