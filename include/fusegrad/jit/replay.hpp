#pragma once
/// \file fusegrad/jit/replay.hpp
/// `fg::jit(f, {.trace_once = true})`: a call's signature, the record a traced call leaves
/// (its signature, the cache entry its one graph ran, which argument feeds each graph input,
/// and how the result is rebuilt), and the replay of a record on a later call's arguments,
/// without calling the function (JAX's contract).
///
/// A signature is what the function's C++ may branch on without the tracer seeing it: the
/// grad mode, each argument's kind (a tensor, a container of tensors and its length, a
/// `std::map`'s keys, a number and its value), each tensor's sizes (exact: the function may
/// read them; the graph's program may still be a shape-generic entry of the kernel cache) and
/// requires_grad, and which argument tensors are the same tensor or share storage.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusegrad/core/reused_vector.hpp"
#include "fusegrad/core/small_vector.hpp"
#include "fusegrad/jit/entry.hpp"
#include "fusegrad/jit/log.hpp"
#include "fusegrad/jit/run_entry.hpp"
#include "fusegrad/jit/trace.hpp"

namespace fusegrad::detail::jit {

/// Copies of a call's arguments that its signature points to while the function runs
/// (`call_key::hold`); only a call that traces makes them.
template <Element T>
struct held_args {
  std::vector<tensor<T>> tensors;
  std::vector<std::string> keys;
};

/// The signature of one call (`tensors`: its argument tensors, in order, which it is not
/// compared on; they outlive the call, so it holds them by address). It lives on the stack, in
/// buffers of fixed size that grow on the heap only past them: a call that replays a record
/// allocates nothing and raises no reference count for its signature.
template <Element T>
struct call_key {
  small_vector<const tensor<T>*, 8> tensors;
  /// The whole signature but `keys`, compared with a record's in one pass (`replayer::matches`): the
  /// grad mode; the layout's length, then per argument its kind and its length or its value's
  /// bits (`add_arg`); the number of tensors, then per tensor the first earlier tensor that is
  /// the same one and the first earlier one sharing its storage (-1: none), whether it is
  /// defined, then its requires_grad (under the grad mode), rank and sizes (`replayer::seal`).
  /// Each list is preceded by its length, so that two signatures are equal exactly when every
  /// part is.
  small_vector<std::int64_t, 64> flat;       // (a call's signature is a few dozen numbers: no allocation)
  small_vector<const std::string*, 8> keys;  ///< the keys of its `std::map` arguments, in order

  call_key() {  // the grad mode and the layout's length, set by `seal` once `add_arg` appended the layout
    flat.push_back(0);
    flat.push_back(0);
  }

  /// Before a call that runs the function, which may move from its arguments: `tensors` and
  /// `keys` point to copies of them in `h` (the record is made from them after the call).
  void hold(held_args<T>& h) {
    h.tensors.reserve(tensors.size());
    for (const tensor<T>* t : tensors) h.tensors.push_back(*t);
    for (std::size_t i = 0; i < h.tensors.size(); ++i) tensors[i] = &h.tensors[i];
    h.keys.reserve(keys.size());
    for (const std::string* key : keys) h.keys.push_back(*key);
    for (std::size_t i = 0; i < h.keys.size(); ++i) keys[i] = &h.keys[i];
  }
};

/// A traced call's record: its signature and how to replay it.
template <Element T>
struct traced_call {
  // The signature (`call_key::flat` and `call_key::keys`; a record holds no argument alive).
  std::vector<std::int64_t> flat;
  std::vector<std::string> keys;
  // The replay.
  std::shared_ptr<const entry<T>> e;                 ///< null: the call traced no op
  std::shared_ptr<const std::vector<shape>> shapes;  ///< a dynamic entry's node shapes for these sizes
  /// The entry's forward bound once for these sizes when it is a single loop that records no
  /// backward (`program::bind_single_loop`): a replay patches in its tensors' addresses alone.
  std::optional<typename program<T>::single_loop_run> single;
  /// `single` is set, its inputs are the arguments in order and its outputs, each its own
  /// value, the result in order: a replay runs the loop straight into the result.
  bool straight = false;
  std::vector<int> input_arg;    ///< per graph input: the argument tensor it is
  bool inputs_are_args = false;  ///< `input_arg` is 0, 1, ... over all argument tensors
  /// Per tensor of the result: output p (>= 0) of `e`, argument tensor j (-1 - j), or `undefined`.
  std::vector<int> result;
  std::vector<char> last_use;        ///< per tensor of the result: no later one is the same output of `e`
  bool results_are_outputs = false;  ///< `result` is 0, 1, ... over all outputs of `e` (which is not null)
  static constexpr int undefined = std::numeric_limits<int>::min();
  std::vector<std::size_t> result_counts;  ///< lengths of the result's `std::vector`s and maps
  std::vector<std::string> result_keys;    ///< keys of the result's maps
};

/// The trace_once records of element type `T`, under `function_state::mu`: finding one,
/// making one after a traced call, replaying one. A class with out-of-line members so that
/// the precompiled runtime holds them (runtime/jit.hpp).
template <Element T>
struct replayer {
  /// The record whose signature `k` (its layout appended, not yet sealed) matches, or null:
  /// the one this thread replayed last for `st` when it does, else one of `st`'s (made most
  /// recently used), which this thread then holds in place of its last (the pointer is valid
  /// until the thread's next `find`). Each is compared as `k`'s words are computed, none
  /// written. A hit on the thread's last record takes neither the function's lock nor a
  /// reference to the record; a record the function's cache dropped since still stands for
  /// its signature. On a miss `k` leaves sealed, ready for the record the traced call makes.
  static const traced_call<T>* find(function_state& st, call_key<T>& k);
  /// After a traced call with signature `k`: checks that its trace (`rec`) can stand for it,
  /// naming what cannot, and keeps its record. `results`: the result's tensors (null:
  /// undefined), its containers' lengths and keys.
  static void save(function_state& st, const call_key<T>& k, const typename trace<T>::flush_record& rec,
                   const std::vector<const tensor_impl<T>*>& results, std::vector<std::size_t> counts,
                   std::vector<std::string> keys);
  /// The result's tensors of record `c` run on `args` (a call's argument tensors), into `out`.
  static void replay(const traced_call<T>& c, std::span<const tensor<T>* const> args, std::vector<tensor<T>>& out);

 private:
  /// Fills `k`'s flat signature from its layout and tensors, under the grad mode.
  static void seal(call_key<T>& k);
  /// The signature's words after the layout — the number of tensors, then each one's (see
  /// `call_key::flat`) — each passed to `put` in order, under `grad_mode`; false as soon as
  /// `put` returns false. One definition for `seal`, which writes them, and `matches`, which
  /// compares them with a record's as they come.
  template <class Put>
  static bool tensor_words(const call_key<T>& k, bool grad_mode, Put&& put);
  /// Whether record `c`'s signature is the one unsealed `k` would seal (computed word by word
  /// against the record's, none written).
  static bool matches(const traced_call<T>& c, const call_key<T>& k);
  /// `find` among `st`'s records.
  static std::shared_ptr<const traced_call<T>> find_shared(function_state& st, const call_key<T>& k);
  /// Record `c`'s entry run on `args`: its outputs' tensors into `outs`.
  static void run_outputs(const traced_call<T>& c, std::span<const tensor<T>* const> args,
                          std::vector<tensor<T>>& outs);
  /// Record `c`'s entry, which records a backward, run on the graph's inputs `ins`: its outputs'
  /// tensors into `outs`, joined to the inputs on the tape.
  static void run_recorded(const traced_call<T>& c, std::span<const tensor<T>* const> ins,
                           std::vector<tensor<T>>& outs);
};

/// The recorder of the element type a trace_once call does not trace (`T`, not its
/// arguments'): a replay runs one graph of one element type, so work on `T` inside the
/// function could not be replayed, and is refused where it happens, by name.
template <Element T>
class refusing_recorder final : public recorder<T> {
  // Static, so that GCC sees `noreturn` where it checks a template's non-dependent return.
  [[noreturn]] static void refuse(const std::string& fn, std::string_view op) {
    fail(op, "'", fn, "' (jitted with trace_once=true) computes on ", dtype_name<T>(),
         " tensors, but its tensor arguments are ", dtype_name<other_element_t<T>>(),
         "; a replay runs one graph of one element type. Pass the tensors as arguments, or call fg::jit without "
         "trace_once");
  }

 public:
  explicit refusing_recorder(const std::string& fn) : fn_(fn) {}
  tensor<T> pointwise(int, T, const tensor<T>&, const tensor<T>*) override { refuse(fn_, "a pointwise op"); }
  tensor<T> reduce(reduce_op k, const tensor<T>&, const std::vector<bool>&, bool) override {
    refuse(fn_, k == reduce_op::sum ? "sum" : k == reduce_op::mean ? "mean" : "max");
  }
  tensor<T> sum_to(const tensor<T>&, const shape&) override { refuse(fn_, "sum_to"); }
  tensor<T> expand(const tensor<T>&, const shape&, const std::vector<bool>&) override { refuse(fn_, "expand"); }
  void sync(std::string_view) override {}  // nothing of `T` is pending (`graph_break()` asks every type)
  std::vector<tensor<T>> replay(
      const ir::graph<T>&, const std::vector<int>&, const std::vector<tensor<T>>&, const std::vector<shape>*,
      const std::vector<std::function<tensor<T>(const tensor<T>&, const tensor<T>&)>>*) override {
    refuse(fn_, "a compiled function");
  }
  tensor<T> call(bool, std::string_view name, const shape&,
                 std::function<tensor<T>(const tensor<T>&, const tensor<T>&)>, const tensor<T>&, const tensor<T>*,
                 std::uint64_t) override {
    refuse(fn_, name);
  }
  tensor<T> custom(int, const tensor<T>&, const std::vector<tensor<T>>&,
                   const std::function<std::vector<tensor<T>>(const tensor<T>&)>&) override {
    refuse(fn_, "fg::function");
  }
  std::size_t inline_begin() override { refuse(fn_, "a compiled function"); }
  void inline_end(std::size_t) override { refuse(fn_, "a compiled function"); }
  void accumulate_grad(const tensor<T>&) override { refuse(fn_, "backward"); }
  bool add_hook(const tensor<T>&, const hook<T>&) override { return false; }  // not its tensor
  bool remove_hook(const tensor<T>&, std::uint64_t, bool&) override { return false; }
  void read_values(const tensor<T>&, std::string_view) override {}  // not its element type's

 private:
  const std::string& fn_;
};

/// What the tracer of a trace_once call's traced run reports (its flushes), from its
/// construction, before the function runs, to `save`, after it returned; meanwhile the other
/// element type's work is refused. Its members are out of line, held by the precompiled
/// runtime with the tracers' own (runtime/jit.hpp).
template <Element T>
class once_recording {
 public:
  explicit once_recording(const function_state& st);  // while this thread's tracer of T is a tracing_scope's
  ~once_recording();
  once_recording(const once_recording&) = delete;
  once_recording& operator=(const once_recording&) = delete;
  /// `replayer<T>::save` with what the tracer reported.
  void save(function_state& st, const call_key<T>& k, const std::vector<const tensor_impl<T>*>& results,
            std::vector<std::size_t> counts, std::vector<std::string> keys);

 private:
  trace<T>* t_;
  typename trace<T>::flush_record rec_;
  refusing_recorder<other_element_t<T>> refuse_;
  recorder<other_element_t<T>>* prev_other_;
};

template <Element T>
once_recording<T>::once_recording(const function_state& st)
    : t_(static_cast<trace<T>*>(active_recorder<T>())),
      refuse_(st.opts.name),
      prev_other_(std::exchange(active_recorder<other_element_t<T>>(), &refuse_)) {
  t_->recording = &rec_;
}
template <Element T>
once_recording<T>::~once_recording() {
  t_->recording = nullptr;
  active_recorder<other_element_t<T>>() = prev_other_;
}
template <Element T>
void once_recording<T>::save(function_state& st, const call_key<T>& k,
                             const std::vector<const tensor_impl<T>*>& results, std::vector<std::size_t> counts,
                             std::vector<std::string> keys) {
  replayer<T>::save(st, k, rec_, results, std::move(counts), std::move(keys));
}

/// Records kept per function and element type: the signatures a caller cycles through are
/// few; one that varies without bound (a new size each call) would grow the list forever.
inline constexpr std::size_t max_traced_calls = 64;

/// Of the tensors `ts[0, i)`, the first that is `ts[i]` itself and the first sharing its
/// storage (-1: none; both -1 for an undefined `ts[i]`). Quadratic over a call: calls pass few.
template <Element T>
[[gnu::always_inline]] inline std::pair<std::int64_t, std::int64_t> earlier_same_and_alias(const tensor<T>* const* ts,
                                                                                           std::size_t i) {
  const tensor_impl<T>* a = ts[i]->raw_impl().get();
  std::int64_t same_as = -1, alias_of = -1;
  const storage<T>* const store = a ? a->store.get() : nullptr;
  for (std::size_t j = 0; a && j < i; ++j) {
    const tensor_impl<T>* b = ts[j]->raw_impl().get();
    if (!b) continue;
    if (same_as < 0 && a == b) same_as = static_cast<std::int64_t>(j);
    if (alias_of < 0 && store && store == b->store.get()) alias_of = static_cast<std::int64_t>(j);
  }
  return {same_as, alias_of};
}

template <Element T>
template <class Put>
bool replayer<T>::tensor_words(const call_key<T>& k, bool grad_mode, Put&& put) {
  // (the list's buffer read once: each access of a small_vector asks where its elements are)
  const tensor<T>* const* const ts = k.tensors.data();
  const std::size_t n = k.tensors.size();
  if (!put(static_cast<std::int64_t>(n))) return false;
  for (std::size_t i = 0; i < n; ++i) {
    const tensor_impl<T>* a = ts[i]->raw_impl().get();
    const auto [same_as, alias_of] = earlier_same_and_alias(ts, i);
    if (!(put(same_as) && put(alias_of) && put(a != nullptr))) return false;
    if (!a) continue;
    const index_t* const d = a->sizes.data();
    const std::size_t rank = a->sizes.size();
    if (!(put(grad_mode && a->requires_grad) && put(static_cast<std::int64_t>(rank)))) return false;
    for (std::size_t r = 0; r < rank; ++r)
      if (!put(d[r])) return false;
  }
  return true;
}

template <Element T>
void replayer<T>::seal(call_key<T>& k) {
  const bool grad_mode = is_grad_enabled();
  k.flat[0] = grad_mode;
  k.flat[1] = static_cast<std::int64_t>(k.flat.size() - 2);  // (`add_arg` appended the layout)
  tensor_words(k, grad_mode, [&](std::int64_t w) {
    k.flat.push_back(w);
    return true;
  });
}

template <Element T>
bool replayer<T>::matches(const traced_call<T>& c, const call_key<T>& k) {
  const std::size_t at = k.flat.size();  // (the layout's end)
  const std::int64_t* p = c.flat.data();
  const std::int64_t* const end = p + c.flat.size();
  const bool grad_mode = is_grad_enabled();
  if (c.flat.size() <= at || p[0] != grad_mode || p[1] != static_cast<std::int64_t>(at - 2)) return false;
  const std::int64_t* const b = k.flat.data();
  for (std::size_t i = 2; i < at; ++i)
    if (p[i] != b[i]) return false;
  p += at;
  // (no bound check per word: the words after the layout say how many follow — the number of
  // tensors, each one's rank — so while every word matched, the record has the next one)
  return tensor_words(k, grad_mode, [&](std::int64_t w) { return *p++ == w; }) && p == end &&
         std::equal(c.keys.begin(), c.keys.end(), k.keys.begin(), k.keys.end(),
                    [](const std::string& a, const std::string* b) { return a == *b; });
}

template <Element T>
const traced_call<T>* replayer<T>::find(function_state& st, call_key<T>& k) {
  struct last_replay {
    std::uint64_t function = 0;  // `function_state::id` (0: none)
    std::shared_ptr<const traced_call<T>> record;
  };
  thread_local last_replay last;
  if (last.function == st.id && matches(*last.record, k)) {
    bump(counter_cells().cache_hits);
    return last.record.get();
  }
  std::shared_ptr<const traced_call<T>> c = find_shared(st, k);
  if (!c) {
    seal(k);
    return nullptr;
  }
  last.function = st.id;
  last.record = std::move(c);
  return last.record.get();
}

template <Element T>
std::shared_ptr<const traced_call<T>> replayer<T>::find_shared(function_state& st, const call_key<T>& k) {
  std::lock_guard lock(st.mu);
  auto& v = st.cache_of<T>().traced;
  for (std::size_t q = 0; q < v.size(); ++q)
    if (matches(*v[q], k)) {
      std::rotate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(q),
                  v.begin() + static_cast<std::ptrdiff_t>(q) + 1);
      bump(counter_cells().cache_hits);
      return v.front();
    }
  return nullptr;
}

template <Element T>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): the checks of a trace_once replay, in order
void replayer<T>::save(function_state& st, const call_key<T>& k, const typename trace<T>::flush_record& rec,
                       const std::vector<const tensor_impl<T>*>& results, std::vector<std::size_t> counts,
                       std::vector<std::string> keys) {
  const std::string& fn = st.opts.name;
  // A graph that ran eagerly (past the recompile limit, or too large to compile) has no
  // program to replay: such a signature calls the function each time, as the default mode.
  if (rec.flushes > 0 && !rec.compiled) return;
  auto c = std::make_shared<traced_call<T>>();
  for (std::size_t r = 0; r < results.size(); ++r) {
    const tensor_impl<T>* t = results[r];
    if (!t) {
      c->result.push_back(traced_call<T>::undefined);
      continue;
    }
    const auto p = std::find(rec.targets.begin(), rec.targets.end(), t);
    if (p != rec.targets.end()) {
      c->result.push_back(static_cast<int>(p - rec.targets.begin()));
      continue;
    }
    const auto a =
        std::find_if(k.tensors.begin(), k.tensors.end(), [&](const tensor<T>* x) { return x->raw_impl().get() == t; });
    if (a == k.tensors.end())
      fail("jit", "tensor ", r, " of the result of '", fn, "' (jitted with trace_once=true), of shape ",
           fusegrad::to_string(t->sizes),
           ", was neither computed by the trace nor passed as an argument (a tensor "
           "captured from outside, or made inside the function by a factory, a random op or an op the tracer does "
           "not capture); a replay does not call the function, so it would keep its first value. Compute it from the "
           "arguments with traced ops, or call fg::jit without trace_once");
    c->result.push_back(-1 - static_cast<int>(a - k.tensors.begin()));
  }
  for (const tensor_impl<T>* t : rec.targets)
    if (std::find(results.begin(), results.end(), t) == results.end())
      fail("jit", "'", fn, "' (jitted with trace_once=true) kept a tensor of shape ", fusegrad::to_string(t->sizes),
           " that its trace computed alive outside its result (in a captured or static variable?); a replay only "
           "returns the result. Return the tensor, or call fg::jit without trace_once");
  if (rec.flushes > 0) {
    c->e = rec.e;
    for (const tensor<T>& in : rec.inputs) {
      const auto a =
          std::find_if(k.tensors.begin(), k.tensors.end(), [&](const tensor<T>* x) { return x->is_same(in); });
      if (a == k.tensors.end())  // (the trace refused such an input already)
        fail("jit", "internal error: a graph input of '", fn, "' is not one of its arguments");
      c->input_arg.push_back(static_cast<int>(a - k.tensors.begin()));
    }
    c->inputs_are_args = c->input_arg.size() == k.tensors.size();
    for (std::size_t i = 0; i < c->input_arg.size(); ++i)
      c->inputs_are_args = c->inputs_are_args && c->input_arg[i] == static_cast<int>(i);
    if (c->e->dynamic) c->shapes = std::make_shared<const std::vector<shape>>(entry_shapes(*c->e, rec.inputs));
    if (!c->e->bwd && c->e->fwd) c->single = c->e->fwd->bind_single_loop(c->shapes.get());
  }
  c->results_are_outputs = c->e && c->result.size() == c->e->outputs.size();
  for (std::size_t r = 0; r < c->result.size(); ++r)
    c->results_are_outputs = c->results_are_outputs && c->result[r] == static_cast<int>(r);
  c->straight = c->single && c->inputs_are_args && c->results_are_outputs && !c->single->repeats_an_output();
  for (std::size_t r = 0; r < c->result.size(); ++r)
    c->last_use.push_back(std::find(c->result.begin() + static_cast<std::ptrdiff_t>(r) + 1, c->result.end(),
                                    c->result[r]) == c->result.end());
  c->result_counts = std::move(counts);
  c->result_keys = std::move(keys);
  c->flat.assign(k.flat.data(), k.flat.data() + k.flat.size());
  for (const std::string* key : k.keys) c->keys.push_back(*key);
  std::lock_guard lock(st.mu);
  auto& v = st.cache_of<T>().traced;
  const auto same = [&](const std::shared_ptr<const traced_call<T>>& o) {  // another thread traced it meanwhile
    return o->flat == c->flat && o->keys == c->keys;
  };
  if (std::any_of(v.begin(), v.end(), same)) return;
  v.insert(v.begin(), std::move(c));
  if (v.size() > max_traced_calls) v.pop_back();
}

template <Element T>
void replayer<T>::replay(const traced_call<T>& c, std::span<const tensor<T>* const> args, std::vector<tensor<T>>& out) {
  // One loop, the arguments in and the result out (`x * y + z`): nothing to pick, pause or
  // rearrange (the loop runs no eager step that a recorder could see).
  if (c.straight && c.e->fwd->run_single_loop(*c.single, args, out)) return;
  if (c.results_are_outputs) {
    run_outputs(c, args, out);
    return;
  }
  // Per output of the entry, its tensor (the thread's buffer: no allocation per call).
  struct replay_outputs;
  reused_vector<tensor<T>, replay_outputs> outs;
  if (c.e) run_outputs(c, args, *outs);
  out.clear();
  for (std::size_t q = 0; q < c.result.size(); ++q) {
    const int r = c.result[q];
    if (r == traced_call<T>::undefined) out.emplace_back();
    else if (r < 0) out.push_back(*args[static_cast<std::size_t>(-1 - r)]);
    else if (auto& t = (*outs)[static_cast<std::size_t>(r)]; c.last_use[q]) out.push_back(std::move(t));
    else out.push_back(t);
  }
}

template <Element T>
void replayer<T>::run_outputs(const traced_call<T>& c, std::span<const tensor<T>* const> args,
                              std::vector<tensor<T>>& outs) {
  pause_recording paused;  // the programs' eager steps compute (an outer trace sees the results as inputs)
  small_vector<const tensor<T>*, 8> picked;
  if (!c.inputs_are_args)
    for (int a : c.input_arg) picked.push_back(args[static_cast<std::size_t>(a)]);
  const std::span<const tensor<T>* const> ins = c.inputs_are_args ? args : std::span<const tensor<T>* const>(picked);
  // The signature holds every argument's sizes, and the record's entry was traced with them.
  if (c.e->bwd) run_recorded(c, ins, outs);
  else run_forward_guarded(*c.e, ins, c.shapes.get(), c.single ? &*c.single : nullptr, outs);
}

template <Element T>
void replayer<T>::run_recorded(const traced_call<T>& c, std::span<const tensor<T>* const> ins,
                               std::vector<tensor<T>>& outs) {
  // The tape's node holds the inputs, and the outputs' tensors are made for it (the thread's
  // buffers: no allocation per call).
  struct recorded_inputs;
  struct recorded_targets;
  reused_vector<tensor<T>, recorded_inputs> inputs;
  reused_vector<std::shared_ptr<tensor_impl<T>>, recorded_targets> targets;
  for (const tensor<T>* t : ins) inputs->push_back(*t);
  targets->resize(c.e->outputs.size());  // (null: the outputs' own tensors where they can be, `output_tensor`)
  static const std::vector<jit::call_fn<T>> no_calls;
  static const std::vector<std::pair<int, hook<T>>> no_hooks;
  run_entry(c.e, *inputs, c.shapes, no_calls, no_hooks, *targets);
  outs.clear();
  for (auto& t : *targets) outs.emplace_back(std::move(t));
}

// ---- The arguments and the result, as types: what a trace_once call takes and returns.

/// The element type of a tensor argument, or of a container's tensors (void: none).
template <class X>
struct element_of {
  using type = void;
};
template <Element T>
struct element_of<tensor<T>> {
  using type = T;
};
template <class X>
requires(!is_tensor_v<X> && requires { typename X::value_type; } &&
         !std::is_void_v<typename element_of<typename X::value_type>::type>) struct element_of<X>
    : element_of<typename X::value_type> {
};
template <class K, class V, class C, class A>
struct element_of<std::map<K, V, C, A>> : element_of<V> {};

/// The element type of a call's tensor arguments: the first argument's that has one.
template <class... X>
struct args_element {
  using type = void;
};
template <class X, class... Rest>
struct args_element<X, Rest...> {
  using own = typename element_of<std::remove_cvref_t<X>>::type;
  using type = std::conditional_t<std::is_void_v<own>, typename args_element<Rest...>::type, own>;
};

/// What a trace_once call can take: tensors of `T`, `std::map<std::string, tensor<T>>`,
/// ranges of `tensor<T>` (as `tracing_scope::name_arg` names them), numbers and enums.
template <Element T, class A>
constexpr bool takes_arg() {
  using X = std::remove_cvref_t<A>;
  if constexpr (std::is_same_v<X, tensor<T>> || std::is_arithmetic_v<X> || std::is_enum_v<X>) return true;
  else if constexpr (requires {
                       typename X::key_type;
                       typename X::mapped_type;
                     })
    return std::is_same_v<typename X::key_type, std::string> && std::is_same_v<typename X::mapped_type, tensor<T>>;
  else if constexpr (requires(const X& x) {
                       typename X::value_type;
                       x.begin();
                       x.size();
                     })
    return std::is_same_v<typename X::value_type, tensor<T>>;
  else return false;
}

/// Argument `a`, into signature `k`. A lazy tensor (an outer trace's) is computed first: the
/// signature needs its storage. Always inlined: left to itself the compiler calls it once per
/// argument, and a replay's signature pays each call's saving and restoring of registers.
template <Element T, class A>
[[gnu::always_inline]] inline void add_arg(call_key<T>& k, const A& a) {
  using X = std::remove_cvref_t<A>;
  enum : std::int64_t { tensor_arg = 1, map_arg, range_arg, integer_arg, real_arg };
  const auto add = [&](const tensor<T>& t) {
    if (t.is_lazy()) t.raw_impl()->lazy->realize("an argument of a trace_once call");
    k.tensors.push_back(&t);
  };
  auto& f = k.flat;  // (the layout: after the grad mode and its length, `seal`)
  if constexpr (std::is_same_v<X, tensor<T>>) {
    f.push_back(tensor_arg);
    add(a);
  } else if constexpr (std::is_floating_point_v<X>) {
    f.push_back(real_arg);
    f.push_back(std::bit_cast<std::int64_t>(static_cast<double>(a)));
  } else if constexpr (std::is_arithmetic_v<X> || std::is_enum_v<X>) {
    f.push_back(integer_arg);
    f.push_back(static_cast<std::int64_t>(a));
  } else if constexpr (requires {
                         typename X::key_type;
                         typename X::mapped_type;
                       }) {
    f.push_back(map_arg);
    f.push_back(static_cast<std::int64_t>(a.size()));
    for (const auto& [key, v] : a) {
      k.keys.push_back(&key);
      add(v);
    }
  } else {
    f.push_back(range_arg);
    f.push_back(static_cast<std::int64_t>(a.size()));
    for (const auto& v : a) add(v);
  }
}

/// What a trace_once call can return (rebuilt on a replay): void, a `tensor<T>`, a
/// `std::vector`, `std::array` or `std::map<std::string, ...>` of these, or a pair or tuple.
template <Element T, class R>
struct rebuilds : std::false_type {};
template <Element T>
struct rebuilds<T, tensor<T>> : std::true_type {};
template <Element T, class V, class A>
struct rebuilds<T, std::vector<V, A>> : rebuilds<T, V> {};
template <Element T, class V, std::size_t N>
struct rebuilds<T, std::array<V, N>> : rebuilds<T, V> {};
template <Element T, class V, class C, class A>
struct rebuilds<T, std::map<std::string, V, C, A>> : rebuilds<T, V> {};
template <Element T, class... V>
struct rebuilds<T, std::tuple<V...>> : std::bool_constant<(rebuilds<T, V>::value && ...)> {};
template <Element T, class A, class B>
struct rebuilds<T, std::pair<A, B>> : std::bool_constant<rebuilds<T, A>::value && rebuilds<T, B>::value> {};

/// Result `r`'s tensors (null: undefined), its containers' lengths and its maps' keys, in the
/// order `rebuild` reads them back.
template <Element T, class R>
void take_apart(const R& r, std::vector<const tensor_impl<T>*>& ts, std::vector<std::size_t>& counts,
                std::vector<std::string>& keys) {
  if constexpr (std::is_same_v<R, tensor<T>>) {
    ts.push_back(r.raw_impl().get());
  } else if constexpr (requires { typename R::key_type; }) {
    counts.push_back(r.size());
    for (const auto& [key, v] : r) {
      keys.push_back(key);
      take_apart<T>(v, ts, counts, keys);
    }
  } else if constexpr (requires { typename R::value_type; }) {
    counts.push_back(r.size());
    for (const auto& v : r) take_apart<T>(v, ts, counts, keys);
  } else {  // a pair or tuple
    std::apply([&](const auto&... v) { (take_apart<T>(v, ts, counts, keys), ...); }, r);
  }
}

/// Reads a result of type `R` back from a replay's tensors `ts` (moved out: each is read once)
/// and record `c`'s lengths and keys, from positions `t`, `n`, `k`.
template <Element T, class R>
R rebuild(std::vector<tensor<T>>& ts, const traced_call<T>& c, std::size_t& t, std::size_t& n, std::size_t& k) {
  if constexpr (std::is_same_v<R, tensor<T>>) {
    return std::move(ts[t++]);
  } else if constexpr (requires { typename R::key_type; }) {
    R r;
    const std::size_t count = c.result_counts[n++];
    for (std::size_t i = 0; i < count; ++i) {
      const std::string& key = c.result_keys[k++];
      r.emplace(key, rebuild<T, typename R::mapped_type>(ts, c, t, n, k));
    }
    return r;
  } else if constexpr (requires(R & r) { r.push_back(std::declval<typename R::value_type>()); }) {
    R r;
    const std::size_t count = c.result_counts[n++];
    r.reserve(count);
    for (std::size_t i = 0; i < count; ++i) r.push_back(rebuild<T, typename R::value_type>(ts, c, t, n, k));
    return r;
  } else if constexpr (requires { typename R::value_type; }) {  // std::array
    R r;
    ++n;
    for (auto& v : r) v = rebuild<T, typename R::value_type>(ts, c, t, n, k);
    return r;
  } else {  // a pair or tuple, its elements in order
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return R{rebuild<T, std::tuple_element_t<I, R>>(ts, c, t, n, k)...};
    }
    (std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}

}  // namespace fusegrad::detail::jit
