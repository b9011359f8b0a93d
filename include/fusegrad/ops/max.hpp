#pragma once
/// \file fusegrad/ops/max.hpp
/// The max reduction's backward rule (the reduction itself: eager/reduce.hpp and each
/// representation). Max over all elements or over dims (values only). The gradient flows to the maximal
/// elements, split evenly between ties (PyTorch's `amax` rule); a NaN max (any NaN element:
/// the max propagates NaN) sends it to the NaN elements, as PyTorch does. An empty reduction
/// throws.
#include "fusegrad/ops/add.hpp"
#include "fusegrad/ops/compare.hpp"
#include "fusegrad/ops/reduce.hpp"
#include "fusegrad/ops/step.hpp"
#include "fusegrad/ops/sub.hpp"

namespace fusegrad {

namespace detail {
/// The max's backward rule, in pieces over any algebra (eager tensors, expression types, IR
/// values; each path reduces and broadcasts its own way): `g * hits / count`, with
/// `hits = max_hits(x, y)` (y, the max, broadcast back to x) and `count` = `max_count(s)`
/// broadcast back (s, the sum of `hits` over the reduced dims).
///
/// 1 where `x` reaches the max `y`: equal to it, or NaN (a NaN max means NaN elements, which
/// are the ones it came from; otherwise no element is NaN).
template <class X, class Y>
auto max_hits(const X& x, const Y& y) {
  return eq(x, y) + ne(x, x);
}
/// The hits' sum `s`, with 1 for 0: a slice that no element reaches (the max computed from
/// values rounded differently) gets no gradient rather than 0 / 0 = NaN.
template <class S>
auto max_count(const S& s) {
  return s + (1.0 - sign(s));
}
}  // namespace detail

}  // namespace fusegrad
