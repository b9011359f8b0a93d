#pragma once
/// \file fusegrad/jit/compiled_autograd.hpp
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

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

#include "fusegrad/compile/compile.hpp"
#include "fusegrad/jit/jit.hpp"
#include "fusegrad/kernel/fused.hpp"

namespace fusegrad {

/// Process-wide switches (like `torch._dynamo.config`).
struct config_t {
  std::atomic<bool> compiled_autograd{false};  ///< capture every backward (see compiled_autograd.hpp)
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

/// Turns compiled autograd on for this thread until the scope ends (the seed's context manager).
class enable {
 public:
  enable() : enable(options{}) {}
  explicit enable(options o) { detail::scopes().push_back(o); }
  explicit enable(backend::fused b) : enable(options{jit_backend::fused, b.fullgraph}) {}
  explicit enable(backend::aot_eager b) : enable(options{jit_backend::eager, b.fullgraph}) {}
  explicit enable(backend::eager b) : enable(options{jit_backend::eager, b.fullgraph}) {}
  enable(const enable&) = delete;
  enable& operator=(const enable&) = delete;
  ~enable() { detail::scopes().pop_back(); }
};

/// Turns compiled autograd off for this thread until the scope ends.
class disable {
 public:
  disable() { detail::scopes().emplace_back(std::nullopt); }
  disable(const disable&) = delete;
  disable& operator=(const disable&) = delete;
  ~disable() { detail::scopes().pop_back(); }
};

namespace detail {

/// One node of a cache key: its structure, then its sizes (which may turn dynamic).
struct key_node {
  std::string name;
  std::uint64_t structure = 0;     ///< hash of kind, edges and hook ids
  std::vector<index_t> sizes;      ///< every output shape, flattened, ranks included
  std::size_t bytes = 0;           ///< the key's size for this node (for the verbose log)
};
struct cached_key {
  std::vector<key_node> nodes;
  std::vector<std::vector<bool>> dynamic;  ///< per node, per size index
};

struct state {
  std::mutex mu;
  std::vector<cached_key> keys;
  std::unique_ptr<fusegrad::detail::jit::function_state> programs[2][2];  // [backend][fullgraph]
  fusegrad::detail::jit::function_state& programs_for(const options& o) {
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

/// The cache key of the tape below `roots`: nodes in breadth-first order from GraphRoot.
template <Element T>
std::vector<key_node> make_key(const std::vector<tensor<T>>& roots) {
  std::vector<key_node> key;
  std::vector<node<T>*> order;
  std::unordered_map<node<T>*, int> call;
  auto mix = [](std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ULL; };
  // NodeCall 0: the root, with one edge per backward root.
  key_node root{"GraphRoot", 1469598103934665603ULL, {}, 8};
  std::vector<node<T>*> frontier;
  for (const auto& r : roots) {
    const auto e = fusegrad::detail::gradient_edge(r);
    root.sizes.push_back(static_cast<index_t>(r.dim()));
    for (index_t s : r.shape()) root.sizes.push_back(s);
    if (e.fn && !call.count(e.fn.get())) {
      call[e.fn.get()] = static_cast<int>(call.size()) + 1;
      order.push_back(e.fn.get());
    }
    root.structure = mix(root.structure, e.fn ? static_cast<std::uint64_t>(call[e.fn.get()]) : ~0ULL);
  }
  root.bytes += 8 * (roots.size() + root.sizes.size());
  key.push_back(std::move(root));
  for (std::size_t q = 0; q < order.size(); ++q) {
    node<T>* n = order[q];
    key_node k{std::string(n->name()), 1469598103934665603ULL, {}, 0};
    for (char c : n->name()) k.structure = mix(k.structure, static_cast<unsigned char>(c));
    for (const auto& e : n->next_edges()) {
      std::uint64_t target = ~0ULL;
      if (e.fn) {
        auto [it, fresh] = call.try_emplace(e.fn.get(), static_cast<int>(call.size()) + 1);
        if (fresh) order.push_back(e.fn.get());
        target = static_cast<std::uint64_t>(it->second) << 8 | e.input_nr;
      }
      k.structure = mix(k.structure, target);
    }
    for (std::size_t i = 0; i < n->num_outputs(); ++i) {
      for (const auto& h : n->pre_hooks(i)) k.structure = mix(k.structure, h.id);
      k.sizes.push_back(static_cast<index_t>(n->output_shape(i).size()));
      for (index_t s : n->output_shape(i)) k.sizes.push_back(s);
    }
    if (auto* acc = dynamic_cast<fusegrad::detail::accumulate_grad<T>*>(n))
      if (auto leaf = acc->variable(); leaf.defined())
        for (const auto& h : leaf.raw_impl()->leaf_hooks) k.structure = mix(k.structure, h.id);
    k.bytes = 16 + 8 * (n->next_edges().size() + k.sizes.size());
    key.push_back(std::move(k));
  }
  return key;
}

/// Looks `key` up (true: a hit); on a miss, records it and logs why.
inline bool lookup(std::vector<key_node> key) {
  auto& st = global_state();
  std::lock_guard lock(st.mu);
  // The cached key sharing the longest structural prefix.
  std::size_t best = 0;
  cached_key* best_key = nullptr;
  for (auto& c : st.keys) {
    std::size_t p = 0;
    while (p < key.size() && p < c.nodes.size() && c.nodes[p].structure == key[p].structure) ++p;
    if (p == key.size() && p == c.nodes.size()) {
      // Same structure: a hit unless a static size changed.
      bool same = true;
      for (std::size_t i = 0; i < key.size(); ++i) {
        const auto& a = c.nodes[i].sizes;
        const auto& b = key[i].sizes;
        if (a.size() != b.size()) {
          same = false;
          continue;
        }
        for (std::size_t j = 0; j < a.size(); ++j)
          if (a[j] != b[j] && !c.dynamic[i][j]) {
            same = false;
            c.dynamic[i][j] = true;
            logs::emit(logs::compiled_autograd_verbose, "Cache miss due to changed shapes: marking size idx " + std::to_string(j) +
                                                            " of " + key[i].name + " (NodeCall " + std::to_string(i) + ") as dynamic");
          }
      }
      if (same) return true;
      for (std::size_t i = 0; i < key.size(); ++i)
        if (c.nodes[i].sizes.size() == key[i].sizes.size()) c.nodes[i].sizes = key[i].sizes;
      return false;
    }
    if (p >= best) best = p, best_key = &c;
  }
  std::string prev = "[";
  for (const auto& c : st.keys)
    if (best < c.nodes.size() && (!best_key || best_key == &c || best == 0))
      prev += (prev.size() > 1 ? ", " : "") + std::to_string(c.nodes[best].bytes);
  prev += "]";
  if (best < key.size())
    logs::emit(logs::compiled_autograd_verbose, "Cache miss due to new autograd node: " + key[best].name + " (NodeCall " +
                                                    std::to_string(best) + ") with key size " + std::to_string(key[best].bytes) +
                                                    ", previous key sizes=" + prev);
  cached_key c;
  for (const auto& k : key) c.dynamic.emplace_back(k.sizes.size(), false);
  c.nodes = std::move(key);
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
  const bool hit = lookup(make_key(roots));
  fusegrad::detail::bump(hit ? fusegrad::detail::counter_cells().ca_hits : fusegrad::detail::counter_cells().ca_captures);
  fusegrad::detail::jit::frame fr(global_state().programs_for(*o));
  fusegrad::detail::run_engine(roots, std::move(grads), retain_graph);
  fr.finish();
}

struct installer {
  installer() {
    fusegrad::detail::compiled_backward_runner<float>().store(&run<float>, std::memory_order_release);
    fusegrad::detail::compiled_backward_runner<double>().store(&run<double>, std::memory_order_release);
  }
};
inline const installer install_once{};

}  // namespace detail
}  // namespace compiled_autograd
}  // namespace fusegrad
