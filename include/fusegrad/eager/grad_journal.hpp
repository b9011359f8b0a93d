#pragma once
/// \file fusegrad/eager/grad_journal.hpp
/// A backward pass is all or nothing for `.grad()`: it either completes, or, when something
/// inside it throws (a hook, a custom op's backward, a rule's check, an allocation, a captured
/// graph's run), every gradient it wrote is put back as it was before that backward, and the
/// exception goes on to the caller unchanged. The next backward then starts from the same
/// gradients as if the failed one had never run.
///
/// It is cheap because gradients are never modified in place: accumulating makes a new tensor
/// and replaces the handle, so a handle is the whole state of a `.grad()`. Each write is
/// journaled (the owner, the handle before, the handle written) on the writing thread; a
/// backward is a `grad_transaction` scope, which on an exception puts back, latest first, what
/// was written since it began, and forgets the journal when the outermost one completes. A
/// backward nested in a hook is a transaction of its own inside the outer one: if it throws and
/// the hook recovers, only its own writes are undone.
///
/// Another thread's backward into the same tensor between a write and its undoing is kept: a
/// write is undone only while the gradient is still the handle it wrote.
#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "fusegrad/eager/tensor.hpp"

namespace fusegrad::detail {

template <Element T>
class grad_journal {
 public:
  /// This thread's journal.
  static grad_journal& local() noexcept {
    thread_local grad_journal j;
    return j;
  }
  /// `owner.grad = g`, journaled; the caller holds `owner.mutex`. Room for the entry is made
  /// first, so that once the gradient is written, journaling it cannot fail.
  void write(const std::shared_ptr<tensor_impl<T>>& owner, tensor<T> g) {
    if (open_ == 0) {
      owner->grad = std::move(g);
      return;
    }
    if (entries_.size() == entries_.capacity()) entries_.reserve(std::max<std::size_t>(16, 2 * entries_.capacity()));
    tensor<T> before = std::exchange(owner->grad, std::move(g));
    entries_.push_back({owner, std::move(before), owner->grad});
  }

 private:
  template <Element>
  friend class grad_transaction;
  struct entry {
    std::shared_ptr<tensor_impl<T>> owner;
    tensor<T> before, written;
  };
  /// Puts back, latest first, what was written since entry `start`.
  void undo_since(std::size_t start) noexcept {
    while (entries_.size() > start) {
      entry e = std::move(entries_.back());
      entries_.pop_back();
      std::lock_guard lock(e.owner->mutex);
      if (e.owner->grad.raw_impl() == e.written.raw_impl()) e.owner->grad = std::move(e.before);
    }
  }
  std::vector<entry> entries_;
  int open_ = 0;  ///< transactions open on this thread
};

/// The scope of one backward pass (see this header's comment).
template <Element T>
class grad_transaction {
 public:
  grad_transaction() noexcept
      : journal_(grad_journal<T>::local()), start_(journal_.entries_.size()), exceptions_(std::uncaught_exceptions()) {
    ++journal_.open_;
  }
  grad_transaction(const grad_transaction&) = delete;
  grad_transaction& operator=(const grad_transaction&) = delete;
  ~grad_transaction() {
    --journal_.open_;
    if (std::uncaught_exceptions() > exceptions_) journal_.undo_since(start_);
    else if (journal_.open_ == 0) journal_.entries_.clear();
  }

 private:
  grad_journal<T>& journal_;
  std::size_t start_;
  int exceptions_;
};

/// `owner.grad = g`, journaled for this thread's backward; the caller holds `owner.mutex`.
template <Element T>
void write_grad(const std::shared_ptr<tensor_impl<T>>& owner, tensor<T> g) {
  grad_journal<T>::local().write(owner, std::move(g));
}

}  // namespace fusegrad::detail
