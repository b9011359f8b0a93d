#pragma once
/// \file fusegrad/core/storage.hpp
/// SIMD-aligned element buffers shared by handle between tensors and their views.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "fusegrad/core/element.hpp"

namespace fusegrad {

/// Alignment of every buffer fusegrad allocates: one cache line, enough for AVX-512.
inline constexpr std::size_t storage_alignment = 64;

namespace detail {

/// Keeps freed large buffers per thread for reuse, so a loop that allocates same-sized
/// tensors every iteration (outputs of fused kernels, gradients) does not hand memory back to
/// the OS and fault it in again each time. Buffers under 64 KiB go straight to the allocator.
class buffer_cache {
 public:
  static constexpr std::size_t min_bytes = std::size_t{64} << 10;
  static constexpr std::size_t max_cached_bytes = std::size_t{256} << 20;
  static constexpr std::size_t max_entries = 32;

  static void* allocate(std::size_t bytes) {
    if (bytes >= min_bytes && !dead()) {
      auto& c = local();
      for (std::size_t i = c.count; i-- > 0;)
        if (c.entries[i].bytes == bytes) {  // the newest of that size; the order stays oldest first
          void* p = c.entries[i].ptr;
          c.total -= bytes;
          std::move(c.entries + i + 1, c.entries + c.count, c.entries + i);
          --c.count;
          return p;
        }
    }
    return ::operator new(bytes, std::align_val_t{storage_alignment});
  }
  /// Bytes and buffers this thread's cache holds (for tests and diagnostics).
  static std::size_t cached_bytes() noexcept { return dead() ? 0 : local().total; }
  static std::size_t cached_buffers() noexcept { return dead() ? 0 : local().count; }

  /// Keeps `p` for reuse; when the cache is full, the oldest buffers make room (a loop that
  /// moved on to other sizes must not leave the cache clogged with sizes it no longer uses).
  static void release(void* p, std::size_t bytes) noexcept {
    if (bytes >= min_bytes && bytes <= max_cached_bytes && !dead()) {
      auto& c = local();
      while (c.count > 0 && (c.count == max_entries || c.total + bytes > max_cached_bytes)) {
        ::operator delete(c.entries[0].ptr, std::align_val_t{storage_alignment});
        c.total -= c.entries[0].bytes;
        std::move(c.entries + 1, c.entries + c.count, c.entries);
        --c.count;
      }
      c.entries[c.count++] = {p, bytes};
      c.total += bytes;
      return;
    }
    ::operator delete(p, std::align_val_t{storage_alignment});
  }

 private:
  struct entry {
    void* ptr;
    std::size_t bytes;
  };
  struct cache {
    entry entries[max_entries];
    std::size_t count = 0, total = 0;
    ~cache() {
      dead() = true;  // tensors destroyed after this thread's cache free directly
      for (std::size_t i = 0; i < count; ++i) ::operator delete(entries[i].ptr, std::align_val_t{storage_alignment});
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

}  // namespace fusegrad
