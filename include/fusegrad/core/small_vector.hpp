#pragma once
/// \file fusegrad/core/small_vector.hpp
/// `small_vector<T, N>`: a vector of trivially copyable values that keeps up to `N` of them in
/// place and allocates only beyond: what shapes and strides are (core/shape.hpp), so that a
/// tensor of rank <= 6 costs no allocation for its sizes and strides. Its interface is the part
/// of `std::vector`'s that fusegrad uses, with the same meaning.

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace fusegrad {

template <class T, std::size_t N>
class small_vector {
  static_assert(std::is_trivially_copyable_v<T>, "fusegrad::small_vector holds trivially copyable values only");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  small_vector() noexcept = default;
  explicit small_vector(size_type n) { resize(n); }
  small_vector(size_type n, const T& v) { assign(n, v); }
  small_vector(std::initializer_list<T> il) { assign(il.begin(), il.end()); }
  template <std::input_iterator It>
  small_vector(It first, It last) {
    assign(first, last);
  }
  /// From a `std::vector` (dims, user code written against the old `using shape = std::vector`).
  small_vector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT(google-explicit-constructor)
  small_vector(const small_vector& o) {
    if (o.size_ <= N) {  // the usual case: one fixed-size copy of the inline slots (no call)
      std::memcpy(local_, o.data(), sizeof(local_));
      size_ = o.size_;
    } else {
      copy_from(o.data(), o.size_);
    }
  }
  small_vector(small_vector&& o) noexcept {
    if (o.heap_) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      size_ = o.size_;
      o.heap_ = nullptr;
      o.cap_ = N;
      o.size_ = 0;
    } else {
      std::memcpy(local_, o.local_, sizeof(local_));  // fixed size: no call
      size_ = o.size_;
      o.size_ = 0;
    }
  }
  small_vector& operator=(const small_vector& o) {
    if (this == &o) return *this;
    if (!heap_ && o.size_ <= N) {
      std::memcpy(local_, o.data(), sizeof(local_));
      size_ = o.size_;
    } else {
      copy_from(o.data(), o.size_);
    }
    return *this;
  }
  small_vector& operator=(small_vector&& o) noexcept {
    if (this == &o) return *this;
    if (o.heap_) {
      release();
      heap_ = o.heap_;
      cap_ = o.cap_;
      size_ = o.size_;
      o.heap_ = nullptr;
      o.cap_ = N;
      o.size_ = 0;
    } else {
      copy_from(o.data(), o.size_);
      o.size_ = 0;
    }
    return *this;
  }
  small_vector& operator=(std::initializer_list<T> il) {
    assign(il.begin(), il.end());
    return *this;
  }
  ~small_vector() { release(); }

  /// A `std::vector` with the same values.
  [[nodiscard]] std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }
  operator std::vector<T>() const { return to_vector(); }  // NOLINT(google-explicit-constructor)

  [[nodiscard]] size_type size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] size_type capacity() const noexcept { return cap_; }
  [[nodiscard]] T* data() noexcept { return heap_ ? heap_ : local_; }
  [[nodiscard]] const T* data() const noexcept { return heap_ ? heap_ : local_; }
  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size_; }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size_; }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
  T& operator[](size_type i) noexcept { return data()[i]; }
  const T& operator[](size_type i) const noexcept { return data()[i]; }
  T& at(size_type i) {
    if (i >= size_) throw std::out_of_range("fusegrad::small_vector::at");
    return data()[i];
  }
  const T& at(size_type i) const {
    if (i >= size_) throw std::out_of_range("fusegrad::small_vector::at");
    return data()[i];
  }
  T& front() noexcept { return data()[0]; }
  const T& front() const noexcept { return data()[0]; }
  T& back() noexcept { return data()[size_ - 1]; }
  const T& back() const noexcept { return data()[size_ - 1]; }

  void reserve(size_type n) {
    if (n > cap_) grow_to(n);
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_type n) { resize(n, T{}); }
  void resize(size_type n, const T& v) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, v);
    size_ = n;
  }
  /// Resizes to `n`, leaving new elements uninitialised for the caller to write (as
  /// `std::make_unique_for_overwrite` does): no fill before the values that overwrite it.
  void resize_for_overwrite(size_type n) {
    reserve(n);
    size_ = n;
  }
  void assign(size_type n, const T& v) {
    size_ = 0;
    resize(n, v);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    if constexpr (std::contiguous_iterator<It> && std::is_same_v<std::iter_value_t<It>, T>) {
      copy_from(std::to_address(first), static_cast<size_type>(last - first));
    } else {
      size_ = 0;
      if constexpr (std::forward_iterator<It>) reserve(static_cast<size_type>(std::distance(first, last)));
      for (; first != last; ++first) push_back(*first);
    }
  }
  void assign(std::initializer_list<T> il) { assign(il.begin(), il.end()); }
  void push_back(const T& v) {
    if (size_ == cap_) grow_to(cap_ * 2);
    data()[size_++] = v;
  }
  template <class... A>
  T& emplace_back(A&&... a) {
    push_back(T(std::forward<A>(a)...));
    return back();
  }
  void pop_back() noexcept { --size_; }
  iterator insert(const_iterator pos, const T& v) { return insert(pos, size_type{1}, v); }
  iterator insert(const_iterator pos, size_type n, const T& v) {
    const auto at = static_cast<size_type>(pos - begin());
    reserve(size_ + n);
    T* p = data();
    std::memmove(p + at + n, p + at, (size_ - at) * sizeof(T));
    std::fill(p + at, p + at + n, v);
    size_ += n;
    return p + at;
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    const auto at = static_cast<size_type>(pos - begin());
    const small_vector tail(begin() + at, end());
    size_ = at;
    for (; first != last; ++first) push_back(*first);
    for (const T& v : tail) push_back(v);
    return begin() + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> il) { return insert(pos, il.begin(), il.end()); }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const auto a = static_cast<size_type>(first - begin()), b = static_cast<size_type>(last - begin());
    T* p = data();
    std::memmove(p + a, p + b, (size_ - b) * sizeof(T));
    size_ -= b - a;
    return p + a;
  }
  void swap(small_vector& o) noexcept {
    small_vector t(std::move(o));
    o = std::move(*this);
    *this = std::move(t);
  }

  /// Element by element in a loop: shapes are a few dims, and `std::equal` on them is a
  /// `memcmp` call (a shape is compared on every binary op and in every fused pass).
  friend bool operator==(const small_vector& a, const small_vector& b) noexcept {
    if (a.size_ != b.size_) return false;
    const T* const pa = a.data();
    const T* const pb = b.data();
    for (size_type i = 0; i < a.size_; ++i)
      if (!(pa[i] == pb[i])) return false;
    return true;
  }
  friend bool operator==(const small_vector& a, const std::vector<T>& b) noexcept {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend auto operator<=>(const small_vector& a, const small_vector& b) noexcept {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void copy_from(const T* p, size_type n) {
    if (n > cap_) {
      size_ = 0;
      grow_to(n);
    }
    std::memmove(data(), p, n * sizeof(T));
    size_ = n;
  }
  // Out of line and cold: `push_back` and `reserve` stay a compare and a store where inlined.
  [[gnu::noinline, gnu::cold]] void grow_to(size_type n) {
    n = std::max(n, N);
    // NOLINTBEGIN(bugprone-sizeof-expression): the size of an element, which may be a pointer
    T* p = static_cast<T*>(::operator new(n * sizeof(T)));
    std::memcpy(p, data(), size_ * sizeof(T));
    // NOLINTEND(bugprone-sizeof-expression)
    release();
    heap_ = p;
    cap_ = n;
  }
  void release() noexcept {
    if (heap_) ::operator delete(heap_);
    heap_ = nullptr;
    cap_ = N;
  }

  T* heap_ = nullptr;
  size_type size_ = 0;
  size_type cap_ = N;
  T local_[N];
};

}  // namespace fusegrad
