#pragma once
/// \file fusegrad/compiled_autograd/key.hpp
/// The cache key of a backward and what the same walk collects: the tape walked from its
/// roots in NodeCall order (`make_key`), each node's kind, edges, output shapes, saved
/// tensors' shapes, rule constants and hook kinds hashed into a per-thread key, its saved
/// tensors collected (versions checked) for a hit to run on; the process-wide cache of keys
/// (`lookup`, `reset`), whose hits compare what the hashes stand for, not only the hashes.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "fusegrad/core/hash.hpp"
#include "fusegrad/compiled_autograd/options.hpp"
#include "fusegrad/eager/engine.hpp"
#include "fusegrad/jit/entry.hpp"
#include "fusegrad/jit/log.hpp"

namespace fusegrad {
namespace compiled_autograd {

namespace detail {

/// A growing array that the key walk appends to a few times per node: its append is inlined
/// (std::vector's push_back is not, in the walk: its growth path is large), and checks room
/// against a count it keeps (not the vector's size, two loads and a subtraction). Reused
/// across walks: `clear` keeps the storage.
template <class V>
class append_buffer {
 public:
  void clear() noexcept { n_ = 0; }
  [[gnu::always_inline]] void push_back(const V& v) {
    if (n_ == room_) [[unlikely]]
      grow();
    store_[n_++] = v;
  }
  /// Appends `n` values, to be written at the address returned: one check for room for all.
  [[gnu::always_inline]] V* extend(std::size_t n) {
    while (n_ + n > room_) [[unlikely]] grow();
    V* d = store_.data() + n_;
    n_ += n;
    return d;
  }
  /// Equal values, in order, as `r` (another buffer or a vector).
  template <class R>
  [[nodiscard]] friend bool operator==(const append_buffer& a, const R& r) {
    return std::equal(a.begin(), a.end(), r.begin(), r.end());
  }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  V& operator[](std::size_t i) noexcept { return store_[i]; }
  const V& operator[](std::size_t i) const noexcept { return store_[i]; }
  [[nodiscard]] const V* begin() const noexcept { return store_.data(); }
  [[nodiscard]] const V* end() const noexcept { return store_.data() + n_; }

 private:
  [[gnu::noinline]] void grow() {
    store_.resize(std::max<std::size_t>(64, 2 * store_.size()));
    room_ = store_.size();
  }
  std::vector<V> store_;
  std::size_t n_ = 0;
  std::size_t room_ = 0;  ///< `store_.size()`
};

/// The cache key of one backward, in NodeCall order (breadth-first from GraphRoot): per node
/// its words (edges, hook kinds, rule constants), its name and its output sizes (ranks
/// included), all nodes' sizes in one array. A hit compares these, not hashes. The per-node
/// hashes (`structure`, with the key's size per node for the verbose log) are made from them
/// only where a lookup needs them (`hash_nodes`: a key that is not a cached one, whose longest
/// shared prefix a miss logs). Built into a per-thread buffer: no allocation once warm.
struct walk_key {
  std::vector<std::uint64_t> structure;  ///< per node, the hash of its name and words (`hash_nodes`)
  /// Per node, a header word (how many words follow, and in its high half how many edges the
  /// node has), then those words: what a hit compares, with the names.
  append_buffer<std::uint64_t> words;
  append_buffer<std::string_view> names;  ///< the nodes' own names (valid while the tape lives)
  std::vector<std::uint32_t> bytes;       ///< the key's size for each node (for the verbose log; `hash_nodes`)
  std::vector<std::uint32_t> offsets;     ///< node i's sizes: [offsets[i], offsets[i + 1])
  append_buffer<index_t> sizes;
  [[nodiscard]] std::size_t size() const noexcept { return names.size(); }
};

/// A key the cache holds: the same, names owned, and which sizes are dynamic. (Its vectors
/// compare equal to a walk's buffers: `append_buffer::operator==`.)
struct cached_key {
  std::vector<std::uint64_t> structure, words;
  std::vector<std::string> names;
  std::vector<std::uint32_t> bytes, offsets;
  std::vector<index_t> sizes;
  std::vector<char> dynamic;  ///< per entry of `sizes`
  /// How a hit runs the captured graph directly (`plan<T>`s, one per set of sizes, most
  /// recent first; none fits: the hit retraces and adds one).
  std::vector<std::shared_ptr<const void>> plans;
  bool no_plan = false;  ///< a capture found the tape's graph cannot be run from collected inputs
  /// Its capture ran the graph eagerly as a fallback (past the recompile limit, or too large
  /// to compile) and made no plan: later backwards run on the eager engine, not traced again.
  bool eager_only = false;
};

struct state {
  std::mutex mu;
  std::recursive_mutex capture_mu;  ///< held by each captured backward (see `run`; a hook's may nest)
  std::deque<cached_key> keys;      ///< (a deque: a capture nested in a hook adds one, the outer one keeps its pointer)
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
    std::size_t i = fusegrad::detail::pointer_slot(p, mask);
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
  std::vector<node<T>*> order;            ///< NodeCall q + 1
  std::vector<const tensor<T>*> tensors;  ///< as the nodes hold them (valid until a node runs)
  std::vector<tensor<T>> owned;           ///< a capture's copy of `tensors`, taken before the engine runs
  /// A capture's scalar inputs (`node::scalar_input`): their nodes (NodeCall - 1) and the 0-d
  /// tensors the rules read them from. (Not collected on a hit: a plan reads its nodes'.)
  std::vector<std::uint32_t> scalar_node;
  std::vector<tensor<T>> scalar_tensors;
  std::vector<std::uint32_t> offsets;
  /// Per AccumulateGrad, in NodeCall order: its leaf as the walk locked it to read its hooks
  /// (undefined: gone), kept until the backward ends; a hit writes the gradients and reads the
  /// leaf hooks through these, locking no weak reference again (`plan::out_leaf`).
  std::vector<tensor<T>> leaves;
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
  if (m.p == name.data() && m.n == name.size() && (name.empty() || (m.c0 == name.front() && m.c1 == name.back())))
    return m.h;
  const std::uint64_t h = fusegrad::detail::fnv1a().mix(name).value();
  m = {name.data(), name.size(), h, name.empty() ? '\0' : name.front(), name.empty() ? '\0' : name.back()};
  return h;
}

/// One key walk (`make_key`): the per-thread buffers it fills, and its phases. The phases are
/// inlined into the walk's loop: it runs on every backward, a few nanoseconds per node, and a
/// call per word or per size would double it. Nothing is hashed here: a hit compares the
/// words themselves, so hashing them on every backward would be work only a miss uses.
template <Element T>
struct key_walk {
  walk_key& key;
  call_index& call;
  collected<T>& col;

  /// Empties the buffers of the previous walk (their capacity kept).
  void start() {
    key.structure.clear();
    key.words.clear();
    key.names.clear();
    key.bytes.clear();  // (structure and bytes: filled by `hash_nodes` where a lookup needs them)
    key.offsets.clear();
    key.sizes.clear();
    col.order.clear();
    col.leaves.clear();
    col.tensors.clear();
    col.offsets.clear();
    col.all = true;
    call.clear();
  }

  /// The NodeCall index of `fn`, queued for the walk when it is new.
  [[gnu::always_inline]] std::uint64_t node_call(node<T>* fn) {
    auto [idx, fresh] = call.find_or_add(fn, static_cast<int>(col.order.size()) + 1);
    if (fresh) col.order.push_back(fn);
    return static_cast<std::uint64_t>(idx);
  }

  /// Keeps `w` among the node's words, for a hit to compare.
  [[gnu::always_inline]] void mix(std::uint64_t w) { key.words.push_back(w); }

  /// Starts a node's words with room for their header (the count makes equal words mean
  /// equal nodes, not only an equal concatenation).
  [[gnu::always_inline]] std::size_t start_words() {
    key.words.push_back(0);
    return key.words.size();
  }
  /// Ends a node: its name, its header (words' count, and `edges` for the key's size per node).
  [[gnu::always_inline]] void end_node(std::string_view name, std::size_t words_from, std::size_t edges) {
    key.words[words_from - 1] = (key.words.size() - words_from) | static_cast<std::uint64_t>(edges) << 32;
    key.names.push_back(name);
  }

  /// A shape's rank, then its dims (a few values: a store each, no memcpy call).
  [[gnu::always_inline]] void add_shape(const shape& s) {
    const std::size_t rank = s.size();
    index_t* d = key.sizes.extend(1 + rank);
    d[0] = static_cast<index_t>(rank);
    const index_t* dims = s.data();
    for (std::size_t i = 0; i < rank; ++i) d[1 + i] = dims[i];
  }

  [[gnu::always_inline]] void add_hooks(const std::vector<hook<T>>& hs) {
    for (const auto& hk : hs) {
      if (hk.traced) {  // traced into the graph, its constants baked in: keyed by id, never collected
        col.all = false;
        mix(hk.id);
      } else {
        mix(hk.retains_grad ? 0x52ULL : 0x48ULL);
      }
    }
  }

  /// NodeCall 0: the root, with one edge per backward root.
  void add_root(const std::vector<tensor<T>>& roots) {
    const std::size_t words_from = start_words();
    mix(sizeof(T));
    key.offsets.push_back(0);
    for (const auto& r : roots) {
      const auto e = fusegrad::detail::gradient_edge(r);
      add_shape(r.shape());
      mix(e.fn ? node_call(e.fn.get()) : ~0ULL);
    }
    end_node("GraphRoot", words_from, roots.size());
  }

  /// NodeCall q + 1 (`n`): its name, edges, outputs, what its backward reads, its leaf's hooks.
  [[gnu::always_inline]] void add_node(node<T>* n) {
    const std::string_view name = n->name();
    key.offsets.push_back(static_cast<std::uint32_t>(key.sizes.size()));
    col.offsets.push_back(static_cast<std::uint32_t>(col.tensors.size()));
    const std::size_t words_from = start_words();
    add_edges(*n);
    add_outputs(*n);
    if (n->accumulates()) add_leaf(*n);  // only accumulate_grad says so
    else add_saved(*n);
    end_node(name, words_from, n->next_edges().size());
  }

  /// Each edge by its target's NodeCall and input slot (none: ~0).
  [[gnu::always_inline]] void add_edges(node<T>& n) {
    for (const auto& e : n.next_edges()) mix(e.fn ? node_call(e.fn.get()) << 8 | e.input_nr : ~0ULL);
  }

  /// Each output's hooks (by kind) and shape.
  [[gnu::always_inline]] void add_outputs(node<T>& n) {
    const shape* s = n.output_shapes().begin();
    for (const auto& hooks : n.pre_hook_lists()) {
      mix(0x4F5554ULL);
      add_hooks(hooks);
      add_shape(*s++);
    }
  }

  /// What the node's backward reads (`node::collect`): its rule's constants keyed, its saved
  /// tensors collected and their shapes keyed; a node that cannot say (or applies hooks
  /// itself) makes the walk partial.
  [[gnu::always_inline]] void add_saved(node<T>& n) {
    std::uint64_t params = 0;
    const std::size_t first = col.tensors.size();
    if (n.applies_hooks() || !n.collect(params, col.tensors)) {
      col.all = false;
      col.tensors.resize(first);
      mix(0xC0FFEEULL);
      return;
    }
    mix(params);
    for (std::size_t j = first; j < col.tensors.size(); ++j) {
      if (col.tensors[j] && col.tensors[j]->defined()) add_shape(col.tensors[j]->raw_impl()->sizes);
      else key.sizes.push_back(-1);
    }
  }

  /// An AccumulateGrad: what its `collect` reads (its leaf's gradient so far, and whether the
  /// leaf is alive as its constant), then its leaf hooks (by kind), the leaf locked once for
  /// both and kept (`collected::leaves`). Every AccumulateGrad adds a word: equal keys have
  /// them at the same NodeCalls, so a plan's index into `leaves` holds on each of its hits.
  /// (A leaf's gradient so far is not keyed: a hit adds to it after the graph if the captured
  /// graph did not; see `run_plan`.)
  [[gnu::always_inline]] void add_leaf(node<T>& n) {
    auto leaf = static_cast<fusegrad::detail::accumulate_grad<T>&>(n).variable();
    if (n.applies_hooks()) {  // (as `add_saved`: no AccumulateGrad says so today)
      col.all = false;
      mix(0xC0FFEEULL);
    } else {
      std::uint64_t params = 0;
      fusegrad::detail::accumulate_grad<T>::collect_leaf(leaf, params, col.tensors);
      mix(params);
    }
    if (leaf.defined()) {
      mix(0x4C454146ULL);
      add_hooks(leaf.raw_impl()->leaf_hooks);
    } else {
      mix(0x474F4E45ULL);
    }
    col.leaves.push_back(std::move(leaf));
  }

  /// Closes the last node's ranges of sizes and collected tensors.
  void finish() {
    key.offsets.push_back(static_cast<std::uint32_t>(key.sizes.size()));
    col.offsets.push_back(static_cast<std::uint32_t>(col.tensors.size()));
  }
};

/// The cache key of the tape below `roots` (a per-thread buffer, valid until the next call),
/// built in the same pass that collects what each node's backward reads (`collected_of<T>()`:
/// its saved tensors, whose shapes join the key, checked for in-place changes as `apply`
/// checks them). Hooks enter the key by position and kind, not by id: an opaque hook is an
/// input of the captured graph, collected from the tape on every hit.
template <Element T>
walk_key& make_key(const std::vector<tensor<T>>& roots) {
  thread_local walk_key key;
  thread_local call_index call;
  key_walk<T> walk{key, call, collected_of<T>()};
  walk.start();
  walk.add_root(roots);
  for (std::size_t q = 0; q < walk.col.order.size(); ++q) {  // (the walk queues more)
    // The nodes lie wherever the forward allocated them: each is a cache miss, which the
    // next queued node's prefetch overlaps with this node's walk.
    if (q + 1 < walk.col.order.size()) __builtin_prefetch(walk.col.order[q + 1]);
    walk.add_node(walk.col.order[q]);
  }
  walk.finish();
  return key;
}

/// The `n` bytes at `p` (1 to 8) as a word, in two overlapping loads: no loop over bytes.
[[gnu::always_inline]] inline std::uint64_t short_text_word(const char* p, std::size_t n) noexcept {
  if (n >= 4) {
    std::uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return lo | static_cast<std::uint64_t>(hi) << 32;
  }
  return static_cast<std::uint64_t>(static_cast<unsigned char>(p[0])) |
         static_cast<std::uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8 |
         static_cast<std::uint64_t>(static_cast<unsigned char>(p[n - 1])) << 16;
}

/// `a == b` for the short texts of node names, inlined: eight bytes a step and the last eight
/// (overlapping) at once, not a call to memcmp nor a loop over bytes per node.
[[gnu::always_inline]] inline bool same_text(std::string_view a, std::string_view b) noexcept {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  if (n < 8) return n == 0 || short_text_word(a.data(), n) == short_text_word(b.data(), n);
  std::uint64_t x = 0, y = 0;
  for (std::size_t i = 0; i + 8 < n; i += 8) {
    std::memcpy(&x, a.data() + i, 8);
    std::memcpy(&y, b.data() + i, 8);
    if (x != y) return false;
  }
  std::memcpy(&x, a.data() + n - 8, 8);
  std::memcpy(&y, b.data() + n - 8, 8);
  return x == y;
}

/// Whether cached key `c` stands for the tape `key` stands for, their hashes being equal:
/// every word the hashes mixed, and every node's name, compared (a collision is no hit).
inline bool same_nodes(const cached_key& c, const walk_key& key) {
  if (!std::equal(c.words.begin(), c.words.end(), key.words.begin(), key.words.end())) return false;
  if (c.names.size() != key.names.size()) return false;
  for (std::size_t i = 0; i < c.names.size(); ++i) {
    if (!same_text(c.names[i], key.names[i])) return false;
  }
  return true;
}

/// The per-node hashes of `key` (`structure`: each node's name and words) and its size per node
/// (`bytes`, for the verbose log), made from its words; kept where `structure` is already
/// filled (a key hashed before, or given other hashes by a caller).
inline void hash_nodes(walk_key& key) {
  if (key.structure.size() == key.size()) return;
  key.structure.clear();
  key.bytes.clear();
  std::size_t w = 0;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const std::uint64_t header = key.words[w++];
    const std::size_t count = header & 0xFFFFFFFFULL, edges = header >> 32;
    fusegrad::detail::fnv1a h(name_hash(key.names[i]));
    for (std::size_t k = 0; k < count; ++k) h.mix(key.words[w++]);
    key.structure.push_back(h.value());
    key.bytes.push_back(
        static_cast<std::uint32_t>((i == 0 ? 8 : 16) + 8 * (edges + key.offsets[i + 1] - key.offsets[i])));
  }
}

/// How many NodeCalls `c` and `key` share from the root.
inline std::size_t common_prefix(const cached_key& c, const walk_key& key) {
  std::size_t p = 0;
  const std::size_t m = std::min(key.size(), c.structure.size());
  while (p < m && c.structure[p] == key.structure[p]) ++p;
  return p;
}

/// A key of the same nodes whose sizes differ: each static size that changed is marked
/// dynamic (and logged); true when none did (a hit).
inline bool same_static_sizes(cached_key& c, const walk_key& key) {
  bool same = true;
  for (std::size_t j = 0; j < key.sizes.size(); ++j)
    if (c.sizes[j] != key.sizes[j] && !c.dynamic[j]) {
      same = false;
      c.dynamic[j] = 1;
      const auto node =
          static_cast<std::size_t>(std::upper_bound(c.offsets.begin(), c.offsets.end(), j) - c.offsets.begin()) - 1;
      logs::emit(logs::compiled_autograd_verbose, "Cache miss due to changed shapes: marking size idx " +
                                                      std::to_string(j - c.offsets[node]) + " of " + c.names[node] +
                                                      " (NodeCall " + std::to_string(node) + ") as dynamic");
    }
  return same;
}

/// Logs a miss's first new node: where `key` leaves `best_key`, the cached key sharing the
/// longest prefix (`best` NodeCalls), with the key sizes the cached keys have there.
inline void log_new_node(const state& st, const walk_key& key, std::size_t best, const cached_key* best_key) {
  std::string prev = "[";
  for (const auto& c : st.keys)
    if (best < c.structure.size() && (!best_key || best_key == &c || best == 0))
      prev += (prev.size() > 1 ? ", " : "") + std::to_string(c.bytes[best]);
  prev += "]";
  if (best < key.size())
    logs::emit(logs::compiled_autograd_verbose, "Cache miss due to new autograd node: " + std::string(key.names[best]) +
                                                    " (NodeCall " + std::to_string(best) + ") with key size " +
                                                    std::to_string(key.bytes[best]) + ", previous key sizes=" + prev);
}

/// Stores `key` (a miss), its names owned and none of its sizes dynamic yet.
inline cached_key& add_key(state& st, const walk_key& key) {
  cached_key c;
  c.structure = key.structure;
  c.words.assign(key.words.begin(), key.words.end());
  c.names.assign(key.names.begin(), key.names.end());
  c.bytes = key.bytes;
  c.offsets = key.offsets;
  c.sizes.assign(key.sizes.begin(), key.sizes.end());
  c.dynamic.assign(key.sizes.size(), 0);
  st.keys.push_back(std::move(c));
  return st.keys.back();
}

/// Looks `key` up (true: a hit); on a miss, records it and logs why. `found`, when given, gets
/// the cached key (valid while the caller holds `capture_mu`). The common hit, a cached key
/// with everything equal, compares words, sizes and names (memcmp-speed) and hashes nothing;
/// only a key that is none of them is hashed (`hash_nodes`), to find the cached key sharing
/// its longest prefix.
inline bool lookup(walk_key& key, cached_key** found = nullptr) {
  auto& st = global_state();
  std::lock_guard lock(st.mu);
  for (auto& c : st.keys) {
    if (c.names.size() == key.size() && key.sizes == c.sizes && c.offsets == key.offsets && same_nodes(c, key)) {
      if (found) *found = &c;
      return true;
    }
  }
  hash_nodes(key);
  // The cached key sharing the longest structural prefix.
  std::size_t best = 0;
  cached_key* best_key = nullptr;
  for (auto& c : st.keys) {
    const std::size_t p = common_prefix(c, key);
    // Same structure and ranks (other ranks: a new key).
    if (p == key.size() && p == c.structure.size() && c.sizes.size() == key.sizes.size() && c.offsets == key.offsets) {
      if (same_nodes(c, key)) {  // a hit unless a static size changed
        if (found) *found = &c;
        if (same_static_sizes(c, key)) return true;
        c.sizes.assign(key.sizes.begin(), key.sizes.end());
        return false;
      }
      logs::emit(logs::compiled_autograd_verbose,
                 "Cache miss due to a hash collision: a cached key has these hashes for other nodes");
    }
    if (p >= best) best = p, best_key = &c;
  }
  log_new_node(st, key, best, best_key);
  cached_key& c = add_key(st, key);
  if (found) *found = &c;
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

}  // namespace compiled_autograd
}  // namespace fusegrad
