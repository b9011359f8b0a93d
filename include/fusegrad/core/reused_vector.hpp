#pragma once
/// \file fusegrad/core/reused_vector.hpp
/// `reused_vector<X>`: a `std::vector<X>` for the length of a scope whose buffer the thread
/// keeps for its next use, so that a function called again and again (a compiled function's
/// per-call list of node values) allocates once per thread instead of once per call.

#include <utility>
#include <vector>

namespace fusegrad::detail {

/// Takes the thread's spare buffer of `std::vector<X>` (`Tag`: one spare per use site) on
/// construction and gives it back, emptied, on destruction. A use nested in another on the same
/// thread finds the spare taken and works on a buffer of its own; the larger of the two is kept.
template <class X, class Tag = void>
class reused_vector {
 public:
  reused_vector() noexcept { v_.swap(spare()); }
  ~reused_vector() {
    v_.clear();  // the elements go now, the capacity stays
    if (std::vector<X>& s = spare(); v_.capacity() > s.capacity()) v_.swap(s);
  }
  reused_vector(const reused_vector&) = delete;
  reused_vector& operator=(const reused_vector&) = delete;

  std::vector<X>& operator*() noexcept { return v_; }
  std::vector<X>* operator->() noexcept { return &v_; }
  const std::vector<X>& operator*() const noexcept { return v_; }
  const std::vector<X>* operator->() const noexcept { return &v_; }

 private:
  static std::vector<X>& spare() noexcept {
    thread_local std::vector<X> s;
    return s;
  }
  std::vector<X> v_;
};

}  // namespace fusegrad::detail
