#pragma once
/// \file fusegrad/core/storage.hpp
/// SIMD-aligned element buffers shared by handle between tensors and their views.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "fusegrad/core/element.hpp"

namespace fusegrad {

/// Alignment of every buffer fusegrad allocates: one cache line, enough for AVX-512.
inline constexpr std::size_t storage_alignment = 64;

/// A flat buffer of `size` elements. Owned buffers are 64-byte aligned; a buffer made by
/// `view_of` borrows user memory and never frees it.
template <Element T>
class storage {
 public:
  explicit storage(std::size_t n) : size_(n) {
    if (n) {
      data_ = static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{storage_alignment}));
      owned_ = true;
    }
  }
  storage(T* borrowed, std::size_t n) noexcept : data_(borrowed), size_(n), owned_(false) {}
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;
  ~storage() {
    if (owned_) ::operator delete(data_, std::align_val_t{storage_alignment});
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
