#pragma once
/// \file fusegrad/eager/views.hpp
/// Layout ops: reshape/view, expand, permute, transpose, select, slice, unsqueeze, squeeze
/// (views sharing storage), contiguous/clone (copies) and cat. Each records its backward.

#include <initializer_list>
#include <numeric>

#include "fusegrad/eager/pointwise.hpp"

namespace fusegrad {
namespace detail {

/// Writes `src` (broadcast to `dst`'s shape) into the strided view `dst`.
template <Element T>
void copy_into(const tensor<T>& dst, const tensor<T>& src) {
  const strides ss = broadcast_strides(src, dst.shape());
  T* pd = dst.impl()->store ? dst.impl()->store->data() : nullptr;
  const T* ps = src.impl()->store ? src.impl()->store->data() : nullptr;
  for_each_row<2>(dst.shape(), {&dst.strides(), &ss}, {dst.offset(), src.offset()},
                  [&](std::array<index_t, 2> b, index_t n, std::array<index_t, 2> s) {
                    for (index_t k = 0; k < n; ++k) pd[b[0] + k * s[0]] = ps[b[1] + k * s[1]];
                  });
}

template <Element T>
tensor<T> zeros_of(const shape& s) {
  tensor<T> z = empty<T>(s);
  fill(z, T(0));
  return z;
}

/// Resolves one -1 in a requested shape and checks the element count.
inline shape infer_shape(std::string_view op, const shape& from, shape to) {
  int infer = -1;
  for (std::size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (infer >= 0) fail(op, "shape ", to_string(to), " has more than one -1; expected at most one");
      infer = static_cast<int>(i);
    } else if (to[i] < 0) {
      fail(op, "invalid size ", to[i], " in shape ", to_string(to), "; expected sizes >= 0 or one -1");
    }
  }
  shape known_sizes = to;  // the -1 counts as 1 in the (overflow-checked) product of the others
  if (infer >= 0) known_sizes[static_cast<std::size_t>(infer)] = 1;
  const index_t known = check_shape(op, known_sizes);
  const index_t n = numel(from);
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      fail(op, "shape ", to_string(to), " is invalid for input of shape ", to_string(from), " (", n, " elements)");
    to[static_cast<std::size_t>(infer)] = n / known;
  } else if (known != n) {
    fail(op, "shape ", to_string(to), " (", known, " elements) is invalid for input of shape ", to_string(from),
         "; expected a shape with ", n, " elements");
  }
  return to;
}

/// Records a single-input layout op whose backward is `rule(g)`. In a traced backward the
/// rule is an opaque `call` node (layouts are not in the IR), unless `traceable`. `params`
/// (`params_of` the constants `rule` holds, `x`'s shape aside: the key holds it, as the
/// output shape of `x`'s node) makes the node collectable.
template <Element T, class Rule>
void record_layout(std::string_view name, const tensor<T>& x, tensor<T>& y, Rule rule, bool traceable = false,
                   std::optional<std::uint64_t> params = std::nullopt,
                   double_backward twice = double_backward::supported) {
  if (!needs_grad(x)) return;
  if (params) params = params_of(*params, traceable);
  record<T>(
      name, {x}, {&y}, {},
      [rule = std::move(rule), name, traceable, from = x.shape()](const std::vector<tensor<T>>&,
                                                                  std::vector<tensor<T>>& g) {
        if (traceable) return std::vector<tensor<T>>{rule(g[0])};
        return std::vector<tensor<T>>{call_opaque<T>(
            name, from, [rule](const tensor<T>& v, const tensor<T>&) { return rule(v); }, g[0])};
      },
      params, twice);
}

/// The adjoint of a linear read (a view, `index_select`): `g` put into zeros of shape `from`
/// by `put(z, g)` (on values: nothing recorded). In a create_graph backward, where `g` is on the
/// tape, the result is recorded as `name` with `read` as its rule, so it is differentiable as
/// often as `read` is (PyTorch's `SliceBackwardBackward0` pairs: the read's backward is the
/// put, the put's backward the read).
template <Element T, class Put, class Read>
tensor<T> put_into_zeros(std::string_view name, const tensor<T>& g, const shape& from, Put put, Read read,
                         std::optional<std::uint64_t> params) {
  tensor<T> z = zeros_of<T>(from);
  put(z, g.detach());
  record_layout(name, g, z, read, false, params, double_backward::supported);
  return z;
}

}  // namespace detail

/// A copy of `x` with its own contiguous storage (CloneBackward0).
template <Element T>
tensor<T> clone(const tensor<T>& x) {
  tensor<T> y = detail::contiguous_copy(x);
  detail::record_layout(
      std::string_view("CloneBackward0"), x, y, [](const tensor<T>& g) { return g; }, /*traceable=*/true,
      detail::params_of(0));
  return y;
}

/// `x` itself if contiguous, else a contiguous copy.
template <Element T>
tensor<T> contiguous(const tensor<T>& x) {
  return x.is_contiguous() ? x : clone(x);
}

/// A view of a contiguous tensor with a new shape (one size may be -1).
template <Element T>
tensor<T> view(const tensor<T>& x, const shape& s) {
  if (!x.is_contiguous())
    detail::fail("view", "tensor of shape ", to_string(x.shape()),
                 " is not contiguous; expected a contiguous tensor (use reshape)");
  shape to = detail::infer_shape("view", x.shape(), s);
  tensor<T> y = detail::alias(x, to, contiguous_strides(to), x.offset());
  detail::record_layout(
      std::string_view("ViewBackward0"), x, y, [from = x.shape()](const tensor<T>& g) { return g.reshape(from); },
      false, detail::params_of(0));
  return y;
}

/// `x` with a new shape: a view when possible, else a copy (one size may be -1).
template <Element T>
tensor<T> reshape(const tensor<T>& x, const shape& s) {
  detail::infer_shape("reshape", x.shape(), s);
  return view(contiguous(x), s);
}

/// Broadcasts size-1 dims (and adds leading dims) without copying; -1 keeps a size.
template <Element T>
tensor<T> expand(const tensor<T>& x, const shape& s) {
  const auto& xs = x.shape();
  if (s.size() < xs.size())
    detail::fail("expand", "cannot expand shape ", to_string(xs), " to ", to_string(s), "; expected at least ",
                 xs.size(), " dims");
  const std::size_t lead = s.size() - xs.size();
  shape to(s.size());
  strides st(s.size(), 0);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i < lead) {
      if (s[i] < 0) detail::fail("expand", "size -1 is not allowed in a new leading dim of ", to_string(s));
      to[i] = s[i];
      continue;
    }
    if (s[i] < -1) detail::fail("expand", "invalid size ", s[i], " in ", to_string(s), "; expected sizes >= 0 or -1");
    const index_t have = xs[i - lead], want = s[i] == -1 ? have : s[i];
    if (have != want && have != 1)
      detail::fail("expand", "cannot expand shape ", to_string(xs), " to ", to_string(s), ": dim ", i, " has size ",
                   have, "; expected size 1 or ", want);
    to[i] = want;
    st[i] = have == want ? x.strides()[i - lead] : 0;
  }
  check_shape("expand", to);
  tensor<T> y = detail::alias(x, to, st, x.offset());
  detail::record_layout(
      std::string_view("ExpandBackward0"), x, y, [from = xs](const tensor<T>& g) { return detail::sum_to(g, from); },
      /*traceable=*/true, detail::params_of(0));
  return y;
}

/// Reorders dims: result dim i is input dim `dims[i]`.
template <Element T>
tensor<T> permute(const tensor<T>& x, const std::vector<index_t>& dims) {
  const std::size_t r = x.dim();
  if (dims.size() != r)
    detail::fail("permute", "got ", dims.size(), " dims for a tensor of shape ", to_string(x.shape()), "; expected ",
                 r);
  std::vector<index_t> inv(r, -1);
  shape to(r);
  strides st(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::size_t d = normalize_dim("permute", dims[i], r);
    if (inv[d] != -1) detail::fail("permute", "dim ", d, " repeats; expected a permutation of 0..", r - 1);
    inv[d] = static_cast<index_t>(i);
    to[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  tensor<T> y = detail::alias(x, to, st, x.offset());
  detail::record_layout(
      std::string_view("PermuteBackward0"), x, y, [inv](const tensor<T>& g) { return g.permute(inv); }, false,
      detail::params_of(inv));
  return y;
}

/// Swaps two dims (a view).
template <Element T>
tensor<T> transpose(const tensor<T>& x, index_t d0, index_t d1) {
  const std::size_t a = normalize_dim("transpose", d0, x.dim()), b = normalize_dim("transpose", d1, x.dim());
  shape to = x.shape();
  strides st = x.strides();
  if (x.dim() > 0) {
    std::swap(to[a], to[b]);
    std::swap(st[a], st[b]);
  }
  tensor<T> y = detail::alias(x, to, st, x.offset());
  detail::record_layout(
      std::string_view("TransposeBackward0"), x, y, [d0, d1](const tensor<T>& g) { return g.transpose(d0, d1); }, false,
      detail::params_of(d0, d1));
  return y;
}

/// Index `i` of dim `d`, removing that dim (a view).
template <Element T>
tensor<T> select(const tensor<T>& x, index_t d, index_t i) {
  if (x.dim() == 0) detail::fail("select", "cannot select from a 0-d tensor; expected at least 1 dim");
  const std::size_t dd = normalize_dim("select", d, x.dim());
  const index_t n = x.shape()[dd];
  if (i < -n || i >= n)
    detail::fail("select", "index ", i, " is out of range for dim ", dd, " of size ", n, " (shape ",
                 to_string(x.shape()), "); expected an index in [", -n, ", ", n - 1, "]");
  const index_t ii = i < 0 ? i + n : i;
  shape to = x.shape();
  strides st = x.strides();
  const index_t off = x.offset() + ii * st[dd];
  to.erase(to.begin() + static_cast<std::ptrdiff_t>(dd));
  st.erase(st.begin() + static_cast<std::ptrdiff_t>(dd));
  tensor<T> y = detail::alias(x, to, st, off);
  detail::record_layout(
      std::string_view("SelectBackward0"), x, y,
      [from = x.shape(), dd, ii](const tensor<T>& g) {
        const auto d = static_cast<index_t>(dd);
        return detail::put_into_zeros<T>(
            "SelectBackwardBackward0", g, from,
            [d, ii](tensor<T>& z, const tensor<T>& v) { detail::copy_into(select(z, d, ii), v); },
            [d, ii](const tensor<T>& gg) { return select(gg, d, ii); }, detail::params_of(dd, ii));
      },
      false, detail::params_of(dd, ii));
  return y;
}

/// Elements `start, start+step, ...` below `stop` of dim `d` (a view). Bounds are clamped
/// like Python slices; negative bounds count from the end.
template <Element T>
tensor<T> slice(const tensor<T>& x, index_t d, index_t start, index_t stop, index_t step = 1) {
  if (x.dim() == 0) detail::fail("slice", "cannot slice a 0-d tensor; expected at least 1 dim");
  if (step <= 0) detail::fail("slice", "step ", step, " is not supported; expected step > 0");
  const std::size_t dd = normalize_dim("slice", d, x.dim());
  const index_t n = x.shape()[dd];
  auto clamp = [n](index_t v) { return std::clamp<index_t>(v < 0 ? v + n : v, 0, n); };
  const index_t b = clamp(start), e = std::max(clamp(stop), clamp(start));
  shape to = x.shape();
  strides st = x.strides();
  to[dd] = e == b ? 0 : (e - b - 1) / step + 1;  // no overflow for a huge step
  const index_t off = x.offset() + b * st[dd];
  if (to[dd] > 1) st[dd] *= step;  // fits: (to - 1) * step < e - b, an extent of x
  tensor<T> y = detail::alias(x, to, st, off);
  detail::record_layout(
      std::string_view("SliceBackward0"), x, y,
      [from = x.shape(), dd, b, e, step](const tensor<T>& g) {
        const auto d = static_cast<index_t>(dd);
        return detail::put_into_zeros<T>(
            "SliceBackwardBackward0", g, from,
            [d, b, e, step](tensor<T>& z, const tensor<T>& v) { detail::copy_into(slice(z, d, b, e, step), v); },
            [d, b, e, step](const tensor<T>& gg) { return slice(gg, d, b, e, step); },
            detail::params_of(dd, b, e, step));
      },
      false, detail::params_of(dd, b, e, step));
  return y;
}

/// Inserts a size-1 dim at `d` (a view).
template <Element T>
tensor<T> unsqueeze(const tensor<T>& x, index_t d) {
  const std::size_t dd = normalize_dim("unsqueeze", d, x.dim() + 1);
  shape to = x.shape();
  strides st = x.strides();
  const index_t inner = dd < x.dim() ? st[dd] * to[dd] : 1;
  to.insert(to.begin() + static_cast<std::ptrdiff_t>(dd), 1);
  st.insert(st.begin() + static_cast<std::ptrdiff_t>(dd), inner);
  tensor<T> y = detail::alias(x, to, st, x.offset());
  detail::record_layout(
      std::string_view("UnsqueezeBackward0"), x, y,
      [dd](const tensor<T>& g) { return g.squeeze(static_cast<index_t>(dd)); }, false, detail::params_of(dd));
  return y;
}

/// Removes dim `d` if its size is 1 (otherwise returns an alias of `x`, like PyTorch).
template <Element T>
tensor<T> squeeze(const tensor<T>& x, index_t d) {
  if (x.dim() == 0) return x;
  const std::size_t dd = normalize_dim("squeeze", d, x.dim());
  if (x.shape()[dd] != 1) return x;
  shape to = x.shape();
  strides st = x.strides();
  to.erase(to.begin() + static_cast<std::ptrdiff_t>(dd));
  st.erase(st.begin() + static_cast<std::ptrdiff_t>(dd));
  tensor<T> y = detail::alias(x, to, st, x.offset());
  detail::record_layout(
      std::string_view("SqueezeBackward1"), x, y,
      [dd](const tensor<T>& g) { return g.unsqueeze(static_cast<index_t>(dd)); }, false, detail::params_of(dd));
  return y;
}

/// Concatenates tensors along dim `d`; all other sizes must match.
template <Element T>
tensor<T> cat(const std::vector<tensor<T>>& xs, index_t d = 0) {
  if (xs.empty()) detail::fail("cat", "got an empty list; expected at least one tensor");
  const shape& s0 = xs[0].shape();
  if (s0.empty()) detail::fail("cat", "zero-dimensional tensor (at position 0) cannot be concatenated");
  const std::size_t dd = normalize_dim("cat", d, s0.size());
  shape to = s0;
  to[dd] = 0;
  std::vector<index_t> sizes;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const shape& s = xs[k].shape();
    bool ok = s.size() == s0.size();
    for (std::size_t i = 0; ok && i < s.size(); ++i) ok = i == dd || s[i] == s0[i];
    if (!ok)
      detail::fail("cat", "tensor ", k, " has shape ", to_string(s), " but tensor 0 has shape ", to_string(s0),
                   "; expected equal sizes except in dim ", dd);
    sizes.push_back(s[dd]);
    if (__builtin_add_overflow(to[dd], s[dd], &to[dd]))
      detail::fail("cat", "the sizes of dim ", dd, " add up to more than ", std::numeric_limits<index_t>::max(),
                   "; expected a result that fits a 64-bit index");
  }
  tensor<T> y = detail::empty<T>(to, "cat");
  index_t at = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    detail::copy_into(slice(y.detach(), static_cast<index_t>(dd), at, at + sizes[k]), xs[k]);
    at += sizes[k];
  }
  if (detail::needs_grad(xs)) {
    tensor<T>* const out[] = {&y};
    detail::record<T>(
        "CatBackward0", std::span<const tensor<T>>(xs), std::span<tensor<T>* const>(out), {},
        [sizes, dd](const std::vector<tensor<T>>&, std::vector<tensor<T>>& g) {
          std::vector<tensor<T>> r;
          index_t a = 0;
          for (index_t n : sizes) {
            r.push_back(slice(g[0], static_cast<index_t>(dd), a, a + n));
            a += n;
          }
          return r;
        },
        std::nullopt, detail::double_backward::supported);
  }
  return y;
}
/// `cat({a, b}, d)`: a braced list of tensors (it does not deduce the vector overload's type).
template <Element T>
tensor<T> cat(std::initializer_list<tensor<T>> xs, index_t d = 0) {
  return cat(std::vector<tensor<T>>(xs), d);
}

// Member spellings of the layout ops.
template <Element T>
tensor<T> tensor<T>::contiguous() const {
  return fusegrad::contiguous(*this);
}
template <Element T>
tensor<T> tensor<T>::clone() const {
  return fusegrad::clone(*this);
}
template <Element T>
tensor<T> tensor<T>::reshape(const fusegrad::shape& s) const {
  return fusegrad::reshape(*this, s);
}
template <Element T>
tensor<T> tensor<T>::view(const fusegrad::shape& s) const {
  return fusegrad::view(*this, s);
}
template <Element T>
tensor<T> tensor<T>::expand(const fusegrad::shape& s) const {
  return fusegrad::expand(*this, s);
}
template <Element T>
tensor<T> tensor<T>::permute(const std::vector<index_t>& d) const {
  return fusegrad::permute(*this, d);
}
template <Element T>
tensor<T> tensor<T>::transpose(index_t a, index_t b) const {
  return fusegrad::transpose(*this, a, b);
}
template <Element T>
tensor<T> tensor<T>::select(index_t d, index_t i) const {
  return fusegrad::select(*this, d, i);
}
template <Element T>
tensor<T> tensor<T>::slice(index_t d, index_t a, index_t b, index_t s) const {
  return fusegrad::slice(*this, d, a, b, s);
}
template <Element T>
tensor<T> tensor<T>::unsqueeze(index_t d) const {
  return fusegrad::unsqueeze(*this, d);
}
template <Element T>
tensor<T> tensor<T>::squeeze(index_t d) const {
  return fusegrad::squeeze(*this, d);
}

}  // namespace fusegrad
