#pragma once
/// \file fusegrad/core/mutex.hpp
/// `light_mutex`: the lock a tape node and a tensor's autograd state hold for a few
/// instructions (checking saved tensors, swapping a gradient). Uncontended, it is one atomic
/// compare-exchange to lock and one exchange to unlock (no call into libpthread: a
/// `std::mutex` pair cost a good part of compiled autograd's key walk per node); contended, a
/// waiter sleeps on the word (C++20 `atomic::wait`, a futex on Linux), so a lock held through
/// a long rule (a node's `apply`) costs the waiting thread no CPU. While the
/// process has one thread, both are a plain load and store (glibc's mutex does the same:
/// without it, the locked instructions made a node's lock slower than `std::mutex`). It is not
/// recursive, like `std::mutex`, and meets the Lockable requirements (`std::lock_guard`).
///
/// The states are Drepper's ("Futexes Are Tricky", mutex 3): 0 unlocked, 1 locked, 2 locked
/// with a thread possibly waiting; only an unlock that finds 2 wakes a waiter.

#include <atomic>
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>  // glibc 2.32+: __libc_single_threaded
#define FUSEGRAD_HAS_SINGLE_THREADED 1
#endif

namespace fusegrad::detail {

/// True while the process has never started a second thread (glibc's flag, which libstdc++'s
/// `shared_ptr` reads for the same purpose); false where the C library does not say.
inline bool process_single_threaded() noexcept {
#if defined(FUSEGRAD_HAS_SINGLE_THREADED)
  return __libc_single_threaded != 0;
#else
  return false;
#endif
}

class light_mutex {
 public:
  light_mutex() = default;
  light_mutex(const light_mutex&) = delete;
  light_mutex& operator=(const light_mutex&) = delete;

  void lock() noexcept {
    // No other thread exists (nor can one start without synchronising with this one): a plain
    // load and store, as glibc's own mutex does then, instead of a locked instruction.
    if (process_single_threaded() && state_.load(std::memory_order_relaxed) == 0) {
      state_.store(1, std::memory_order_relaxed);
      return;
    }
    int expected = 0;
    if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed)) [[unlikely]]
      lock_contended();
  }
  [[nodiscard]] bool try_lock() noexcept {
    int expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (process_single_threaded()) {  // nobody can be waiting
      state_.store(0, std::memory_order_relaxed);
      return;
    }
    if (state_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
      state_.notify_one();
  }

 private:
  [[gnu::noinline]] void lock_contended() noexcept {
    // Marks the lock as waited on, then sleeps while it stays held; whoever takes it here
    // leaves it at 2 (there may be other waiters), so its unlock wakes the next one.
    while (state_.exchange(2, std::memory_order_acquire) != 0) state_.wait(2, std::memory_order_relaxed);
  }

  std::atomic<int> state_{0};
};

}  // namespace fusegrad::detail
