#pragma once
/// \file fusegrad/functional/eigen.hpp
/// Eigen vectors, arrays, matrices and `Eigen::Map`s as arguments of the functional
/// transforms (`fg::grad`, `fg::value_and_grad`, `fg::hvp`, ...): their elements are read in
/// place (storage order; a view with gaps is refused with an error), and a gradient comes
/// back as the argument's plain type (`Eigen::VectorXd` for a `Map<VectorXd>`), or is written
/// into any of these with `.into(...)`.
///
/// Optional: Eigen is no dependency of fusegrad. This header does nothing unless
/// `<Eigen/Core>` can be included (Debian: `libeigen3-dev`, `-I/usr/include/eigen3`, or link
/// CMake's `Eigen3::Eigen`).
#if __has_include(<Eigen/Core>)

#include <concepts>
#include <ranges>

#include <Eigen/Core>

#include "fusegrad/core/error.hpp"
#include "fusegrad/functional/call.hpp"

namespace fusegrad {

namespace detail {
/// A dense Eigen object with storage (`data()`), elements one apart along its inner dim.
// clang-format 14 misreads a parenthesis after && in a concept:
// clang-format off
template <class D>
concept EigenStorage = std::derived_from<D, Eigen::DenseBase<D>> && requires(const D& d) { d.data(); } &&
                       Element<typename D::Scalar> && (int(D::InnerStrideAtCompileTime) == 1) &&
                       !std::ranges::contiguous_range<const D&>;
// clang-format on
}  // namespace detail

template <detail::EigenStorage D>
struct range_source<D> {
  static constexpr bool value = true;
  using element_type = typename D::Scalar;
  static const element_type* data(const D& a) {
    if (!D::IsVectorAtCompileTime && a.outerStride() != a.innerSize())
      detail::fail("grad", "an Eigen block of ", a.rows(), " x ", a.cols(), " with outer stride ", a.outerStride(),
                   " has gaps between its columns; expected contiguous storage (evaluate it into a matrix)");
    return a.data();
  }
  static index_t size(const D& a) { return static_cast<index_t>(a.size()); }
  /// The argument's plain type, of its size, to hold its gradient.
  static typename D::PlainObject make_like(const D& a) { return typename D::PlainObject(a.rows(), a.cols()); }
};

}  // namespace fusegrad

#endif
