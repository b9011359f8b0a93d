#pragma once
/// \file fusegrad/compile/shape_memo.hpp
/// What a compiled function's calls inferred about shapes, kept per instance (`shape_memo`):
/// per compiled graph and input shapes, every node's shape in the forward and, once a backward
/// has run with gradients of the outputs' shapes, in the backward (`shape_plan`). A call whose
/// inputs have the shapes of an earlier call reads them instead of inferring them node by node
/// again (Dynamo's guards on shapes play the same part for torch.compile's cached graphs). The
/// checks that inference makes (broadcasting, reductions, matrix products) depend on the
/// shapes alone, so a remembered plan has passed them.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "fusegrad/core/mutex.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/eager/tensor.hpp"

namespace fusegrad::detail {

/// What a pass's loops chose for each stage on one set of shapes (`fused_runner`'s
/// `stage_choice`: the strategy of the stage's loop and the node whose shape is its space).
/// The shapes decide both, so a later call on the same shapes reads them instead of making
/// the checks again. Any thread reads and writes an entry, which only ever takes one value
/// (relaxed atomics: nothing else is published through it). Stages past `capacity` are not
/// kept (their checks run every call).
class stage_choices {
 public:
  static constexpr int capacity = 32;
  /// Stage `S`'s choice, or 0 while none is kept.
  [[nodiscard]] std::uint32_t get(int S) const noexcept {
    return S < capacity ? entries_[static_cast<std::size_t>(S)].load(std::memory_order_relaxed) : 0;
  }
  /// Keeps `choice` (not 0) for stage `S`.
  void set(int S, std::uint32_t choice) noexcept {
    if (S < capacity) entries_[static_cast<std::size_t>(S)].store(choice, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<std::uint32_t>, capacity> entries_{};
};

/// The shapes of one compiled graph's nodes for one set of input shapes. Written while it is
/// made, then read only (by any thread), but for the backward's shapes, published once.
struct shape_plan {
  const void* graph = nullptr;  ///< the `compiled_graph` these are for
  std::vector<shape> forward;   ///< the forward's node shapes (M), then the inputs' (n_in): the key
  std::vector<shape> backward;  ///< the backward's node shapes (M, then the inputs'), once published
  std::size_t m = 0;            ///< nodes before the inputs' shapes
  stage_choices forward_choices, backward_choices;  ///< the loops' choices on these shapes

  /// Whether `in` has this plan's input shapes.
  template <Element T>
  bool matches(const void* g, const std::vector<tensor<T>>& in) const noexcept {
    if (g != graph || in.size() != forward.size() - m) return false;
    for (std::size_t i = 0; i < in.size(); ++i)
      if (!(in[i].shape() == forward[m + i])) return false;
    return true;
  }
  /// The backward's shapes, or null while no backward has published them.
  std::vector<shape>* backward_shapes() noexcept {
    return state_.load(std::memory_order_acquire) == ready ? &backward : nullptr;
  }
  /// Keeps `shapes` as the backward's (the first caller to finish wins; the others' are dropped).
  void publish_backward(std::vector<shape>&& shapes) noexcept {
    int expected = empty;
    if (!state_.compare_exchange_strong(expected, writing, std::memory_order_acquire, std::memory_order_relaxed))
      return;
    backward = std::move(shapes);
    state_.store(ready, std::memory_order_release);
  }

 private:
  static constexpr int empty = 0, writing = 1, ready = 2;
  std::atomic<int> state_{empty};
};

/// The plans of one compiled function's instance: the last `capacity` sets of input shapes it
/// was called with (a few: a function called with ever new shapes pays one inference a call,
/// as without the memo, and keeps a bounded number of plans). Thread-safe.
class shape_memo {
 public:
  static constexpr std::size_t capacity = 8;

  /// The plan of graph `g` for inputs `in`, or null.
  template <Element T>
  std::shared_ptr<shape_plan> find(const void* g, const std::vector<tensor<T>>& in) const {
    std::lock_guard lock(mutex_);
    for (std::size_t k = 0; k < capacity; ++k) {
      // The most recent first: a loop calling with one set of shapes finds it at once.
      const auto& p = entries_[(last_ + capacity - k) % capacity];
      if (!p) break;
      if (p->matches(g, in)) return p;
    }
    return nullptr;
  }
  /// Keeps `p` (replacing the oldest plan when full).
  void insert(std::shared_ptr<shape_plan> p) {
    std::lock_guard lock(mutex_);
    last_ = (last_ + 1) % capacity;
    entries_[last_] = std::move(p);
  }

 private:
  mutable light_mutex mutex_;
  std::array<std::shared_ptr<shape_plan>, capacity> entries_{};
  std::size_t last_ = capacity - 1;  ///< where the latest plan went
};

}  // namespace fusegrad::detail
