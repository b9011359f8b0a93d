#pragma once
/// \file fusegrad/core/storage.hpp
/// SIMD-aligned element buffers shared by handle between tensors and their views.

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "fusegrad/core/element.hpp"

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

namespace fusegrad {

/// Alignment of every buffer fusegrad allocates: one cache line, enough for AVX-512.
inline constexpr std::size_t storage_alignment = 64;

namespace detail {

/// Keeps freed buffers per thread for reuse, so that a loop allocating same-sized tensors
/// every iteration does not pay the allocator each time:
///  - small buffers (under 64 KiB) in power-of-two size classes from 64 bytes, a free list of
///    up to `small_per_class` per class: a tensor of a few elements costs a pop and a push
///    instead of an aligned `operator new` and `delete` (a large share of a small call's time);
///  - large buffers by exact size, up to `max_entries` and `fusegrad::buffer_cache_limit()`
///    bytes (oldest out first), so that they are not handed back to the OS and faulted in
///    again each time: a buffer the allocator maps afresh costs a page fault per 4 KiB on its
///    first writes (a ten-layer tanh chain over 2^24 floats frees nine 64 MiB buffers per
///    step, and runs much slower when they do not all stay cached: docs/eager.md, "Memory").
///    The byte budget is the limit that matters; `max_entries` only bounds the search, and is
///    set above the buffers one training step frees (a compiled forward and backward of a
///    40-node function frees 60 of one size), since each buffer dropped is faulted in again.
class buffer_cache {
 public:
  static constexpr std::size_t min_bytes = std::size_t{64} << 10;
  /// A lookup searches from the newest entry, so a step that takes back buffers of the size it
  /// just freed finds each at the end, whatever the count.
  static constexpr std::size_t max_entries = 256;
  /// The default of `fusegrad::buffer_cache_limit()`: an eighth of the machine's memory,
  /// from 256 MiB to 4 GiB (what a training step's activations and gradients take).
  static std::size_t default_limit() noexcept {
    std::size_t bytes = std::size_t{1} << 30;
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) bytes = static_cast<std::size_t>(pages) / 8 * static_cast<std::size_t>(page);
#endif
    return std::clamp(bytes, std::size_t{256} << 20, std::size_t{4} << 30);
  }
  /// The byte budget of each thread's large buffers (`fusegrad::set_buffer_cache_limit`).
  static std::atomic<std::size_t>& limit() noexcept {
    static std::atomic<std::size_t> bytes{default_limit()};
    return bytes;
  }
  /// Frees the large and small buffers this thread's cache holds.
  static void empty() noexcept {
    if (dead()) return;
    local().free_all();
  }
  static constexpr std::size_t small_classes = 10;  ///< 64 B, 128 B, ..., 32 KiB
  /// Small buffers kept per class: none under AddressSanitizer, whose use-after-free reports
  /// need buffers handed back to the allocator (a small tensor is where such bugs hide).
#if defined(__SANITIZE_ADDRESS__)
  static constexpr std::size_t small_per_class = 0;
#else
  static constexpr std::size_t small_per_class = 64;
#endif

  /// The bytes a request of `bytes` really takes (a small one: its class's size).
  static constexpr std::size_t rounded(std::size_t bytes) noexcept {
    return bytes < min_bytes ? std::max<std::size_t>(std::bit_ceil(bytes), storage_alignment) : bytes;
  }

  /// A small buffer from its class's free list, inline in every caller (tensors and tape
  /// nodes are made by the million; whether GCC inlined the whole function varied from one
  /// translation unit to the next); anything else out of line.
  [[gnu::always_inline]] static void* allocate(std::size_t bytes) {
    const std::size_t b = rounded(bytes);
    if (b < min_bytes && !dead()) {
      auto& fl = local().small[class_of(b)];
      if (fl.count > 0) return fl.ptr[--fl.count];
    }
    return allocate_slow(b);
  }
  /// Bytes and buffers of large sizes this thread's cache holds (for tests and diagnostics).
  static std::size_t cached_bytes() noexcept { return dead() ? 0 : local().total; }
  static std::size_t cached_buffers() noexcept { return dead() ? 0 : local().count; }

  /// Keeps `p` (allocated for `bytes`) for reuse; when the large cache is full, the oldest
  /// buffers make room (a loop that moved on to other sizes must not leave it clogged).
  [[gnu::always_inline]] static void release(void* p, std::size_t bytes) noexcept {
    const std::size_t b = rounded(bytes);
    if (b < min_bytes && !dead()) {
      auto& fl = local().small[class_of(b)];
      if (fl.count < small_per_class) {
        fl.ptr[fl.count++] = p;
        return;
      }
    }
    release_slow(p, b);
  }

 private:
  /// `allocate` of `b` (rounded) bytes past the small free lists: a large buffer of that size
  /// from the cache, else a new one.
  [[gnu::noinline]] static void* allocate_slow(std::size_t b) {
    if (!dead()) {
      auto& c = local();
      if (b >= min_bytes) {
        for (std::size_t i = c.count; i-- > 0;)
          if (c.entries[i].bytes == b) {  // the newest of that size; the order stays oldest first
            void* p = c.entries[i].ptr;
            c.total -= b;
            std::move(c.entries + i + 1, c.entries + c.count, c.entries + i);
            --c.count;
            return p;
          }
      }
    }
    return ::operator new (b, std::align_val_t{storage_alignment});
  }
  /// `release` of `b` (rounded) bytes past the small free lists: into the large cache, else
  /// back to the allocator.
  [[gnu::noinline]] static void release_slow(void* p, std::size_t b) noexcept {
    if (!dead()) {
      auto& c = local();
      const std::size_t budget = limit().load(std::memory_order_relaxed);
      if (b >= min_bytes && b <= budget) {
        while (c.count > 0 && (c.count == max_entries || c.total + b > budget)) {
          ::operator delete (c.entries[0].ptr, std::align_val_t{storage_alignment});
          c.total -= c.entries[0].bytes;
          std::move(c.entries + 1, c.entries + c.count, c.entries);
          --c.count;
        }
        c.entries[c.count++] = {p, b};
        c.total += b;
        return;
      }
    }
    ::operator delete (p, std::align_val_t{storage_alignment});
  }

  static std::size_t class_of(std::size_t b) noexcept {
    return static_cast<std::size_t>(std::countr_zero(b) - std::countr_zero(storage_alignment));
  }
  struct entry {
    void* ptr;
    std::size_t bytes;
  };
  struct free_list {
    void* ptr[small_per_class + 1];
    std::size_t count = 0;
  };
  struct cache {
    entry entries[max_entries];
    std::size_t count = 0, total = 0;
    free_list small[small_classes];
    void free_all() noexcept {
      for (std::size_t i = 0; i < count; ++i) ::operator delete (entries[i].ptr, std::align_val_t{storage_alignment});
      count = total = 0;
      for (auto& fl : small) {
        for (std::size_t i = 0; i < fl.count; ++i) ::operator delete (fl.ptr[i], std::align_val_t{storage_alignment});
        fl.count = 0;
      }
    }
    ~cache() {
      dead() = true;  // tensors destroyed after this thread's cache free directly
      free_all();
    }
  };
  static bool& dead() noexcept {
    thread_local bool d = false;  // trivially destructible: valid until the thread ends
    return d;
  }
  static cache& local() noexcept {
    thread_local cache c;
    return c;
  }
};

/// An allocator drawing from this thread's `buffer_cache` (its small size classes): what the
/// small objects made for every tensor and tape node (tensor impls, storages, nodes, with their
/// `shared_ptr` control blocks) are allocated with, so that they cost a pop and a push instead
/// of `malloc` and `free`.
template <class U>
struct pooled {
  using value_type = U;
  pooled() noexcept = default;
  template <class V>
  pooled(const pooled<V>&) noexcept {}  // NOLINT(google-explicit-constructor): rebinding
  U* allocate(std::size_t n) { return static_cast<U*>(buffer_cache::allocate(n * sizeof(U))); }
  void deallocate(U* p, std::size_t n) noexcept { buffer_cache::release(p, n * sizeof(U)); }
  template <class V>
  bool operator==(const pooled<V>&) const noexcept {
    return true;
  }
};

/// `std::make_shared<U>(args...)`, the object and its control block from `pooled`.
template <class U, class... A>
std::shared_ptr<U> make_pooled(A&&... args) {
  return std::allocate_shared<U>(pooled<U>{}, std::forward<A>(args)...);
}

}  // namespace detail

/// A flat buffer of `size` elements. Owned buffers are 64-byte aligned; a buffer made by
/// `view_of` borrows user memory and never frees it.
template <Element T>
class storage {
 public:
  explicit storage(std::size_t n) : size_(n) {
    if (n) {
      data_ = static_cast<T*>(detail::buffer_cache::allocate(n * sizeof(T)));
      owned_ = true;
    }
  }
  storage(T* borrowed, std::size_t n) noexcept : data_(borrowed), size_(n), owned_(false) {}
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;
  ~storage() {
    if (owned_) detail::buffer_cache::release(data_, size_ * sizeof(T));
  }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool owned() const noexcept { return owned_; }
  /// Counts in-place writes made through fusegrad (optimizer steps); autograd compares it
  /// with the value seen when a tensor was saved, to refuse stale saved tensors.
  [[nodiscard]] std::uint64_t version() const noexcept { return version_; }
  void bump_version() noexcept { ++version_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  bool owned_ = false;
  std::uint64_t version_ = 0;
};

/// The most bytes of freed buffers of 64 KiB and more that each thread keeps for its next
/// tensors of the same sizes (PyTorch's CUDA caching allocator keeps them the same way; its
/// CPU allocator hands them back, and pays a page fault per 4 KiB to use them again). The
/// default is an eighth of the machine's memory, between 256 MiB and 4 GiB.
inline std::size_t buffer_cache_limit() noexcept {
  return detail::buffer_cache::limit().load(std::memory_order_relaxed);
}
/// Sets `buffer_cache_limit()` for every thread; 0 keeps no large buffer. A cache over the new
/// limit gives buffers back as it next takes one; `empty_cache()` does at once.
inline void set_buffer_cache_limit(std::size_t bytes) noexcept {
  detail::buffer_cache::limit().store(bytes, std::memory_order_relaxed);
}
/// Hands every buffer this thread's cache keeps back to the allocator (`torch.cuda.empty_cache`).
inline void empty_cache() noexcept { detail::buffer_cache::empty(); }

}  // namespace fusegrad
