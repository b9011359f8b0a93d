#pragma once
/// \file fusegrad/jit/run_entry.hpp
/// Running a compiled cache entry of `fg::jit` on its inputs: the forward program, the
/// outputs' values handed to their tensors, and the `CompiledFunctionBackward` node recorded
/// on the tape, whose rule runs the entry's backward program. A sync point runs an entry so
/// (flush.hpp), and so does a `trace_once` call that replays its trace (replay.hpp).

#include <cstddef>
#include <memory>
#include <span>
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
  // (a clone on the tape when it needs grad; none, and no reference taken, when contiguous already)
  const tensor<T> copy = computed.is_contiguous() ? tensor<T>{} : fusegrad::contiguous(computed);
  const auto& s = copy.defined() ? *copy.impl() : *computed.impl();
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

/// The tensor an output of a replay (which has no lazy tensor to fill) gets for its value
/// `computed` (moved from): `computed` itself when no one else holds it and it is what `adopt`
/// would make of a fresh tensor (contiguous, no history), else a fresh tensor adopting it.
/// Either way a tensor no one else holds, with `computed`'s values.
template <Element T>
tensor<T> output_value(tensor<T>& computed) {
  tensor<T> own = std::move(computed);
  if (const auto& i = own.raw_impl();
      i.use_count() == 1 && !i->lazy && !i->grad_fn && !i->requires_grad && is_contiguous(i->sizes, i->st))
    return own;
  auto t = make_pooled<tensor_impl<T>>();
  adopt(*t, own);
  return tensor<T>(std::move(t));
}
/// `output_value`'s tensor, as its impl.
template <Element T>
std::shared_ptr<tensor_impl<T>> output_tensor(tensor<T>& computed) {
  return output_value(computed).raw_impl();
}

/// A call's hooks on its backward: the graph's (`graph_hooks`, by slot), then those registered
/// since on the outputs of `self`, in the order the engine's `run_hooks` runs them (a snapshot).
template <Element T>
std::vector<std::pair<int, hook<T>>> backward_hooks(const entry<T>& e,
                                                    const std::vector<std::pair<int, hook<T>>>* graph_hooks,
                                                    node<T>& self, std::size_t n_grads) {
  std::vector<std::pair<int, hook<T>>> hs;
  if (graph_hooks) hs = *graph_hooks;
  for (std::size_t j = 0; j < n_grads; ++j)
    for (const auto& h : self.pre_hooks(j)) hs.emplace_back(e.outputs[static_cast<std::size_t>(e.grad_outputs[j])], h);
  order_hooks(hs.begin(), hs.end(), [](const auto& hk) -> const hook<T>& { return hk.second; });
  return hs;
}

/// The backward code of entry `e` for the gradients that came (`given`) and the hooked slots
/// (`hooked`): the entry's own when they match, else `backward_for`'s; `bs` gets its node shapes
/// on a dynamic entry (`jshapes`).
template <Element T>
std::shared_ptr<const backward_code<T>> backward_code_for(const entry<T>& e, const std::vector<char>& given,
                                                          const std::vector<int>& hooked,
                                                          const std::vector<shape>* jshapes, std::vector<shape>& bs) {
  std::shared_ptr<const backward_code<T>> b = e.bwd;
  if (given != b->given || hooked != b->hooks) {
    std::vector<shape> fwd;
    if (jshapes) fwd.assign(jshapes->begin(), jshapes->begin() + static_cast<std::ptrdiff_t>(e.fwd_graph.size()));
    b = backward_for(e, given, hooked, jshapes ? &fwd : nullptr, bs);
  } else if (jshapes) {
    bs = backward_shapes(*b, *jshapes);
  }
  return b;
}

/// The backward program's inputs, the saved values `s` then the gradients that came, and which
/// of `grads` came (`given`).
template <Element T>
void gather_backward_inputs(const std::vector<tensor<T>>& s, const std::vector<tensor<T>>& grads,
                            std::vector<tensor<T>>& bin, std::vector<char>& given) {
  bin.assign(s.begin(), s.end());
  given.resize(grads.size());
  for (std::size_t j = 0; j < grads.size(); ++j) {
    given[j] = grads[j].defined();
    if (given[j]) bin.push_back(grads[j]);
  }
}

/// The hooked slots of `hs` (`hooked`) and each hook as a call slot's function (`hook_fns`).
template <Element T>
void hook_calls(const std::vector<std::pair<int, hook<T>>>& hs, std::vector<int>& hooked,
                std::vector<jit::call_fn<T>>& hook_fns) {
  for (const auto& [k, h] : hs) {
    hooked.push_back(k);
    hook_fns.push_back([h = h](const tensor<T>& g, const tensor<T>&) { return apply_hook(h, g); });
  }
}

/// Runs backward code `b` on `bin` (`bs`: its node shapes, null for a static entry; `hook_fns`:
/// its hooks' functions, null for none); a traced backward inlines it in the trace instead.
template <Element T>
std::vector<tensor<T>> run_backward_program(const backward_code<T>& b, const std::vector<tensor<T>>& bin,
                                            const std::vector<shape>* bs,
                                            const std::vector<jit::call_fn<T>>* hook_fns) {
  if (auto* rec = active_recorder<T>()) return rec->replay(b.prog->source(), b.prog->outputs(), bin, bs, hook_fns);
  return b.prog->run(bin, bs, hook_fns);
}

/// The gradients by input (`n_in` of them) from the backward program's results `r`: undefined
/// for an input the entry does not differentiate, or one whose gradient is structurally zero.
template <Element T>
std::vector<tensor<T>> grads_by_input(const entry<T>& e, const backward_code<T>& b, const std::vector<tensor<T>>& r,
                                      std::size_t n_in) {
  std::vector<tensor<T>> out(n_in);
  for (std::size_t j = 0; j < e.wrt.size(); ++j) {
    const int o = b.grad_of[j];
    const auto i = static_cast<std::size_t>(e.wrt[j]);
    out[i] = o >= 0 ? r[static_cast<std::size_t>(o)] : tensor<T>{};
  }
  return out;
}

/// The rule of the `CompiledFunctionBackward` node `self` that `run_entry` records for entry `e`
/// (`s`: the saved values, `grads`: the outputs' gradients, undefined where none came): the
/// backward program for the gradients that came and the hooks, its results by input.
template <Element T>
std::vector<tensor<T>> compiled_function_backward(const entry<T>& e, const std::vector<shape>* jshapes,
                                                  std::size_t n_in,
                                                  const std::vector<std::pair<int, hook<T>>>* graph_hooks,
                                                  node<T>& self, const std::vector<tensor<T>>& s,
                                                  std::vector<tensor<T>>& grads) {
  // The program's inputs and which gradients came (the thread's buffers; a backward nested in
  // this one, from a hook, gets its own).
  struct backward_inputs;
  struct given_grads;
  reused_vector<tensor<T>, backward_inputs> bin_buffer;
  reused_vector<char, given_grads> given_buffer;
  std::vector<tensor<T>>& bin = *bin_buffer;
  std::vector<char>& given = *given_buffer;
  gather_backward_inputs(s, grads, bin, given);
  const std::vector<std::pair<int, hook<T>>> hs = backward_hooks(e, graph_hooks, self, grads.size());
  std::vector<int> hooked;
  std::vector<jit::call_fn<T>> hook_fns;
  hook_calls(hs, hooked, hook_fns);
  std::vector<shape> bs;
  const std::shared_ptr<const backward_code<T>> b = backward_code_for(e, given, hooked, jshapes, bs);
  const std::vector<tensor<T>> r =
      run_backward_program(*b, bin, jshapes ? &bs : nullptr, hs.empty() ? nullptr : &hook_fns);
  return grads_by_input(e, *b, r, n_in);
}

/// Runs entry `e` on `inputs` (`jshapes`: a dynamic entry's node shapes for them, null for a
/// static entry), with the call slots' functions `calls` and the call's tensor hooks `hooks`
/// (node, hook): output `p` of the entry goes to `targets[p]` (null: an `output_tensor` made for it), and when
/// the entry has a backward, one `CompiledFunctionBackward` node joins the targets to the inputs on the tape.
/// Recording is paused by the caller (the programs' eager steps must compute, not trace).
template <Element T>
void run_entry(const std::shared_ptr<const entry<T>>& e, const std::vector<tensor<T>>& inputs,
               std::shared_ptr<const std::vector<shape>> jshapes, const std::vector<jit::call_fn<T>>& calls,
               const std::vector<std::pair<int, hook<T>>>& hooks,
               std::vector<std::shared_ptr<tensor_impl<T>>>& targets) {
  // The forward's node shapes and its results (the thread's buffers: no allocation per call).
  struct forward_shapes;
  struct forward_results;
  reused_vector<shape, forward_shapes> fwd_shapes;
  reused_vector<tensor<T>, forward_results> res;
  if (jshapes)
    fwd_shapes->assign(jshapes->begin(), jshapes->begin() + static_cast<std::ptrdiff_t>(e->fwd_graph.size()));
  e->fwd->run_into(inputs, *res, jshapes ? &*fwd_shapes : nullptr, &calls);
  const std::size_t n_out = e->outputs.size();
  for (std::size_t p = 0; p < n_out; ++p) {
    if (targets[p]) adopt(*targets[p], (*res)[p]);
    else targets[p] = output_tensor((*res)[p]);
  }
  if (e->bwd) {
    std::vector<tensor<T>> saved(res->begin() + static_cast<std::ptrdiff_t>(n_out), res->end());
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
        [e, jshapes, n_in, graph_hooks, self](const std::vector<tensor<T>>& s, std::vector<tensor<T>>& grads) {
          return compiled_function_backward(*e, jshapes.get(), n_in, graph_hooks.get(), **self, s, grads);
        });
    *self = n.get();
    n->set_materialize_grads(false);
    n->set_applies_hooks(true);
  }
}

/// Runs entry `e`, which records no backward, on the tensors `inputs` points to, whose shapes
/// the caller's guards imply (a `trace_once` replay; `shapes`: a dynamic entry's node shapes for
/// them, which without a backward are its forward's alone, else null): output p's value into
/// `out[p]`, as `output_value` gives it. `single`: the forward's single loop bound for these
/// shapes (`program::bind_single_loop`), run where it can be, or null.
template <Element T>
void run_forward_guarded(const entry<T>& e, std::span<const tensor<T>* const> inputs, const std::vector<shape>* shapes,
                         const typename program<T>::single_loop_run* single, std::vector<tensor<T>>& out) {
  static const std::vector<jit::call_fn<T>> no_calls;
  if (!single || !e.fwd->run_single_loop(*single, inputs, out)) {
    e.fwd->run_into(inputs, out, shapes, &no_calls, program<T>::input_check::guarded);
    out.resize(e.outputs.size());  // (the program's outputs are the entry's, then the saved values: none here)
    for (tensor<T>& t : out) t = output_value(t);
    return;
  }
  // The single loop's outputs (one per output of the entry, which saves nothing) are fresh
  // tensors, as `output_value` leaves them, but for one that repeats an earlier output: that
  // one gets its own tensor of the same values.
  for (std::size_t p = 0; p < out.size(); ++p)
    if (single->first_of[p] != p) out[p] = output_value(out[p]);
}

}  // namespace fusegrad::detail::jit
