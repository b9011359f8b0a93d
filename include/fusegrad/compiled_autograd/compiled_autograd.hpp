#pragma once
/// \file fusegrad/compiled_autograd/compiled_autograd.hpp
/// Compiled autograd: `backward()` captures the whole backward pass into the run-time IR
/// and runs it as compiled programs (the seed's compiled autograd).
///
/// When it is on (`fg::config().compiled_autograd = true`, or an `fg::compiled_autograd::enable`
/// scope on this thread), a backward pass
///  1. walks the tape from its roots and builds a **cache key**: each node's kind, its call
///     index ("NodeCall N", in breadth-first order from GraphRoot), its edges, its output
///     shapes and its hook ids — never tensor values. A key seen before is a hit; a new node
///     kind is a miss ("new autograd node"); changed shapes mark the sizes that changed as
///     dynamic ("changed shapes"), as the verbose log says;
///  2. runs the engine with the run-time tracer active: every node's backward rule (the same
///     generic code eager mode runs), gradient sums, tensor hooks written over tensors and
///     `AccumulateGrad` record into one IR graph; the backwards of `fg::jit` functions are
///     inlined; what cannot be traced (matmul, views, a hook that reads values, the fused
///     kernels of `fg::compile`) breaks the graph as in `fg::jit`;
///  3. compiles the graph with the scope's backend (tile programs, or eager node by node)
///     through the same guarded kernel cache, whose automatic dynamic shapes make a
///     shape-generic graph after a size changes.
///
/// `FUSEGRAD_LOGS=compiled_autograd` prints each captured graph; `compiled_autograd_verbose`
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

/// Node pointer -> NodeCall index, open addressing (reused: no allocation once warm).
class call_index {
 public:
  void clear() {
    if (slots_.empty()) slots_.resize(64);
    std::fill(slots_.begin(), slots_.end(), slot{});
    count_ = 0;
  }
  /// The index of `p`, given `next` if it has none yet; second: it was new.
  std::pair<int, bool> find_or_add(const void* p, int next) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    slot& s = probe(slots_, p);
    if (s.key == p) return {s.value, false};
    s = {p, next};
    ++count_;
    return {next, true};
  }

 private:
  struct slot {
    const void* key = nullptr;
    int value = -1;
  };
  static slot& probe(std::vector<slot>& v, const void* p) {
    const std::size_t mask = v.size() - 1;
    std::size_t i = static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & mask;
    while (v[i].key && v[i].key != p) i = (i + 1) & mask;
    return v[i];
  }
  void grow() {
    std::vector<slot> bigger(slots_.size() * 2);
    for (const slot& s : slots_)
      if (s.key) probe(bigger, s.key) = s;
    slots_.swap(bigger);
  }
  std::vector<slot> slots_;
  std::size_t count_ = 0;
};

/// The cache key of the tape below `roots` (a per-thread buffer, valid until the next call).
template <Element T>
const walk_key& make_key(const std::vector<tensor<T>>& roots) {
  thread_local walk_key key;
  thread_local std::vector<node<T>*> order;
  thread_local call_index call;
  key.structure.clear();
  key.names.clear();
  key.bytes.clear();
  key.offsets.clear();
  key.sizes.clear();
  order.clear();
  call.clear();
  constexpr std::uint64_t basis = 1469598103934665603ULL;
  auto mix = [](std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ULL; };
  auto add_shape = [&](const shape& s) {
    key.sizes.push_back(static_cast<index_t>(s.size()));
    key.sizes.insert(key.sizes.end(), s.begin(), s.end());
  };
  // NodeCall 0: the root, with one edge per backward root.
  std::uint64_t h = basis;
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
    h = basis;
    for (char c : name) h = mix(h, static_cast<unsigned char>(c));
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
      for (const auto& hk : n->pre_hooks(i)) h = mix(h, hk.id);
      add_shape(n->output_shape(i));
    }
    if (name == "AccumulateGrad")
      if (auto* acc = dynamic_cast<fusegrad::detail::accumulate_grad<T>*>(n))
        if (auto leaf = acc->variable(); leaf.defined())
          for (const auto& hk : leaf.raw_impl()->leaf_hooks) h = mix(h, hk.id);
    key.structure.push_back(h);
    key.names.push_back(name);
    key.bytes.push_back(static_cast<std::uint32_t>(16 + 8 * (n->next_edges().size() + key.sizes.size() - key.offsets.back())));
  }
  key.offsets.push_back(static_cast<std::uint32_t>(key.sizes.size()));
  return key;
}

/// Looks `key` up (true: a hit); on a miss, records it and logs why.
inline bool lookup(const walk_key& key) {
  auto& st = global_state();
  std::lock_guard lock(st.mu);
  // The cached key sharing the longest structural prefix.
  std::size_t best = 0;
  cached_key* best_key = nullptr;
  for (auto& c : st.keys) {
    std::size_t p = 0;
    const std::size_t m = std::min(key.size(), c.structure.size());
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
  const bool hit = lookup(make_key(roots));
  fusegrad::detail::bump(hit ? fusegrad::detail::counter_cells().ca_hits : fusegrad::detail::counter_cells().ca_captures);
  fusegrad::detail::jit::tracing_scope<fusegrad::detail::jit::deferred_t<void, T>> fr(global_state().programs_for(*o));
  fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  fr.finish();
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
