#pragma once
/// \file fusegrad/jit/user_rule.hpp
/// The derivative of a user's element-wise op or `fg::function` in a run-time graph
/// (`record_user_rule`, `record_function_backward`: the rules fg::jit gives `ir::backward`): the
/// rule is a template over any algebra of values, but the precompiled runtime knows it only as
/// a function of tensors (ops/user_ops.hpp). So the rule runs on lazy tensors that stand for
/// the graph's nodes, under a recorder that appends what it computes to the graph being
/// differentiated, exactly as the tracer records eager code.

#include <string>
#include <string_view>
#include <vector>

#include "fusegrad/core/grad_mode.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/ir/backward.hpp"
#include "fusegrad/ir/graph.hpp"
#include "fusegrad/ops/user_ops.hpp"

namespace fusegrad::detail::jit {

/// The recorder a user op's rule runs under: element-wise ops and reductions of the graph's
/// nodes become nodes; anything that needs a value, or a tensor from outside the graph, is an
/// error naming the op.
template <Element T>
class rule_recorder final : public recorder<T>, public lazy_source {
 public:
  /// `what` names the rule in errors ("the derivative rule of the user op 'softsign'").
  rule_recorder(ir::graph<T>& g, std::string what) : g_(g), what_(std::move(what)) {}
  rule_recorder(const rule_recorder&) = delete;
  rule_recorder& operator=(const rule_recorder&) = delete;

  /// A tensor standing for node `id` (no value; never requires grad).
  tensor<T> lazy(int id) {
    auto impl = std::make_shared<tensor_impl<T>>();
    impl->sizes = g_.at(id).sizes;
    set_contiguous_strides(impl->st, impl->sizes);
    impl->lazy = this;
    impl->lazy_node = id;
    return tensor<T>(std::move(impl));
  }
  /// The node `t` stands for.
  int node_of(const tensor<T>& t) const {
    const auto& impl = t.raw_impl();
    if (impl && impl->lazy == this) return impl->lazy_node;
    fail("jit", what_, " used a tensor that is not one of its arguments (",
         impl ? "a tensor made inside the rule" : "an undefined tensor",
         "); expected element-wise ops and reductions of its arguments and scalars");
  }

  tensor<T> pointwise(int op, T scalar, const tensor<T>& a, const tensor<T>* b) override {
    return lazy(g_.add_pointwise(op, scalar, node_of(a), b ? node_of(*b) : -1));
  }
  tensor<T> reduce(reduce_op k, const tensor<T>& x, const std::vector<bool>& mask, bool keepdim) override {
    std::uint64_t dims = 0;
    for (std::size_t d = 0; d < mask.size() && d < ir::max_rank; ++d)
      if (mask[d]) dims |= std::uint64_t{1} << d;
    const auto kind = k == reduce_op::sum    ? ir::node_kind::sum
                      : k == reduce_op::mean ? ir::node_kind::mean
                                             : ir::node_kind::max;
    return lazy(g_.add_reduction(kind, node_of(x), mask.empty() ? 0 : dims, keepdim));
  }
  tensor<T> sum_to(const tensor<T>& g, const shape& target) override {
    return lazy(g_.add_sum_to_shape(node_of(g), target));
  }
  tensor<T> expand(const tensor<T>& g, const shape& target, const std::vector<bool>& mask) override {
    std::uint64_t dims = 0;
    for (std::size_t d = 0; d < mask.size() && d < ir::max_rank; ++d)
      if (mask[d]) dims |= std::uint64_t{1} << d;
    return lazy(g_.add_expand_shape(node_of(g), target, dims));
  }
  void sync(std::string_view why) override { refuse(why); }
  void realize(std::string_view why) override { refuse(why); }
  std::vector<tensor<T>> replay(
      const ir::graph<T>&, const std::vector<int>&, const std::vector<tensor<T>>&, const std::vector<shape>*,
      const std::vector<std::function<tensor<T>(const tensor<T>&, const tensor<T>&)>>*) override {
    refuse("a compiled function's backward");
  }
  tensor<T> call(bool, std::string_view name, const shape&,
                 std::function<tensor<T>(const tensor<T>&, const tensor<T>&)>, const tensor<T>&, const tensor<T>*,
                 std::uint64_t) override {
    refuse(name);
  }
  tensor<T> custom(int fn, const tensor<T>&, const std::vector<tensor<T>>&,
                   const std::function<std::vector<tensor<T>>(const tensor<T>&)>&) override {
    refuse("the fg::function '" + std::string(ops::user_function_at<T>(fn, "jit").name) + "'");
  }
  std::size_t inline_begin() override { return g_.size(); }
  void inline_end(std::size_t) override {}
  void accumulate_grad(const tensor<T>&) override {}
  bool add_hook(const tensor<T>&, const hook<T>&) override { return false; }
  bool remove_hook(const tensor<T>&, std::uint64_t, bool&) override { return false; }
  void read_values(const tensor<T>&, std::string_view) override {}

 private:
  [[noreturn]] void refuse(std::string_view why) const {
    fail("jit", what_, " needs ", why,
         ", which a run-time graph cannot record; expected element-wise ops and reductions of its arguments");
  }
  ir::graph<T>& g_;
  std::string what_;
};

/// While it lives, the ops of this thread go to `r` and record nothing on the tape; what was
/// active before is restored on any exit.
template <Element T>
struct rule_scope {
  recorder<T>* before = active_recorder<T>();
  no_grad off;
  explicit rule_scope(rule_recorder<T>& r) { active_recorder<T>() = &r; }
  ~rule_scope() { active_recorder<T>() = before; }
  rule_scope(const rule_scope&) = delete;
  rule_scope& operator=(const rule_scope&) = delete;
};

/// `ir::user_rule` for fg::jit: appends to `g` the gradient of operand `operand` of node `k`
/// (a user op's) from its gradient `gk`, by running the op's rule under a `rule_recorder`.
template <Element T>
int record_user_rule(ir::graph<T>& g, int k, int operand, int gk) {
  const ir::node<T> n = g.at(k);  // a copy: appending may reallocate
  const ops::user_op<T>& u = ops::user_op_at<T>(n.op, "jit");
  rule_recorder<T> r(g, "the derivative rule of the user op '" + std::string(u.name) + "'");
  const tensor<T> a = r.lazy(n.a), b = n.b >= 0 ? r.lazy(n.b) : tensor<T>{}, y = r.lazy(k), grad = r.lazy(gk);
  const rule_scope<T> scope(r);
  const tensor<T> d = u.rule(n.scalar, operand, a, n.b >= 0 ? &b : nullptr, y, grad);
  return d.defined() ? r.node_of(d) : -1;
}

/// `ir::custom_rule` for fg::jit: appends to `g` the backward of the user function whose
/// output is node `k` (its gradient `gk`), by running `F::backward` on tensors standing for
/// what it saved, under a `rule_recorder`; returns each input's gradient node (-1: none).
template <Element T>
std::vector<int> record_function_backward(ir::graph<T>& g, int k, int gk) {
  const ir::custom_call call = g.custom_at(k);  // a copy: appending may reallocate
  const ops::user_function<T>& f = ops::user_function_at<T>(call.fn, "jit");
  rule_recorder<T> r(g, "the backward of the fg::function '" + std::string(f.name) + "'");
  std::vector<tensor<T>> saved;
  for (int s : call.saved) saved.push_back(s >= 0 ? r.lazy(s) : tensor<T>{});
  const tensor<T> grad = r.lazy(gk);
  const rule_scope<T> scope(r);
  const std::vector<tensor<T>> d = f.backward(saved, grad);
  std::vector<int> out;
  for (const tensor<T>& x : d) out.push_back(x.defined() ? r.node_of(x) : -1);
  return out;
}

/// The rules fg::jit gives `ir::backward` for user ops and functions.
template <Element T>
ir::tensor_rules<T> tensor_rules() {
  return {&record_user_rule<T>, &record_function_backward<T>};
}

}  // namespace fusegrad::detail::jit
