#pragma once
/// \file fusegrad/compiled_autograd/compiled_autograd.hpp
/// Compiled autograd: `backward()` captures the whole backward pass into the run-time IR
/// and runs it as compiled programs (the seed's compiled autograd).
///
/// When it is on (`fg::config().compiled_autograd = true`, or an `fg::compiled_autograd::enable`
/// scope on this thread), a backward pass
///  1. walks the tape from its roots and builds a **cache key**: each node's kind, its call
///     index ("NodeCall N", in breadth-first order from GraphRoot), its edges, its output
///     shapes, its saved tensors' shapes, the fingerprint of its rule's constants and the kind
///     of each hook — never tensor values — and in the same pass **collects** what each
///     node's backward reads (`node::collect`: its saved tensors, versions checked). A key
///     seen before is a hit; a new node kind is a miss ("new autograd node"); changed shapes
///     mark the sizes that changed as dynamic ("changed shapes"), as the verbose log says;
///  2. on a hit with a **plan** for these sizes (made by an earlier capture: where each input
///     of the compiled graph comes from, which hook each `call_hook` slot is, which leaf each
///     output goes to), runs the compiled graph on the collected values and the tape's hooks
///     directly and stops here: no rule runs, nothing is traced (`run_plan`);
///  3. otherwise runs the engine with the run-time tracer active: every node's backward rule (the same
///     generic code eager mode runs), gradient sums, tensor hooks written over tensors and
///     `AccumulateGrad` record into one IR graph; the backwards of `fg::jit` functions are
///     inlined; what cannot be traced (matmul, views, a hook that reads values, the fused
///     kernels of `fg::compile`) breaks the graph as in `fg::jit`;
///  4. compiles the graph with the scope's backend (tile programs, or eager node by node)
///     through the same guarded kernel cache, whose automatic dynamic shapes make a
///     shape-generic graph after a size changes, and makes the plan a later hit runs
///     (`make_plan`; none where the graph cannot run from collected values alone).
///
/// `FUSEGRAD_LOGS=compiled_autograd` prints each captured graph and its signature
/// (`forward(inputs, sizes, scalars, hooks)`, as the seed); `compiled_autograd_verbose`
/// adds the reason for each cache miss.

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "fusegrad/compile/compile.hpp"
#include "fusegrad/jit/entry.hpp"
#include "fusegrad/jit/log.hpp"
#include "fusegrad/jit/options.hpp"
#include "fusegrad/jit/tracing_scope.hpp"
#include "fusegrad/kernel/fused.hpp"

namespace fusegrad {

namespace compiled_autograd::detail {
/// Installs compiled autograd's backward runner into the engine (idempotent). A template, so
/// that only the translation units that turn compiled autograd on instantiate the capture
/// machinery: installing it from a static initializer in every TU that includes this header
/// cost ~30 s of compile time per TU at -O2.
template <class Tag>
void install() noexcept;
}  // namespace compiled_autograd::detail

/// The `compiled_autograd` switch of `fg::config()`: a `bool` that installs compiled autograd
/// when set to true.
class compiled_autograd_switch {
 public:
  template <std::same_as<bool> B>
  compiled_autograd_switch& operator=(B on) noexcept {
    store(on);
    return *this;
  }
  template <std::same_as<bool> B>
  void store(B on, std::memory_order order = std::memory_order_seq_cst) noexcept {
    if (on) compiled_autograd::detail::install<B>();
    on_.store(on, order);
  }
  [[nodiscard]] bool load(std::memory_order order = std::memory_order_seq_cst) const noexcept { return on_.load(order); }
  operator bool() const noexcept { return load(); }  // NOLINT(google-explicit-constructor): reads like the bool it is

 private:
  std::atomic<bool> on_{false};
};

/// Process-wide switches (like `torch._dynamo.config`).
struct config_t {
  compiled_autograd_switch compiled_autograd;  ///< capture every backward (see compiled_autograd.hpp)
};
inline config_t& config() noexcept {
  static config_t c;
  return c;
}

namespace compiled_autograd {

/// How captured backwards run.
struct options {
  jit_backend backend = jit_backend::fused;
  bool fullgraph = false;  ///< a graph break in the backward throws
};

namespace detail {
/// The scopes of this thread, innermost last (nullopt: a `disable` scope).
inline std::vector<std::optional<options>>& scopes() {
  thread_local std::vector<std::optional<options>> s;
  return s;
}
/// The options in effect on this thread, or null when compiled autograd is off.
inline const options* current() {
  static const options global{};
  if (!scopes().empty()) return scopes().back() ? &*scopes().back() : nullptr;
  return config().compiled_autograd.load(std::memory_order_relaxed) ? &global : nullptr;
}
}  // namespace detail

/// Turns compiled autograd on for this thread until the scope ends (the seed's context
/// manager). Use it as `enable`; it is a template only so that the capture machinery is
/// instantiated where a scope is made, not in every TU that includes this header.
template <class Tag = void>
class basic_enable {
 public:
  basic_enable() : basic_enable(options{}) {}
  explicit basic_enable(options o) {
    detail::install<Tag>();
    detail::scopes().push_back(o);
  }
  explicit basic_enable(backend::fused b) : basic_enable(options{jit_backend::fused, b.fullgraph}) {}
  explicit basic_enable(backend::aot_eager b) : basic_enable(options{jit_backend::eager, b.fullgraph}) {}
  explicit basic_enable(backend::eager b) : basic_enable(options{jit_backend::eager, b.fullgraph}) {}
  basic_enable(const basic_enable&) = delete;
  basic_enable& operator=(const basic_enable&) = delete;
  ~basic_enable() { detail::scopes().pop_back(); }
};
using enable = basic_enable<>;

/// Turns compiled autograd off for this thread until the scope ends.
class disable {
 public:
  disable() { detail::scopes().emplace_back(std::nullopt); }
  disable(const disable&) = delete;
  disable& operator=(const disable&) = delete;
  ~disable() { detail::scopes().pop_back(); }
};

namespace detail {

/// The cache key of one backward, in NodeCall order (breadth-first from GraphRoot): per node
/// a hash of its kind, edges and hook ids, its name, and its output sizes (ranks included),
/// all nodes' sizes in one array. Built into a per-thread buffer: no allocation once warm.
struct walk_key {
  std::vector<std::uint64_t> structure;
  std::vector<std::string_view> names;  ///< the nodes' own names (valid while the tape lives)
  std::vector<std::uint32_t> bytes;     ///< the key's size for each node (for the verbose log)
  std::vector<std::uint32_t> offsets;   ///< node i's sizes: [offsets[i], offsets[i + 1])
  std::vector<index_t> sizes;
  [[nodiscard]] std::size_t size() const noexcept { return structure.size(); }
};

/// A key the cache holds: the same, names owned, and which sizes are dynamic.
struct cached_key {
  std::vector<std::uint64_t> structure;
  std::vector<std::string> names;
  std::vector<std::uint32_t> bytes, offsets;
  std::vector<index_t> sizes;
  std::vector<char> dynamic;  ///< per entry of `sizes`
  /// How a hit runs the captured graph directly (`plan<T>`s, one per set of sizes, most
  /// recent first; none fits: the hit retraces and adds one).
  std::vector<std::shared_ptr<const void>> plans;
  bool no_plan = false;  ///< a capture found the tape's graph cannot be run from collected inputs
};

struct state {
  std::mutex mu;
  std::recursive_mutex capture_mu;  ///< held by each captured backward (see `run`; a hook's may nest)
  std::vector<cached_key> keys;
  std::unique_ptr<fusegrad::detail::jit::function_state> programs[2][2];  // [backend][fullgraph]
  fusegrad::detail::jit::function_state& programs_for(const options& o) {
    std::lock_guard lock(mu);  // backwards on several threads make it on first use
    auto& p = programs[o.backend == jit_backend::eager][o.fullgraph];
    if (!p) {
      jit_options jo;
      jo.name = "compiled_autograd";
      jo.fullgraph = o.fullgraph;
      jo.backend = o.backend;
      jo.recompile_limit = 64;
      jo.graph_log = logs::compiled_autograd;
      p = std::make_unique<fusegrad::detail::jit::function_state>(std::move(jo));
    }
    return *p;
  }
};
inline state& global_state() {
  static state s;
  return s;
}

/// Node pointer -> NodeCall index, open addressing (reused: no allocation once warm; a new
/// generation empties it without touching its slots).
class call_index {
 public:
  void clear() {
    if (slots_.empty()) slots_.resize(64);
    if (++gen_ == 0) {  // wrapped: every stale slot could look current
      std::fill(slots_.begin(), slots_.end(), slot{});
      gen_ = 1;
    }
    count_ = 0;
  }
  /// The index of `p`, given `next` if it has none yet; second: it was new.
  std::pair<int, bool> find_or_add(const void* p, int next) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    slot& s = probe(slots_, p, gen_);
    if (s.gen == gen_) return {s.value, false};
    s = {p, next, gen_};
    ++count_;
    return {next, true};
  }

 private:
  struct slot {
    const void* key = nullptr;
    int value = -1;
    std::uint32_t gen = 0;
  };
  /// `p`'s slot of this generation, or the free (stale) slot where it goes.
  static slot& probe(std::vector<slot>& v, const void* p, std::uint32_t gen) {
    const std::size_t mask = v.size() - 1;
    std::size_t i = static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & mask;
    while (v[i].gen == gen && v[i].key != p) i = (i + 1) & mask;
    return v[i];
  }
  void grow() {
    std::vector<slot> bigger(slots_.size() * 2);
    for (const slot& s : slots_)
      if (s.gen == gen_) probe(bigger, s.key, gen_) = s;
    slots_.swap(bigger);
  }
  std::vector<slot> slots_;
  std::size_t count_ = 0;
  std::uint32_t gen_ = 0;
};

/// What the key walk collects from the nodes of one tape (`node::collect`), in NodeCall order:
/// the tensors each node's backward reads (node q's: [offsets[q], offsets[q + 1])), the
/// nodes, and the backward's root gradients. Per thread, reused.
template <Element T>
struct collected {
  std::vector<node<T>*> order;  ///< NodeCall q + 1
  std::vector<const tensor<T>*> tensors;  ///< as the nodes hold them (valid until a node runs)
  std::vector<tensor<T>> owned;           ///< a capture's copy of `tensors`, taken before the engine runs
  std::vector<std::uint32_t> offsets;
  std::vector<tensor<T>> grads;  ///< the root gradients (given or implicit ones)
  bool all = true;               ///< every node could say what it reads (a hit may skip the rules)
};
template <Element T>
collected<T>& collected_of() {
  thread_local collected<T> c;
  return c;
}

/// The hash of a node's name, memoised by the name's address (names are string literals).
inline std::uint64_t name_hash(std::string_view name) {
  struct slot {
    const char* p = nullptr;
    std::size_t n = 0;
    std::uint64_t h = 0;
    char c0 = 0, c1 = 0;
  };
  thread_local slot memo[64];
  slot& m = memo[(reinterpret_cast<std::uintptr_t>(name.data()) >> 3) & 63];
  if (m.p == name.data() && m.n == name.size() && (name.empty() || (m.c0 == name.front() && m.c1 == name.back()))) return m.h;
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  m = {name.data(), name.size(), h, name.empty() ? '\0' : name.front(), name.empty() ? '\0' : name.back()};
  return h;
}

/// The cache key of the tape below `roots` (a per-thread buffer, valid until the next call),
/// built in the same pass that collects what each node's backward reads (`collected_of<T>()`:
/// its saved tensors, whose shapes join the key, checked for in-place changes as `apply`
/// checks them). Hooks enter the key by position and kind, not by id: an opaque hook is an
/// input of the captured graph, collected from the tape on every hit.
template <Element T>
const walk_key& make_key(const std::vector<tensor<T>>& roots) {
  thread_local walk_key key;
  thread_local call_index call;
  collected<T>& col = collected_of<T>();
  std::vector<node<T>*>& order = col.order;
  key.structure.clear();
  key.names.clear();
  key.bytes.clear();
  key.offsets.clear();
  key.sizes.clear();
  order.clear();
  col.tensors.clear();
  col.offsets.clear();
  col.all = true;
  call.clear();
  constexpr std::uint64_t basis = 1469598103934665603ULL;
  auto mix = [](std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ULL; };
  auto add_shape = [&](const shape& s) {
    key.sizes.push_back(static_cast<index_t>(s.size()));
    for (const index_t d : s) key.sizes.push_back(d);  // a few dims: no memcpy call
  };
  auto add_hooks = [&](std::uint64_t h, const std::vector<hook<T>>& hs) {
    for (const auto& hk : hs) {
      if (hk.traced) {  // traced into the graph, its constants baked in: keyed by id, never collected
        col.all = false;
        h = mix(h, hk.id);
      } else {
        h = mix(h, hk.retains_grad ? 0x52ULL : 0x48ULL);
      }
    }
    return h;
  };
  // NodeCall 0: the root, with one edge per backward root.
  std::uint64_t h = mix(basis, sizeof(T));
  key.offsets.push_back(0);
  for (const auto& r : roots) {
    const auto e = fusegrad::detail::gradient_edge(r);
    add_shape(r.shape());
    std::uint64_t target = ~0ULL;
    if (e.fn) {
      auto [idx, fresh] = call.find_or_add(e.fn.get(), static_cast<int>(order.size()) + 1);
      if (fresh) order.push_back(e.fn.get());
      target = static_cast<std::uint64_t>(idx);
    }
    h = mix(h, target);
  }
  key.structure.push_back(h);
  key.names.emplace_back("GraphRoot");
  key.bytes.push_back(static_cast<std::uint32_t>(8 + 8 * (roots.size() + key.sizes.size())));
  for (std::size_t q = 0; q < order.size(); ++q) {
    node<T>* n = order[q];
    const std::string_view name = n->name();
    key.offsets.push_back(static_cast<std::uint32_t>(key.sizes.size()));
    col.offsets.push_back(static_cast<std::uint32_t>(col.tensors.size()));
    h = name_hash(name);
    for (const auto& e : n->next_edges()) {
      std::uint64_t target = ~0ULL;
      if (e.fn) {
        auto [idx, fresh] = call.find_or_add(e.fn.get(), static_cast<int>(order.size()) + 1);
        if (fresh) order.push_back(e.fn.get());
        target = static_cast<std::uint64_t>(idx) << 8 | e.input_nr;
      }
      h = mix(h, target);
    }
    for (std::size_t i = 0; i < n->num_outputs(); ++i) {
      h = add_hooks(mix(h, 0x4F5554ULL), n->pre_hooks(i));
      add_shape(n->output_shape(i));
    }
    std::uint64_t params = 0;
    const std::size_t first = col.tensors.size();
    const bool accumulates = n->accumulates();
    if (n->applies_hooks() || !n->collect(params, col.tensors)) {
      col.all = false;
      col.tensors.resize(first);
      h = mix(h, 0xC0FFEEULL);
    } else {
      h = mix(h, params);
      // (A leaf's gradient so far is not keyed: a hit adds to it after the graph if the
      // captured graph did not; see `run_plan`.)
      for (std::size_t j = first; j < col.tensors.size() && !accumulates; ++j) {
        if (col.tensors[j] && col.tensors[j]->defined()) add_shape(col.tensors[j]->shape());
        else key.sizes.push_back(-1);
      }
    }
    if (accumulates)  // only accumulate_grad says so
      if (auto leaf = static_cast<fusegrad::detail::accumulate_grad<T>*>(n)->variable(); leaf.defined())
        h = add_hooks(mix(h, 0x4C454146ULL), leaf.raw_impl()->leaf_hooks);
    key.structure.push_back(h);
    key.names.push_back(name);
    key.bytes.push_back(static_cast<std::uint32_t>(16 + 8 * (n->next_edges().size() + key.sizes.size() - key.offsets.back())));
  }
  key.offsets.push_back(static_cast<std::uint32_t>(key.sizes.size()));
  col.offsets.push_back(static_cast<std::uint32_t>(col.tensors.size()));
  return key;
}

/// Looks `key` up (true: a hit); on a miss, records it and logs why. `found`, when given, gets
/// the cached key (valid while the caller holds `capture_mu`).
inline bool lookup(const walk_key& key, cached_key** found = nullptr) {
  auto& st = global_state();
  std::lock_guard lock(st.mu);
  // The cached key sharing the longest structural prefix.
  std::size_t best = 0;
  cached_key* best_key = nullptr;
  for (auto& c : st.keys) {
    std::size_t p = 0;
    const std::size_t m = std::min(key.size(), c.structure.size());
    if (c.structure.size() == key.size() && c.sizes == key.sizes && c.offsets == key.offsets &&
        std::equal(c.structure.begin(), c.structure.end(), key.structure.begin())) {
      if (found) *found = &c;  // the common hit: everything equal (memcmp-speed compares)
      return true;
    }
    while (p < m && c.structure[p] == key.structure[p]) ++p;
    if (p == key.size() && p == c.structure.size()) {
      // Same structure: a hit unless a static size changed.
      if (c.sizes.size() == key.sizes.size() && c.offsets == key.offsets) {
        bool same = true;
        for (std::size_t j = 0; j < key.sizes.size(); ++j)
          if (c.sizes[j] != key.sizes[j] && !c.dynamic[j]) {
            same = false;
            c.dynamic[j] = 1;
            const auto node = static_cast<std::size_t>(std::upper_bound(c.offsets.begin(), c.offsets.end(), j) - c.offsets.begin()) - 1;
            logs::emit(logs::compiled_autograd_verbose, "Cache miss due to changed shapes: marking size idx " +
                                                            std::to_string(j - c.offsets[node]) + " of " + c.names[node] +
                                                            " (NodeCall " + std::to_string(node) + ") as dynamic");
          }
        if (found) *found = &c;
        if (same) return true;
        c.sizes = key.sizes;
        return false;
      }
      // Same structure, other ranks: a new key.
    }
    if (p >= best) best = p, best_key = &c;
  }
  std::string prev = "[";
  for (const auto& c : st.keys)
    if (best < c.structure.size() && (!best_key || best_key == &c || best == 0))
      prev += (prev.size() > 1 ? ", " : "") + std::to_string(c.bytes[best]);
  prev += "]";
  if (best < key.size())
    logs::emit(logs::compiled_autograd_verbose, "Cache miss due to new autograd node: " + std::string(key.names[best]) + " (NodeCall " +
                                                    std::to_string(best) + ") with key size " + std::to_string(key.bytes[best]) +
                                                    ", previous key sizes=" + prev);
  cached_key c;
  c.structure = key.structure;
  c.names.assign(key.names.begin(), key.names.end());
  c.bytes = key.bytes;
  c.offsets = key.offsets;
  c.sizes = key.sizes;
  c.dynamic.assign(key.sizes.size(), 0);
  st.keys.push_back(std::move(c));
  if (found) *found = &st.keys.back();
  return false;
}

}  // namespace detail

/// Forgets every cached key and compiled backward (like `torch._dynamo.reset()`).
inline void reset() {
  auto& st = detail::global_state();
  std::lock_guard lock(st.mu);
  st.keys.clear();
  for (auto& row : st.programs)
    for (auto& p : row) p.reset();
}

namespace detail {

/// How a cache hit runs a captured backward without running a rule (the seed's
/// `forward(inputs, sizes, scalars, hooks)`): the captured graph's cache entry, where each of
/// its inputs comes from in what the key walk collects, the leaves its outputs accumulate
/// into, and its call slots: a matmul's or a view's backward (kept from the capture: the
/// rule's constants are in the key) or a tensor hook, collected from the tape on each hit.
template <Element T>
struct plan {
  std::shared_ptr<const fusegrad::detail::jit::entry<T>> e;
  /// The key's sizes at the capture: a plan runs on those only (equal structure, constants
  /// and sizes trace to the same graph; the graph's own inputs do not give every size a
  /// rule baked in, such as a sum's input shape in its backward's `call` node).
  std::vector<index_t> key_sizes;
  std::vector<shape> shapes;  ///< the entry's node shapes for these sizes (a shape-generic entry)
  /// Per graph input: a collected tensor (`collected::tensors` index) or root gradient `index`.
  struct source {
    bool root = false;
    std::uint32_t index = 0;
  };
  std::vector<source> inputs;
  /// Sources that were one tensor at the capture (a tensor two nodes saved: the graph reads it
  /// once, from the first): a hit runs the plan only where they are one tensor again.
  std::vector<std::pair<source, source>> same;
  std::vector<std::uint32_t> out_node;  ///< per graph output: its AccumulateGrad (NodeCall - 1)
  std::vector<char> out_added;          ///< per graph output: the graph adds the leaf's gradient so far
  std::vector<ir::call_fn<T>> fns;      ///< per call slot (a hook's is made on each hit)
  /// A hook slot: the hook at `index` of output `output` of node `node` (-1: the leaf's hooks).
  struct hook_source {
    std::uint32_t slot, node;
    int output;
    std::uint32_t index;
  };
  std::vector<hook_source> hooks;
};

/// The signature of a plan's graph, as the seed prints it.
template <Element T>
std::string signature(const plan<T>& p, const collected<T>& col) {
  auto node_of = [&](std::uint32_t flat) {
    const auto q = static_cast<std::size_t>(std::upper_bound(col.offsets.begin(), col.offsets.end(), flat) - col.offsets.begin()) - 1;
    return std::pair<std::size_t, std::uint32_t>{q, flat - col.offsets[q]};
  };
  std::string s = "compiled autograd graph: forward(inputs, sizes, scalars, hooks)\n  inputs:";
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    const auto& src = p.inputs[i];
    s += "\n    inputs[" + std::to_string(i) + "] ";
    if (src.root) {
      s += "GraphRoot (NodeCall 0) grad " + std::to_string(src.index);
    } else {
      const auto [q, k] = node_of(src.index);
      const std::string_view name = col.order[q]->name();
      s += std::string(name) + " (NodeCall " + std::to_string(q + 1) + ") " + (name == "AccumulateGrad" ? "grad so far" : "saved " + std::to_string(k));
    }
    const auto& g = p.e->inputs[i];
    s += std::string(": ") + (sizeof(T) == 4 ? "f32" : "f64") + "[";
    for (std::size_t d = 0; d < g.sizes.size(); ++d)
      s += (d ? ", " : "") + ((g.dynamic >> d) & 1U ? "s" + std::to_string(i) + "_" + std::to_string(d) : std::to_string(g.sizes[d]));
    s += "]";
  }
  s += "\n  sizes: ";
  bool any = false;
  for (std::size_t i = 0; i < p.e->inputs.size(); ++i)
    for (std::size_t d = 0; d < p.e->inputs[i].sizes.size(); ++d)
      if ((p.e->inputs[i].dynamic >> d) & 1U) s += std::string(any ? ", " : "") + "s" + std::to_string(i) + "_" + std::to_string(d), any = true;
  if (!any) s += "(all static)";
  s += "\n  scalars: (specialised, keyed on each node's constants)\n  hooks:";
  for (const auto& h : p.hooks)
    s += "\n    hooks[" + std::to_string(h.slot) + "] " + std::string(col.order[h.node]->name()) + " (NodeCall " + std::to_string(h.node + 1) + ") " +
         (h.output < 0 ? std::string("leaf") : "output " + std::to_string(h.output)) + " hook " + std::to_string(h.index);
  if (p.hooks.empty()) s += " (none)";
  s += "\n  outputs:";
  for (std::size_t o = 0; o < p.out_node.size(); ++o) s += " accumulate_grad(NodeCall " + std::to_string(p.out_node[o] + 1) + ")";
  return s;
}

/// The plan of a capture that ran as one compiled graph, or null where its graph cannot run
/// from collected values alone (a graph break, an eager fallback, an input the walk did not
/// collect, an output that is not a leaf's gradient, a hook traced into the graph).
template <Element T>
std::shared_ptr<const plan<T>> make_plan(const typename fusegrad::detail::jit::trace<T>::flush_record& rec, const collected<T>& col,
                                         const std::vector<index_t>& key_sizes) {
  if (!col.all || rec.flushes != 1 || !rec.compiled || !rec.e || rec.e->bwd || rec.e->eager) return nullptr;
  auto p = std::make_shared<plan<T>>();
  p->e = rec.e;
  p->key_sizes = key_sizes;
  if (rec.e->dynamic) p->shapes = fusegrad::detail::jit::entry_shapes(*rec.e, rec.inputs);
  // Every collected tensor and root gradient by its impl (one source per impl).
  std::vector<std::pair<const void*, typename plan<T>::source>> by_impl;
  for (std::size_t j = 0; j < col.owned.size(); ++j)
    if (col.owned[j].defined()) by_impl.push_back({col.owned[j].raw_impl().get(), {false, static_cast<std::uint32_t>(j)}});
  for (std::size_t j = 0; j < col.grads.size(); ++j) by_impl.push_back({col.grads[j].raw_impl().get(), {true, static_cast<std::uint32_t>(j)}});
  std::stable_sort(by_impl.begin(), by_impl.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  {  // one tensor, several sources (saved inputs are the tensors themselves): the first reads it
    std::size_t w = 0;
    for (std::size_t j = 0; j < by_impl.size(); ++j) {
      if (w > 0 && by_impl[j].first == by_impl[w - 1].first) {
        p->same.emplace_back(by_impl[w - 1].second, by_impl[j].second);
        continue;
      }
      by_impl[w++] = by_impl[j];
    }
    by_impl.resize(w);
  }
  for (const auto& in : rec.inputs) {
    const void* k = in.raw_impl().get();
    auto it = std::lower_bound(by_impl.begin(), by_impl.end(), k, [](const auto& a, const void* b) { return a.first < b; });
    if (it == by_impl.end() || it->first != k) return nullptr;  // made by a rule (zeros, ...): not collectable
    p->inputs.push_back(it->second);
  }
  // Outputs: the leaves' gradients.
  for (const auto* t : rec.targets) {
    bool found = false;
    for (std::size_t q = 0; q < col.order.size() && !found; ++q)
      if (col.order[q]->accumulates())
        if (auto* acc = static_cast<fusegrad::detail::accumulate_grad<T>*>(col.order[q]))
          if (auto leaf = acc->variable(); leaf.defined() && leaf.raw_impl()->grad.raw_impl().get() == t) {
            p->out_node.push_back(static_cast<std::uint32_t>(q));
            const auto flat = col.offsets[q];  // the gradient it had: an input of the graph?
            p->out_added.push_back(std::any_of(p->inputs.begin(), p->inputs.end(), [&](const auto& src) { return !src.root && src.index == flat; }));
            found = true;
          }
    if (!found) return nullptr;
  }
  // Call slots: matmul's and views' functions kept; hooks found on the tape by id.
  p->fns = rec.calls;
  for (std::size_t k = 0; k < rec.calls.size(); ++k) {
    const std::uint64_t id = rec.call_hook_ids[k];
    if (id == 0) continue;
    if (id == ~std::uint64_t{0}) return nullptr;
    bool found = false;
    for (std::size_t q = 0; q < col.order.size() && !found; ++q) {
      node<T>* n = col.order[q];
      for (std::size_t i = 0; i < n->num_outputs() && !found; ++i) {
        const auto& hs = n->pre_hooks(i);
        for (std::size_t j = 0; j < hs.size() && !found; ++j)
          if (hs[j].id == id) {
            p->hooks.push_back({static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(q), static_cast<int>(i), static_cast<std::uint32_t>(j)});
            found = true;
          }
      }
      if (!found && n->accumulates())
        if (auto* acc = static_cast<fusegrad::detail::accumulate_grad<T>*>(n))
          if (auto leaf = acc->variable(); leaf.defined()) {
            const auto& hs = leaf.raw_impl()->leaf_hooks;
            for (std::size_t j = 0; j < hs.size() && !found; ++j)
              if (hs[j].id == id) {
                p->hooks.push_back({static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(q), -1, static_cast<std::uint32_t>(j)});
                found = true;
              }
          }
    }
    if (!found) return nullptr;
    p->fns[k] = nullptr;
  }
  return p;
}

/// A cache hit: the captured graph run on the values the key walk collected, its outputs
/// accumulated into the leaves (PyTorch's AccumulateGrad: a fresh buffer is taken over).
/// False, having changed nothing, where the inputs do not fit the plan's program (the caller
/// then captures again).
template <Element T>
bool run_plan(const plan<T>& p, const collected<T>& col, bool retain_graph) {
  const auto& e = *p.e;
  thread_local std::vector<tensor<T>> inputs;
  inputs.clear();
  struct clear_inputs {
    ~clear_inputs() { inputs.clear(); }
  } clear_on_exit;
  auto tensor_of = [&](const typename plan<T>::source& src) {
    return src.root ? &col.grads[src.index] : col.tensors[src.index];
  };
  for (const auto& [a, b] : p.same) {
    const tensor<T>*ta = tensor_of(a), *tb = tensor_of(b);
    if (!ta || !tb || ta->raw_impl() != tb->raw_impl()) return false;
  }
  for (const auto& src : p.inputs) {
    const tensor<T>* t = tensor_of(src);
    if (!t || !t->defined()) return false;
    inputs.push_back(*t);
  }
  if (!e.accepts(inputs, false, e.alias_of)) return false;
  const std::vector<ir::call_fn<T>>* fns = &p.fns;
  std::vector<ir::call_fn<T>> with_hooks;
  if (!p.hooks.empty()) {
    with_hooks = p.fns;
    for (const auto& hs : p.hooks) {
      node<T>* n = col.order[hs.node];
      hook<T> h;
      if (hs.output >= 0) {
        h = n->pre_hooks(static_cast<std::size_t>(hs.output)).at(hs.index);
      } else {
        auto leaf = static_cast<fusegrad::detail::accumulate_grad<T>*>(n)->variable();
        if (!leaf.defined()) return false;
        h = leaf.raw_impl()->leaf_hooks.at(hs.index);
      }
      with_hooks[hs.slot] = [h = std::move(h)](const tensor<T>& g, const tensor<T>&) { return fusegrad::detail::apply_hook(h, g); };
    }
    fns = &with_hooks;
  }
  fusegrad::detail::bump(fusegrad::detail::counter_cells().cache_hits);
  std::vector<tensor<T>> res;
  {
    no_grad off;
    res = e.fwd->run(inputs, e.dynamic ? &p.shapes : nullptr, fns);
  }
  inputs.clear();
  for (std::size_t o = 0; o < p.out_node.size(); ++o) {
    auto leaf = static_cast<fusegrad::detail::accumulate_grad<T>*>(col.order[p.out_node[o]])->variable();
    if (!leaf.defined()) continue;
    auto& impl = *leaf.raw_impl();
    tensor<T> g = std::move(res[o]);
    std::lock_guard lock(impl.mutex);
    if (!p.out_added[o] && impl.grad.defined()) {  // captured without a gradient so far: added here, as eagerly
      impl.grad = fusegrad::detail::zip("AccumulateGrad", fusegrad::detail::accumulate_values{}, impl.grad, g);
    } else {
      if (!fusegrad::detail::owned_alone(g)) g = fusegrad::detail::contiguous_copy(g);
      impl.grad = std::move(g);
    }
  }
  if (!retain_graph)
    for (node<T>* n : col.order) n->release_saved();
  return true;
}

/// The backward runner installed into the engine while this header is included.
template <Element T>
void run(const std::vector<tensor<T>>& roots, std::vector<tensor<T>> grads, bool retain_graph) {
  const options* o = current();
  // Off, or a backward started while a capture is running (a hook's own backward): the engine.
  thread_local bool capturing = false;
  if (!o || capturing) return fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  struct flag {
    bool& f;
    explicit flag(bool& b) : f(b) { f = true; }
    ~flag() { f = false; }
  } during(capturing);
  // One captured backward at a time, process-wide: until its graph runs (fr.finish()), the
  // gradient a capture accumulates into a leaf is a lazy value of this thread's trace, which
  // another thread's backward into the same leaf must not read (docs/eager.md, "Thread safety").
  std::lock_guard one_at_a_time(global_state().capture_mu);
  // The root gradients, implicit ones made here (the engine's checks and errors where they fail).
  bool roots_ok = grads.size() == roots.size();
  for (std::size_t i = 0; i < roots.size() && roots_ok; ++i) {
    if (!fusegrad::detail::gradient_edge(roots[i]).valid()) roots_ok = false;
    else if (!grads[i].defined()) {
      if (roots[i].numel() != 1) roots_ok = false;
      else {
        grads[i] = fusegrad::detail::empty<T>(roots[i].shape());
        fusegrad::detail::fill(grads[i], T(1));
      }
    } else if (grads[i].shape() != roots[i].shape()) {
      roots_ok = false;
    }
  }
  if (!roots_ok) return fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  collected<T>& col = collected_of<T>();
  struct clear_collected {
    collected<T>& c;
    ~clear_collected() {  // no tensor outlives its backward in the thread's buffers
      c.tensors.clear();
      c.owned.clear();
      c.grads.clear();
    }
  } clear_on_exit{col};
  cached_key* ck = nullptr;
  const walk_key& key = make_key(roots);
  const bool hit = lookup(key, &ck);
  col.grads = grads;
  fusegrad::detail::bump(hit ? fusegrad::detail::counter_cells().ca_hits : fusegrad::detail::counter_cells().ca_captures);
  const bool direct = col.all && fusegrad::detail::active_recorder<T>() == nullptr;
  if (hit && direct)
    for (const auto& any : ck->plans) {
      // A hit: the captured graph runs on the collected values; no rule runs, nothing is traced.
      const auto& p = *static_cast<const plan<T>*>(any.get());
      if (p.key_sizes == key.sizes && run_plan(p, col, retain_graph)) {
        fusegrad::detail::bump(fusegrad::detail::counter_cells().ca_direct);
        return;
      }
    }
  // A miss (or a hit whose graph does not fit): the engine runs every rule under the tracer.
  using trace_t = fusegrad::detail::jit::trace<T>;
  typename trace_t::flush_record rec;
  const bool want_plan = direct && !(hit && ck->no_plan);
  fusegrad::detail::jit::tracing_scope<fusegrad::detail::jit::deferred_t<void, T>> fr(global_state().programs_for(*o));
  trace_t& tr = fr.template tracer<T>();
  if (want_plan) {
    tr.recording = &rec;
    col.owned.clear();  // what the nodes read before the engine frees or replaces it
    for (const tensor<T>* t : col.tensors) col.owned.push_back(t ? *t : tensor<T>{});
  }
  struct stop_recording {
    trace_t& t;
    ~stop_recording() { t.recording = nullptr; }
  } stop{tr};
  fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  fr.finish();
  tr.recording = nullptr;
  if (want_plan) {
    auto p = make_plan<T>(rec, col, key.sizes);
    if (p && logs::enabled(logs::compiled_autograd)) logs::emit(logs::compiled_autograd, signature(*p, col));
    std::lock_guard lock(global_state().mu);
    ck->no_plan = !p;
    if (p) {
      auto& ps = ck->plans;
      std::erase_if(ps, [&](const auto& q) { return static_cast<const plan<T>*>(q.get())->key_sizes == p->key_sizes; });
      ps.insert(ps.begin(), std::move(p));
      if (ps.size() > 8) ps.pop_back();
    }
  }
}

template <class Tag>
void install() noexcept {
  using F = fusegrad::detail::jit::deferred_t<float, Tag>;  // instantiated on use only
  using D = fusegrad::detail::jit::deferred_t<double, Tag>;
  fusegrad::detail::compiled_backward_runner<F>().store(&run<F>, std::memory_order_release);
  fusegrad::detail::compiled_backward_runner<D>().store(&run<D>, std::memory_order_release);
}

}  // namespace detail
}  // namespace compiled_autograd
}  // namespace fusegrad
