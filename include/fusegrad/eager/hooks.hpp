#pragma once
/// \file fusegrad/eager/hooks.hpp
/// Tensor hooks: the order they run in, running them on a gradient (or recording them in a
/// traced backward), and `register_hook` / `remove_hook` / `retain_grad`.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusegrad/eager/grad_journal.hpp"
#include "fusegrad/eager/grad_sum.hpp"
#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/node.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad {

namespace detail {

/// Runs `h` on `g` and checks that a replacement keeps the shape.
template <Element T>
tensor<T> apply_hook(const hook<T>& h, tensor<T> g) {
  std::optional<tensor<T>> r = h.fn(g);
  if (!r) return g;
  if (!r->defined() || r->shape() != g.shape())
    fail("register_hook", "hook ", h.id, " returned a gradient of shape ",
         r->defined() ? to_string(r->shape()) : std::string("<undefined>"), "; expected the incoming gradient's shape ",
         to_string(g.shape()));
  return *r;
}

/// Runs hook `h` on gradient `g`; in a traced backward (compiled autograd), records it as a
/// `call_hook` node instead, unless it is generic and is traced like any other code.
template <Element T>
tensor<T> run_hook(const hook<T>& h, tensor<T> g) {
  if (!h.traced)
    if (auto* r = active_recorder<T>()) [[unlikely]]
      return r->call(
          true, "hook", g.shape(), [h](const tensor<T>& v, const tensor<T>&) { return apply_hook(h, v); }, g, nullptr,
          h.id);
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

/// Puts hook `h` on tensor `t` (which requires grad): into the captured graph of the fg::jit
/// trace that `t` is pending in, else onto the tape (its grad_fn's output slot, or the leaf).
/// A recording trace sees every tensor's hook, pending or not: a trace_once trace refuses
/// them all, since a replay, which does not call the function, would not put them on.
template <Element T>
void install_hook(const tensor<T>& t, hook<T> h) {
  auto& i = *t.raw_impl();  // defined: the callers checked
  if (auto* r = active_recorder<T>(); r && r->add_hook(t, h)) [[unlikely]]
    return;  // joins the captured graph's backward
  if (i.lazy) [[unlikely]]
    i.lazy->realize("register_hook");  // another trace's tensor: computed, then hooked
  if (i.grad_fn) i.grad_fn->pre_hooks(i.output_nr).push_back(std::move(h));
  else i.leaf_hooks.push_back(std::move(h));
}

}  // namespace detail

template <Element T>
template <TensorHook<T> F>
std::uint64_t tensor<T>::register_hook(F&& f) {
  auto& i = checked("register_hook");
  if (!i.requires_grad)
    detail::fail("register_hook",
                 "cannot register a hook on a tensor that does not require "
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
  bool removed = false;
  if (auto* r = detail::active_recorder<T>(); r && r->remove_hook(*this, id, removed)) [[unlikely]]
    return removed;  // (a recording trace sees every tensor's, as `install_hook`)
  if (i.lazy) [[unlikely]]
    i.lazy->realize("remove_hook");
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
  std::weak_ptr<detail::tensor_impl<T>> self = impl_;
  hook<T> h{detail::next_id(), [self](const tensor<T>& g) -> std::optional<tensor<T>> {
              if (auto s = self.lock()) {
                std::lock_guard lock(s->mutex);  // concurrent backwards through this tensor
                detail::write_grad(s, s->grad.defined()
                                          ? detail::zip("retain_grad", detail::accumulate_values{}, s->grad, g)
                                          : detail::contiguous_copy(g));
              }
              return std::nullopt;
            }};
  h.retains_grad = true;  // runs after the tensor's other hooks, whenever they were registered
  detail::install_hook(*this, std::move(h));
  i.retains_grad = true;  // (after: a trace that refuses the hook leaves the tensor as it was)
}

}  // namespace fusegrad
