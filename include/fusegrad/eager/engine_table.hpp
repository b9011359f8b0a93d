#pragma once
/// \file fusegrad/eager/engine_table.hpp
/// The backward engine's per-pass bookkeeping: a node's dependency count and gradient
/// buffers in an open-addressing table a thread reuses from pass to pass, one per nested pass.

#include <cstddef>
#include <memory>
#include <vector>

#include "fusegrad/core/hash.hpp"
#include "fusegrad/eager/node.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad::detail {

/// Per-node bookkeeping of one backward pass (dependency counts, the gradient buffers), in an
/// open-addressing table keyed by node that a thread reuses from pass to pass: no hash-map
/// nodes allocated per node and pass. A hook that runs a backward of its own (nested passes
/// on one thread) gets the next table of the thread's stack.
template <Element T>
class engine_table {
 public:
  struct slot {
    node<T>* key = nullptr;
    std::size_t deps = 0;
    std::vector<tensor<T>> buffer;
    signed char needed = -1;  ///< fg::autograd::grad: 1 if a captured edge is reachable from here
  };
  /// Empties the slots the last pass used (their gradients released), keeping the capacity;
  /// a table grown by one huge pass shrinks back, so that later small passes stay cheap.
  void clear() {
    if (slots_.size() > 4096 && used_.size() * 8 < slots_.size()) {
      std::vector<slot>(64).swap(slots_);
      used_.clear();
      used_.shrink_to_fit();
    } else {
      if (slots_.empty()) slots_.resize(64);
      for (std::size_t i : used_) {
        slot& s = slots_[i];
        s.key = nullptr;
        s.deps = 0;
        s.needed = -1;
        s.buffer.clear();  // keeps its capacity
      }
      used_.clear();
    }
  }
  /// The slot of `n`, made on first use; `fresh` tells which.
  slot& at(node<T>* n, bool* fresh = nullptr) {
    if (2 * (used_.size() + 1) > slots_.size()) grow();
    const std::size_t i = probe(slots_, n);
    slot& s = slots_[i];
    if (fresh) *fresh = !s.key;
    if (!s.key) {
      s.key = n;
      used_.push_back(i);
    }
    return s;
  }

  /// The slot of `n`, which the pass has made (every node the counting walk reached has one):
  /// no check for growth, so the references it hands out stay valid through the pass.
  slot& find(node<T>* n) noexcept { return slots_[probe(slots_, n)]; }

 private:
  static std::size_t probe(const std::vector<slot>& v, const node<T>* p) {
    const std::size_t mask = v.size() - 1;
    std::size_t i = pointer_slot(p, mask);
    while (v[i].key && v[i].key != p) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<slot> bigger(std::max<std::size_t>(64, slots_.size() * 2));
    std::vector<std::size_t> used;
    used.reserve(used_.size() * 2);
    for (std::size_t i : used_) {
      const std::size_t j = probe(bigger, slots_[i].key);
      bigger[j] = std::move(slots_[i]);
      used.push_back(j);
    }
    slots_.swap(bigger);
    used_.swap(used);
  }
  std::vector<slot> slots_;        ///< size a power of two
  std::vector<std::size_t> used_;  ///< indices of the slots in use
};

/// This thread's engine tables: one per nested backward pass.
template <Element T>
struct engine_tables {
  std::vector<std::unique_ptr<engine_table<T>>> stack;
  std::size_t depth = 0;
  /// The table of a new pass (released by `done`).
  engine_table<T>& acquire() {
    if (depth == stack.size()) stack.push_back(std::make_unique<engine_table<T>>());
    return *stack[depth++];
  }
  /// Ends the innermost pass: its slots are emptied (no gradient outlives its pass).
  void release() noexcept { stack[--depth]->clear(); }
  static engine_tables& local() {
    thread_local engine_tables t;
    return t;
  }
};

}  // namespace fusegrad::detail
