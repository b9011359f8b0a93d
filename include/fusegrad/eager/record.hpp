#pragma once
/// \file fusegrad/eager/record.hpp
/// Putting ops on the tape: gradient edges, the AccumulateGrad node of a leaf, `attach` and
/// `record` (and `call_opaque` for backward rules that a traced backward keeps opaque).

#include <algorithm>
#include <bit>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <type_traits>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "fusegrad/core/hash.hpp"
#include "fusegrad/eager/grad_sum.hpp"
#include "fusegrad/eager/grad_journal.hpp"
#include "fusegrad/eager/hooks.hpp"
#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/node.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/ops/table.hpp"

namespace fusegrad {

namespace detail {

/// One address per type (an inline variable has one in the whole program): what tells apart,
/// in a node's `params`, two rules of one node name (`square` and `pow(x, 0)` are both
/// `PowBackward0`, with equal scalars) or two user functions of one name.
template <class X>
inline const char type_tag = 0;
template <class X>
std::uintptr_t type_id() noexcept {
  return reinterpret_cast<std::uintptr_t>(&type_tag<X>);
}

/// A fingerprint of the constants a backward rule holds (`node::collect`'s `params`): integers,
/// scalars by their bits, shapes and dim lists element by element.
template <class... A>
std::uint64_t params_of(const A&... a) {
  fnv1a h;
  auto one = [&](const auto& x, auto& self) -> void {
    using X = std::remove_cvref_t<decltype(x)>;
    if constexpr (std::is_same_v<X, float>) h.mix(std::bit_cast<std::uint32_t>(x));
    else if constexpr (std::is_same_v<X, double>) h.mix(std::bit_cast<std::uint64_t>(x));
    else if constexpr (std::is_integral_v<X> || std::is_enum_v<X>) h.mix(static_cast<std::uint64_t>(x));
    else if constexpr (std::is_same_v<X, std::string_view>) h.mix(x);
    else {
      h.mix(0xD1B54A32D192ED03ULL ^ static_cast<std::uint64_t>(x.size()));
      for (const auto& e : x)
        self(static_cast<
                 std::conditional_t<std::is_same_v<X, std::vector<bool>>, bool, std::remove_cvref_t<decltype(e)>>>(e),
             self);
    }
  };
  (one(a, one), ...);
  return h.value();
}

/// `f(a, b)` (`b` may be undefined): computed now, or, in a traced backward where an operand
/// is lazy, recorded as an opaque `call` node of shape `out` that runs `f` on the values (how
/// the backwards of matmul and views stay inside one captured graph).
template <Element T, class F>
tensor<T> call_opaque(std::string_view name, const shape& out, F f, const tensor<T>& a, const tensor<T>& b = {}) {
  if (auto* r = active_recorder<T>()) [[unlikely]]
    if (a.is_lazy() || b.is_lazy()) return r->call(false, name, out, std::move(f), a, b.defined() ? &b : nullptr, 0);
  return f(a, b);
}

/// Whether nothing but `g` refers to its values: a fresh, dense, owned buffer that a leaf's
/// `.grad()` can take over instead of copying (PyTorch's AccumulateGrad steals such grads).
template <Element T>
bool owned_alone(const tensor<T>& g) {
  const auto& i = g.impl();
  return i && i.use_count() == 1 && !i->grad_fn && i->store && i->store.use_count() == 1 && i->store->owned() &&
         i->offset == 0 && static_cast<std::size_t>(numel(i->sizes)) == i->store->size() &&
         is_contiguous(i->sizes, i->st);
}

/// The node that accumulates into a leaf's `.grad()`; runs the leaf's hooks first.
template <Element T>
class accumulate_grad final : public node<T> {
 public:
  explicit accumulate_grad(const std::shared_ptr<tensor_impl<T>>& leaf) : leaf_(leaf) {
    this->add_output(leaf->sizes);
    this->set_accumulates();
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
      if (leaf->grad.defined()) write_grad(leaf, add_grads(leaf->grad, g));
      else if (g.raw_impl().use_count() == 1 || !r) write_grad(leaf, std::move(g));
      else
        write_grad(leaf, r->pointwise(ops::table_index<ops::mul_scalar_op<T>, T>, T(1), g, nullptr));  // its own copy
      if (r) r->accumulate_grad(leaf->grad);
    } else if (is_grad_enabled() && g.requires_grad()) {  // create_graph: .grad() keeps its history
      write_grad(leaf, leaf->grad.defined() ? tensor<T>(leaf->grad + g) : tensor<T>(g.clone()));
    } else if (!leaf->grad.defined()) {
      write_grad(leaf, owned_alone(g) ? std::move(g) : contiguous_copy(g));
    } else {
      write_grad(leaf, zip("AccumulateGrad", accumulate_values{}, leaf->grad, g));
    }
    return {};
  }
  /// What accumulating reads: the leaf's gradient so far (null: the leaf is gone; `params`:
  /// whether it is alive; its hooks are the caller's to collect).
  bool collect(std::uint64_t& params, std::vector<const tensor<T>*>& tensors) override {
    collect_leaf(variable(), params, tensors);
    return true;
  }
  /// `collect` for the leaf `leaf` (undefined: gone), where the caller has it already (the
  /// key walk, which reads its hooks too, locks it once).
  static void collect_leaf(const tensor<T>& leaf, std::uint64_t& params, std::vector<const tensor<T>*>& tensors) {
    params = leaf.defined() ? 1 : 0;
    tensors.push_back(leaf.defined() ? &leaf.raw_impl()->grad : nullptr);  // the leaf's owners keep it alive
  }
  /// The leaf this node accumulates into (null if it has been destroyed).
  [[nodiscard]] tensor<T> variable() const {
    auto l = leaf_.lock();
    return l ? tensor<T>(l) : tensor<T>{};
  }

 private:
  std::weak_ptr<tensor_impl<T>> leaf_;
};

/// The AccumulateGrad node of a leaf that requires grad (made on first use, then reused).
template <Element T>
std::shared_ptr<node<T>> grad_accumulator(const tensor<T>& leaf) {
  auto& impl = *leaf.impl();
  // Made once and never changed: after the flag, a copy needs no lock (the usual case, a leaf
  // used again); before it, two threads' forwards may race to make it.
  if (impl.has_accumulator.load(std::memory_order_acquire)) return impl.grad_accumulator;
  std::lock_guard lock(impl.mutex);
  if (!impl.grad_accumulator) {
    impl.grad_accumulator = std::make_shared<accumulate_grad<T>>(leaf.impl());
    impl.has_accumulator.store(true, std::memory_order_release);
  }
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
std::shared_ptr<node<T>> attach(std::shared_ptr<node<T>> n, std::span<const tensor<T>> inputs,
                                std::span<tensor<T>* const> outputs) {
  typename node<T>::edge_list e;
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

/// Whether a node's backward rule is written with recording ops, so that a create_graph
/// backward through it can be differentiated again (a type of its own: it follows `params` in
/// `record`'s arguments, and a bool would convert to either).
enum class double_backward : bool { unsupported = false, supported = true };

/// Records `name` on the tape: a node with one edge per input, saving `saved`, producing
/// `outputs`. A saved output is held as a detached alias (no reference cycle through the
/// node) and reconnected to this node when a create_graph backward unpacks it; saved inputs
/// are held as they are, with their history. `params` (see `params_of`), when given,
/// fingerprints every constant `rule` holds besides the node's name and its inputs' and saved
/// tensors' shapes: the node can then be collected (`node::collect`) and a compiled-autograd
/// cache hit skips running its rule. `twice`: the rule is written with recording ops, so a
/// create_graph backward through it is differentiable (see `saving_node::set_double_backward`).
template <Element T, class Rule>
std::shared_ptr<node<T>> record(std::string_view name, std::span<const tensor<T>> inputs,
                                std::span<tensor<T>* const> outputs, std::vector<tensor<T>> saved, Rule rule,
                                std::optional<std::uint64_t> params = std::nullopt,
                                double_backward twice = double_backward::unsupported) {
  std::vector<int> output_slot;
  for (std::size_t k = 0; k < saved.size(); ++k) {
    if (!saved[k].defined()) continue;
    for (std::size_t j = 0; j < outputs.size(); ++j)
      if (saved[k].is_same(*outputs[j])) {
        if (output_slot.empty()) output_slot.assign(saved.size(), -1);
        output_slot[k] = static_cast<int>(j);
        saved[k] = saved[k].detach();
      }
  }
  auto n = make_pooled<rule_node<T>>(name, std::move(saved), std::move(rule));
  if (!output_slot.empty()) n->set_saved_outputs(std::move(output_slot), n);
  if (params) n->set_params(*params);
  n->set_double_backward(twice == double_backward::supported);
  return attach<T>(std::move(n), inputs, outputs);
}
/// `record` with the inputs and outputs written in place (`{a, b}`, `{&y}`): no vectors made.
template <Element T, class Rule>
std::shared_ptr<node<T>> record(std::string_view name, std::initializer_list<tensor<T>> inputs,
                                std::initializer_list<tensor<T>*> outputs, std::vector<tensor<T>> saved, Rule rule,
                                std::optional<std::uint64_t> params = std::nullopt,
                                double_backward twice = double_backward::unsupported) {
  return record<T>(name, std::span<const tensor<T>>(inputs.begin(), inputs.size()),
                   std::span<tensor<T>* const>(outputs.begin(), outputs.size()), std::move(saved), std::move(rule),
                   params, twice);
}

/// Sums `g` down to `target` (the inverse of broadcasting); recorded only in a create_graph
/// backward.
template <Element T>
tensor<T> sum_to(const tensor<T>& g, const shape& target) {
  if (g.shape() == target) return g;
  if (auto* r = active_recorder<T>()) [[unlikely]]
    return r->sum_to(g, target);
  const auto& s = g.shape();
  const std::size_t lead = s.size() - target.size();
  std::vector<bool> mask(s.size(), false);
  for (std::size_t d = 0; d < s.size(); ++d) mask[d] = d < lead || (target[d - lead] == 1 && s[d] != 1);
  tensor<T> r = reduce_keepdim(g, mask, reduce_op::sum);
  tensor<T> y = alias(r, target, contiguous_strides(target), 0);
  if (needs_grad(g)) [[unlikely]]  // a create_graph backward: the sum is differentiated again
    record<T>(
        "SumBackward1", {g}, {&y}, {},
        [from = s](const std::vector<tensor<T>>&, std::vector<tensor<T>>& gy) {
          return std::vector<tensor<T>>{gy[0].expand(from)};
        },
        std::nullopt, double_backward::supported);
  return y;
}
/// The node a result of a backward rule that is not differentiable gets in a create_graph
/// backward: a second backward that reaches it throws (PyTorch's `DelayedError`).
template <Element T>
class double_backward_error final : public node<T> {
 public:
  explicit double_backward_error(std::string_view of) : of_(of) {}
  [[nodiscard]] std::string_view name() const override { return "NotImplemented"; }
  std::vector<tensor<T>> apply(std::vector<tensor<T>>&) override {
    fail("backward", "double backward through ", of_,
         " is not implemented: its backward rule is not "
         "differentiable; expected create_graph only through ops whose derivatives are differentiable "
         "(docs/functional.md, \"Double backward\")");
  }

 private:
  std::string_view of_;
};

template <Element T>
void saving_node<T>::sum_to_inputs(std::vector<tensor<T>>& grads) const {
  const auto& e = this->next_edges();
  for (std::size_t j = 0; j < grads.size() && j < e.size(); ++j)
    if (grads[j].defined() && e[j].fn) grads[j] = sum_to(grads[j], e[j].fn->output_shape(e[j].input_nr));
}

template <Element T>
std::vector<tensor<T>> saving_node<T>::apply_with_graph(std::vector<tensor<T>>& grads) {
  std::vector<tensor<T>> unpacked = saved_;
  if (!output_slot_.empty())
    if (auto self = self_.lock())
      for (std::size_t i = 0; i < unpacked.size(); ++i)
        if (output_slot_[i] >= 0 && unpacked[i].defined()) {
          tensor<T> t = unpacked[i].detach();
          auto& impl = *t.impl();
          impl.grad_fn = self;
          impl.output_nr = static_cast<std::size_t>(output_slot_[i]);
          impl.requires_grad = true;
          unpacked[i] = std::move(t);
        }
  std::vector<tensor<T>> history;  // what the results depend on that requires grad
  for (const auto& v : {std::cref(grads), std::cref(unpacked)})
    for (const auto& t : v.get())
      if (t.defined() && t.requires_grad()) history.push_back(t);
  if (double_backward_ || history.empty()) return run_rule(unpacked, grads);
  std::vector<tensor<T>> r;
  {
    no_grad off;
    r = run_rule(unpacked, grads);
  }
  for (auto& t : r)
    if (t.defined()) {
      t = t.detach();
      std::vector<tensor<T>*> out{&t};
      attach<T>(make_pooled<double_backward_error<T>>(name_), history, out);
    }
  return r;
}

}  // namespace detail

}  // namespace fusegrad
