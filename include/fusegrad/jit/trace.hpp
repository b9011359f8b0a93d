#pragma once
/// \file fusegrad/jit/trace.hpp
/// The run-time tracer of `fg::jit` (`trace<T>`): the recorder the eager ops of a thread
/// append to during a jitted call, building the pending IR graph and handing out lazy
/// tensors. Its `flush()` (compile or fetch, run) is defined in fusegrad/jit/flush.hpp,
/// included at the end of this file.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/ir/backward.hpp"
#include "fusegrad/jit/program.hpp"
#include "fusegrad/jit/entry.hpp"

namespace fusegrad::detail::jit {

template <Element T>
struct chosen_entry;  // fusegrad/jit/flush.hpp

/// The tracer of one element type on one thread, during one call of a jitted function.
template <Element T>
class trace final : public recorder<T>, public lazy_source {
 public:
  trace() = default;
  ~trace();  // defined out of line: not compiled in each TU that uses the precompiled runtime
  trace(const trace&) = delete;
  trace& operator=(const trace&) = delete;

  /// Starts tracing a call of the function with state `st` (a trace is reused by the calls
  /// of its thread, keeping its buffers).
  void begin(function_state& st) {
    st_ = &st;
    names_.clear();
  }
  /// Names an argument's tensor for logs and guards: `key` for a map entry, else "arg<arg>" or
  /// "arg<arg>[<elem>]"; a trace_once trace also knows its arguments by it. (Out of the class
  /// body: the precompiled runtime holds it, so a user TU compiles none of the names' vector.)
  void name(const void* impl, int arg, int elem, const std::string* key);

  tensor<T> pointwise(int op, T scalar, const tensor<T>& a, const tensor<T>* b) override {
    split_on_grad_mode();
    const int ia = node_of(a), ib = b ? node_of(*b) : -1;
    const int id = g_.add_pointwise(op, scalar, ia, ib);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  tensor<T> reduce(reduce_op k, const tensor<T>& x, const std::vector<bool>& mask, bool keepdim) override {
    split_on_grad_mode();
    if (mask.size() > ir::max_rank)
      fail("jit", "a traced tensor has ", mask.size(), " dims; expected at most ", ir::max_rank);
    const int ix = node_of(x);
    std::uint64_t dims = 0;
    for (std::size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) dims |= std::uint64_t{1} << d;
    const auto kind = k == reduce_op::sum    ? ir::node_kind::sum
                      : k == reduce_op::mean ? ir::node_kind::mean
                                             : ir::node_kind::max;
    const int id = g_.add_reduction(kind, ix, mask.empty() ? 0 : dims, keepdim);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  tensor<T> sum_to(const tensor<T>& g, const shape& target) override {
    split_on_grad_mode();
    const int ig = node_of(g);
    const int id = g_.add_sum_to_shape(ig, target);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  tensor<T> expand(const tensor<T>& g, const shape& target, const std::vector<bool>& mask) override {
    split_on_grad_mode();
    if (mask.size() > ir::max_rank)
      fail("jit", "a traced tensor has ", mask.size(), " dims; expected at most ", ir::max_rank);
    std::uint64_t dims = 0;
    for (std::size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) dims |= std::uint64_t{1} << d;
    const int ig = node_of(g);
    const int id = g_.add_expand_shape(ig, target, dims);
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  std::vector<tensor<T>> replay(const ir::graph<T>& b, const std::vector<int>& outputs,
                                const std::vector<tensor<T>>& inputs, const std::vector<shape>* sizes,
                                const std::vector<jit::call_fn<T>>* fns) override {
    split_on_grad_mode();
    const int aot = next_aot_++;  // the inlined nodes print as %aot<id>_<node of b>
    std::vector<int> map(b.size(), -1);
    for (std::size_t k = 0; k < b.size(); ++k) {
      const ir::node<T>& n = b.nodes()[k];
      map[k] = n.kind == ir::node_kind::input ? node_of(inputs.at(static_cast<std::size_t>(n.index)))
                                              : add_replayed(n, k, map, sizes, fns, aot);
    }
    return replayed_outputs(outputs, map);
  }
  tensor<T> call(bool hook, std::string_view name, const shape& out, jit::call_fn<T> fn, const tensor<T>& a,
                 const tensor<T>* b, std::uint64_t hook_id) override {
    split_on_grad_mode();
    const int ia = node_of(a), ib = b ? node_of(*b) : -1;
    const int slot = static_cast<int>(calls_.size());
    const int id = hook ? g_.add_call_hook(ia, slot) : g_.add_call(ia, ib, slot, out);
    calls_.push_back(std::move(fn));
    call_names_.emplace_back(name);
    call_hook_ids_.resize(calls_.size());
    call_hook_ids_.back() = hook ? hook_id : 0;
    rg_.push_back(needs_grad(g_.at(id)));
    return make_lazy(id);
  }
  tensor<T> custom(int fn, const tensor<T>& value, const std::vector<tensor<T>>& inputs,
                   const std::function<std::vector<tensor<T>>(const tensor<T>&)>& saved) override {
    split_on_grad_mode();
    const int iv = node_of(value);
    std::vector<int> in;
    bool rg = false;
    for (const tensor<T>& x : inputs) {
      in.push_back(node_of(x));
      rg = rg || rg_[static_cast<std::size_t>(in.back())];
    }
    const int id = g_.add_custom(fn, iv, std::move(in));
    rg_.push_back(static_cast<char>(rg));
    tensor<T> y = make_lazy(id);
    if (rg) {  // as eagerly: what to save is asked only of a function whose output needs grad
      std::vector<int> sv;
      for (const tensor<T>& x : saved(y)) sv.push_back(x.defined() ? node_of(x) : -1);
      g_.set_custom_saved(id, std::move(sv));
    }
    return y;
  }
  std::size_t inline_begin() override { return g_.size(); }
  void inline_end(std::size_t from) override {
    if (from > g_.size()) from = 0;  // the graph broke in between: the nodes since
    const int aot = next_aot_++;
    for (std::size_t k = from; k < g_.size(); ++k)
      if (g_.nodes()[k].kind != ir::node_kind::input)
        aot_.push_back({static_cast<int>(k), aot, static_cast<int>(k - from)});
  }
  void accumulate_grad(const tensor<T>& g) override {
    if (const auto& impl = g.raw_impl(); impl && impl->lazy == this) accumulated_.push_back(impl->lazy_node);
  }
  bool add_hook(const tensor<T>& t, const hook<T>& h) override {
    if (traces_once())  // on any tensor, a traced one or not (an argument)
      fail(
          "register_hook", "a tensor hook (register_hook or retain_grad) registered inside '", st_->opts.name,
          "', which is jitted with trace_once=true, would run only for the call that traced it: a replay does not call "
          "the function. Register it outside the function (on an argument before the call, on the result after it), "
          "or call fg::jit without trace_once");
    const auto& impl = t.raw_impl();
    if (!impl || impl->lazy != this) return false;
    hooks_.emplace_back(impl->lazy_node, h);
    return true;
  }
  bool remove_hook(const tensor<T>& t, std::uint64_t id, bool& removed) override {
    if (traces_once())
      fail("remove_hook", "a tensor hook removed inside '", st_->opts.name,
           "', which is jitted with trace_once=true, would be removed only for the call that traced it: a replay does "
           "not call the function. Remove it outside the function, or call fg::jit without trace_once");
    const auto& impl = t.raw_impl();
    if (!impl || impl->lazy != this) return false;
    const auto it = std::find_if(hooks_.begin(), hooks_.end(),
                                 [&](const auto& h) { return h.first == impl->lazy_node && h.second.id == id; });
    removed = it != hooks_.end();
    if (removed) hooks_.erase(it);
    return true;
  }
  void read_values(const tensor<T>& t, std::string_view op) override {
    if (traces_once()) refuse_argument_read(*t.raw_impl(), op);
  }
  void realize(std::string_view why) override { flush(why, true); }
  void sync(std::string_view why) override { flush(why, true); }

  /// Compiles (or fetches) and runs the pending graph; `is_break`: a sync point asked.
  void flush(std::string_view why, bool is_break);

  /// What a flush hands to a compiled-autograd capture that asked (`recording`): how many
  /// graphs were flushed, and for the last one, run as a compiled program, its cache entry,
  /// inputs, the lazy tensors its outputs went to, and its call slots' functions and hook ids.
  struct flush_record {
    int flushes = 0;
    bool compiled = false;
    std::shared_ptr<const entry<T>> e;
    std::vector<tensor<T>> inputs;
    std::vector<const tensor_impl<T>*> targets;
    std::vector<jit::call_fn<T>> calls;
    std::vector<std::uint64_t> call_hook_ids;
  };
  flush_record* recording = nullptr;

  /// After an exception: the tensors still lazy can never be computed.
  void abandon() noexcept {
    for (auto& [id, w] : lazies_)
      if (auto p = w.lock()) p->lazy = &dead_source();
    reset();
  }

 private:
  struct dead final : lazy_source {
    void realize(std::string_view) override {
      fail("jit", "this tensor was recorded by a jitted call that threw before computing it; it has no value");
    }
  };
  static dead& dead_source() {
    static dead d;
    return d;
  }

  void split_on_grad_mode() {
    const bool gm = is_grad_enabled();
    if (!g_.empty() && gm != grad_mode_) {
      if (traces_once())
        fail(gm ? "enable_grad" : "no_grad", "grad mode changed inside '", st_->opts.name,
             "', which is jitted with trace_once=true: a replay runs one graph in one grad mode. Set the grad mode "
             "around the call (each grad mode is its own signature), or call fg::jit without trace_once");
      flush("grad mode changed", false);
    }
    if (g_.empty()) grad_mode_ = gm;
  }
  // The phases of replay(), in the order it runs them.
  /// Node `k` of a replayed graph, `n`, added to this graph: its operands renumbered by `map`,
  /// its sizes this call's (`sizes`; null: its own), its call slot one of this graph's
  /// (`fns`); it prints as node `k` of inlined graph `aot`.
  int add_replayed(ir::node<T> n, std::size_t k, const std::vector<int>& map, const std::vector<shape>* sizes,
                   const std::vector<jit::call_fn<T>>* fns, int aot) {
    for (int* c : {&n.a, &n.b})
      if (*c >= 0) *c = map[static_cast<std::size_t>(*c)];
    if (n.ref >= 0) n.ref = map[static_cast<std::size_t>(n.ref)];
    const bool rg = needs_grad(n);
    if (sizes) n.sizes = (*sizes)[k];
    if (n.kind == ir::node_kind::call_hook || n.kind == ir::node_kind::call)  // its function joins this graph's
      n.index = add_replayed_call(n.kind == ir::node_kind::call_hook, n.index, fns);
    const int id = g_.add_copy(std::move(n));
    rg_.push_back(rg);
    aot_.push_back({id, aot, static_cast<int>(k)});
    return id;
  }
  /// The function of a replayed graph's call slot `index` (of `fns`) as a new call slot of
  /// this graph, a call or (`hook`) a hook that is not one of the tape's; its slot here.
  int add_replayed_call(bool hook, int index, const std::vector<jit::call_fn<T>>* fns) {
    if (!fns || index < 0 || static_cast<std::size_t>(index) >= fns->size())
      fail("jit", "a replayed call node needs function ", index, " but ", fns ? fns->size() : 0,
           " were given; expected one function per call slot");
    calls_.push_back((*fns)[static_cast<std::size_t>(index)]);
    call_names_.emplace_back(hook ? "hook" : "call");
    call_hook_ids_.resize(calls_.size());
    call_hook_ids_.back() = ~std::uint64_t{0};  // a replayed graph's hook: not one of the tape's
    return static_cast<int>(calls_.size()) - 1;
  }
  /// The tensors of a replayed graph's `outputs` (`map`: its nodes here): an input of this
  /// graph is its tensor, any other node a lazy tensor.
  std::vector<tensor<T>> replayed_outputs(const std::vector<int>& outputs, const std::vector<int>& map) {
    std::vector<tensor<T>> out;
    for (int o : outputs) {
      const int id = map[static_cast<std::size_t>(o)];
      if (g_.at(id).kind == ir::node_kind::input) out.push_back(inputs_[static_cast<std::size_t>(g_.at(id).index)]);
      else out.push_back(make_lazy(id));
    }
    return out;
  }
  /// Whether this trace is a `trace_once` call's: what a replay could not redo is refused.
  bool traces_once() const noexcept { return st_ && st_->opts.trace_once; }
  /// For a `trace_once` call, before the pending graph is flushed (`why`; `is_break`: a sync
  /// point asked): throws, naming the op, when a replay of the graph could not stand for
  /// calling the function.
  void refuse_unreplayable(std::string_view why, bool is_break) const;
  /// Under trace_once: fails where the function's C++ reads the values of `t` (op `op`) and
  /// `t` shares its storage with an argument (is one, or a view of one).
  void refuse_argument_read(const tensor_impl<T>& t, std::string_view op) const;

  // The phases of flush(), in the order it runs them (fusegrad/jit/flush.hpp).
  void note_flush_for_capture();
  void note_graph_break(std::string_view why);
  bool collect_outputs();
  std::uint64_t cache_key();
  chosen_entry<T> look_up(std::uint64_t key, bool gm);
  bool is_this_graph(const entry<T>& e, std::uint64_t key) const;
  chosen_entry<T> find_cached(cache<T>& c, std::uint64_t key, bool gm) const;
  chosen_entry<T> compile_or_fall_back(cache<T>& c, std::uint64_t key, bool gm);
  const entry<T>* latest_of_graph(const cache<T>& c, std::uint64_t key) const;
  std::string miss_reason(const entry<T>& same, bool gm, dynamic_dim_marks& marks) const;
  chosen_entry<T> compile_new_entry(cache<T>& c, std::uint64_t key, bool gm,
                                    const std::vector<std::uint64_t>& dynamic_dims);
  void log_new_entry(const entry<T>& e) const;
  void run_node_by_node(bool past_limit, bool gm);
  std::vector<tensor<T>> eval_nodes_eagerly();
  void run_compiled(const std::shared_ptr<const entry<T>>& e, std::vector<shape> shapes);
  void hand_run_to_capture(const std::shared_ptr<const entry<T>>& e);

  /// The name of node `n`'s op, for errors.
  std::string_view op_of(const ir::node<T>& n) const {
    switch (n.kind) {
      case ir::node_kind::pointwise: return ir::graph<T>::op_name(n.op);
      case ir::node_kind::sum: return "sum";
      case ir::node_kind::mean: return "mean";
      case ir::node_kind::max: return "max";
      case ir::node_kind::expand: return "expand";
      case ir::node_kind::sum_to: return "sum_to";
      case ir::node_kind::custom: return "fg::function";
      default: return "call";
    }
  }
  /// Whether node `n` (its operands already in the graph) requires grad, as the tape decides:
  /// an operand requires grad and the op has a derivative rule.
  bool needs_grad(const ir::node<T>& n) const {
    if (n.kind == ir::node_kind::pointwise && !ir::graph<T>::op_has_derivative(n.op)) return false;
    return (n.a >= 0 && rg_[static_cast<std::size_t>(n.a)]) || (n.b >= 0 && rg_[static_cast<std::size_t>(n.b)]);
  }
  int node_of(const tensor<T>& t) {
    const auto& impl = t.raw_impl();
    if (!impl) fail("jit", "an op got an undefined tensor; expected a defined tensor");
    if (impl->lazy == this) return impl->lazy_node;
    if (impl->lazy) impl->lazy->realize("a lazy tensor of another trace");
    if (const int known = input_node(impl.get()); known >= 0) return known;
    const int id = g_.add_input(t.shape());
    inputs_.push_back(t);
    input_nodes_.push_back(id);
    rg_.push_back(grad_mode_ && t.requires_grad());
    return id;
  }
  /// The node of the graph input whose tensor is `impl`, -1 when it is none: a scan of the few
  /// inputs most traces have, an index once they are many (a compiled-autograd capture of a
  /// long chain has an input per node's scalar, and a scan per op was quadratic in them).
  int input_node(const tensor_impl<T>* impl) {
    constexpr std::size_t few = 16;
    if (inputs_.size() <= few) {
      for (std::size_t i = 0; i < inputs_.size(); ++i)
        if (inputs_[i].raw_impl().get() == impl) return input_nodes_[i];
      return -1;
    }
    for (std::size_t i = input_index_.size(); i < inputs_.size(); ++i)
      input_index_.emplace(inputs_[i].raw_impl().get(), i);
    const auto it = input_index_.find(impl);
    return it == input_index_.end() ? -1 : input_nodes_[it->second];
  }
  tensor<T> make_lazy(int id) {
    auto impl = make_pooled<tensor_impl<T>>();  // the buffer cache's free lists, as eager's tensors
    impl->sizes = g_.at(id).sizes;
    set_contiguous_strides(impl->st, impl->sizes);
    impl->requires_grad = rg_[static_cast<std::size_t>(id)];
    impl->lazy = this;
    impl->lazy_node = id;
    lazies_.emplace_back(id, impl);
    return tensor<T>(std::move(impl));
  }
  void reset() {
    targets_.clear();
    calls_.clear();
    call_names_.clear();
    call_hook_ids_.clear();
    aot_.clear();
    accumulated_.clear();
    hooks_.clear();
    next_aot_ = 0;
    g_.clear();
    inputs_.clear();
    input_nodes_.clear();
    input_index_.clear();
    rg_.clear();
    lazies_.clear();
  }
  std::string input_name(const tensor<T>& t, std::size_t i) const {
    for (const auto& n : names_)
      if (n.impl == t.raw_impl().get()) {
        if (n.key) return *n.key;
        std::string r = "arg" + std::to_string(n.arg);
        if (n.elem >= 0) r += "[" + std::to_string(n.elem) + "]";
        return r;
      }
    return "input " + std::to_string(i);
  }

  struct arg_name {
    const void* impl;
    int arg, elem;
    const std::string* key;
  };
  function_state* st_ = nullptr;
  ir::graph<T> g_;
  std::vector<tensor<T>> inputs_;
  std::vector<int> input_nodes_;
  std::unordered_map<const tensor_impl<T>*, std::size_t> input_index_;  // inputs_[i] by tensor, when there are many
  std::unordered_map<const void*, int> first_of_storage_;               // flush's aliasing of inputs (see find_aliases)
  std::vector<char> rg_;                                                ///< node needs grad
  bool grad_mode_ = true;
  std::vector<std::pair<int, std::weak_ptr<tensor_impl<T>>>> lazies_;
  std::vector<arg_name> names_;
  std::vector<jit::call_fn<T>> calls_;        ///< the functions of the graph's call nodes, by slot
  std::vector<std::string> call_names_;       ///< their names, for the printed graph
  std::vector<std::uint64_t> call_hook_ids_;  ///< per slot: the tape hook's id (0: a call; ~0: a replayed graph's)
  // For the printed graph: inlined backwards (node, aot id, node in its backward graph) and
  // the values AccumulateGrad hands to leaves.
  struct aot_node {
    int node, aot, local;
  };
  std::vector<aot_node> aot_;
  std::vector<int> accumulated_;
  /// Tensor hooks registered on lazy tensors, in order: the node, the hook. Each flush hands
  /// them to the graph's backward as `call_hook` slots; the entry keys on the nodes only,
  /// and every call passes its own hooks (a cached program never runs a stale one).
  std::vector<std::pair<int, hook<T>>> hooks_;
  int next_aot_ = 0;
  /// The graph as code, inlined nodes named `%aot<id>_<k>`, AccumulateGrad's values listed.
  std::string graph_text(const std::vector<std::string>& input_names) const {
    std::vector<std::string> labels;
    if (!aot_.empty()) {
      labels.resize(g_.size());
      for (const auto& a : aot_)
        labels[static_cast<std::size_t>(a.node)] = "aot" + std::to_string(a.aot) + "_" + std::to_string(a.local);
    }
    std::string s = g_.to_string(input_names, labels, call_names_);
    for (std::size_t h = 0; h < hooks_.size(); ++h) {
      const auto k = static_cast<std::size_t>(hooks_[h].first);
      s += "register_hook(%";
      s += k < labels.size() && !labels[k].empty() ? labels[k] : std::to_string(k);
      s += ", hooks[" + std::to_string(h) + "])\n";
    }
    for (int k : accumulated_) {
      s += "accumulate_grad(%";
      s += static_cast<std::size_t>(k) < labels.size() && !labels[static_cast<std::size_t>(k)].empty()
               ? labels[static_cast<std::size_t>(k)]
               : std::to_string(k);
      s += ")\n";
    }
    return s;
  }
  // Scratch of flush(), kept between calls.
  std::vector<int> outs_, alias_, hook_nodes_;
  std::vector<std::shared_ptr<tensor_impl<T>>> targets_;
};

template <Element T>
trace<T>::~trace() = default;

template <Element T>
void trace<T>::name(const void* impl, int arg, int elem, const std::string* key) {
  names_.push_back({impl, arg, elem, key});
}

template <Element T>
void trace<T>::refuse_unreplayable(std::string_view why, bool is_break) const {
  const std::string& fn = st_->opts.name;
  if (is_break)
    fail(why, "'", fn, "' is jitted with trace_once=true, but ", why,
         " needs the value of a traced tensor, which would break the graph; a replay runs one graph without calling "
         "the function, so nothing would compute that value. Read it after the call (return the tensor), or call "
         "fg::jit without trace_once");
  if (!calls_.empty())
    fail(call_names_.front(), "'", fn,
         "' (jitted with trace_once=true) traced an opaque call, whose function is the "
         "call's own; call fg::jit without trace_once");
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const auto& impl = inputs_[i].raw_impl();
    if (std::any_of(names_.begin(), names_.end(), [&](const arg_name& a) { return a.impl == impl.get(); })) continue;
    std::string_view op = "an op";  // the first op that reads it
    for (const auto& n : g_.nodes())
      if (n.kind != ir::node_kind::input && (n.a == input_nodes_[i] || n.b == input_nodes_[i])) {
        op = op_of(n);
        break;
      }
    fail(op, "'", fn, "' (jitted with trace_once=true) reads a tensor of shape ", fusegrad::to_string(impl->sizes),
         " that is not one of its arguments",
         impl->grad_fn ? cat(" (computed by ", impl->grad_fn->name(), ", an op the tracer does not capture)")
                       : std::string(),
         ". A replay does not call the function, so a tensor captured from outside, made inside it by a factory or a "
         "random op (randn, rand, zeros, ...), or computed by an op the tracer does not capture (matmul, views) "
         "would keep its first call's value. Pass it as an argument, or call fg::jit without trace_once");
  }
}

template <Element T>
void trace<T>::refuse_argument_read(const tensor_impl<T>& t, std::string_view op) const {
  if (!t.store) return;
  for (const arg_name& a : names_) {
    if (static_cast<const tensor_impl<T>*>(a.impl)->store != t.store) continue;
    fail(op, "'", st_->opts.name, "' (jitted with trace_once=true) reads the values of argument ", a.arg,
         a.impl == &t ? "" : " (through a view of it)",
         " in its C++, which the tracer does not see; a replay does not call the function, so what the function "
         "computed from them would keep the first call's values. Compute with the argument's ops (traced), pass a "
         "number as an argument of its own (part of the signature), or call fg::jit without trace_once");
  }
}

}  // namespace fusegrad::detail::jit

// The definition of `trace<T>::flush`, which every instantiation of `trace` needs.
#include "fusegrad/jit/flush.hpp"
