#pragma once
/// \file fusegrad/eager/tensor.hpp
/// `fusegrad::tensor<T>`: a handle to shaped, strided, SIMD-aligned storage with an
/// autograd history. Copying a tensor shares it (like LibTorch's `at::Tensor`); views share
/// storage with their base.

#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/error.hpp"
#include "fusegrad/core/operand.hpp"
#include "fusegrad/core/grad_mode.hpp"
#include "fusegrad/core/mutex.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/storage.hpp"
#include "fusegrad/eager/recorder.hpp"

namespace fusegrad {

template <Element T>
class tensor;

/// A gradient hook of a `tensor<T>`: called with the gradient, returns nothing or a
/// replacement gradient (see `tensor::register_hook`).
template <class F, class T>
concept TensorHook = std::invocable < F&,
        const tensor<T>
& > ;

template <Element T>
class node;

namespace detail {
template <Element T>
struct tensor_impl;

/// What a lazy tensor (one the run-time tracer has recorded but not computed) calls when its
/// value is needed: the tracer's flush (a graph break), implemented in fusegrad/jit/trace.hpp.
struct lazy_source {
  virtual void realize(std::string_view why) = 0;

 protected:
  ~lazy_source() = default;
};

inline std::uint64_t next_id() noexcept {
  static std::atomic<std::uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace detail

/// A gradient hook: takes the incoming gradient, returns a replacement or nothing.
template <Element T>
struct hook {
  std::uint64_t id;
  std::function<std::optional<tensor<T>>(const tensor<T>&)> fn;
  bool traced = false;        ///< a generic callable: compiled autograd traces it instead of calling it
  bool retains_grad = false;  ///< `retain_grad`'s hook: runs after the tensor's other hooks (`order_hooks`)
};

/// A callable whose call operator is a template (a generic lambda): it can be called on the
/// tracer's lazy tensors and traced, rather than called as an opaque function.
template <class F>
concept generic_callable = std::is_class_v<std::remove_cvref_t<F>> && !requires {
  &std::remove_cvref_t<F>::operator();
};

/// Where a gradient flows: input slot `input_nr` of node `fn` (null: nowhere).
template <Element T>
struct edge {
  std::shared_ptr<node<T>> fn;
  std::size_t input_nr = 0;
  [[nodiscard]] bool valid() const noexcept { return fn != nullptr; }
};

/// Options of `backward(...)`.
struct backward_options {
  bool retain_graph = false;  ///< keep the saved tensors for another backward
  /// Record the backward itself, so that the gradients accumulated into `.grad()` have a
  /// history and can be differentiated again (double backward); implies retain_graph. Runs
  /// on the eager engine (compiled autograd does not capture it).
  bool create_graph = false;
};

/// True for `fusegrad::tensor<float>` and `fusegrad::tensor<double>`.
template <class X>
inline constexpr bool is_tensor_v = false;
template <Element T>
inline constexpr bool is_tensor_v<tensor<T>> = true;

/// A fusegrad eager tensor (of any supported element type).
template <class X>
concept Tensor = is_tensor_v<std::remove_cvref_t<X>>;

template <Element T>
struct operand_traits<tensor<T>> {
  static constexpr bool value = true;
  using element_type = T;
};

template <Element T>
class tensor {
 public:
  using value_type = T;

  /// An undefined tensor: holds no data (like a default `at::Tensor`).
  tensor() = default;
  explicit tensor(std::shared_ptr<detail::tensor_impl<T>> impl) noexcept : impl_(std::move(impl)) {}

  // --- metadata -------------------------------------------------------------------------
  [[nodiscard]] bool defined() const noexcept { return impl_ != nullptr; }
  [[nodiscard]] const fusegrad::shape& shape() const { return checked("shape").sizes; }
  [[nodiscard]] const fusegrad::strides& strides() const { return checked("strides").st; }
  [[nodiscard]] std::size_t dim() const { return shape().size(); }
  [[nodiscard]] index_t size(index_t d) const { return shape()[normalize_dim("size", d, dim())]; }
  [[nodiscard]] index_t numel() const { return fusegrad::numel(shape()); }
  [[nodiscard]] bool is_contiguous() const {
    const auto& i = checked("is_contiguous");
    return fusegrad::is_contiguous(i.sizes, i.st);
  }
  [[nodiscard]] index_t offset() const { return checked("offset").offset; }

  // --- data -----------------------------------------------------------------------------
  /// Pointer to the first element of a contiguous tensor. Throws for an undefined tensor
  /// or a non-contiguous view (call `contiguous()` first).
  [[nodiscard]] T* data() const {
    const auto& i = synced("data");
    if (!fusegrad::is_contiguous(i.sizes, i.st))
      detail::fail("data", "tensor of shape ", to_string(i.sizes),
                   " is a non-contiguous view; expected a contiguous tensor (call .contiguous())");
    return i.first();
  }
  /// Pointer to element [0,...,0] of any tensor, strided or not (no contiguity check).
  [[nodiscard]] T* data_ptr() const { return synced("data_ptr").first(); }
  /// The value of a one-element tensor.
  [[nodiscard]] T item() const {
    const auto& i = read_by_caller("item");
    if (fusegrad::numel(i.sizes) != 1)
      detail::fail("item", "a tensor of shape ", to_string(i.sizes), " has ", fusegrad::numel(i.sizes),
                   " elements; expected exactly one element");
    return *data_ptr();
  }
  /// The elements in row-major order (a copy; works for strided views too).
  [[nodiscard]] std::vector<T> to_vector() const;
  /// The element at a multi-index, bounds-checked.
  [[nodiscard]] T at(std::initializer_list<index_t> idx) const;

  // --- autograd -------------------------------------------------------------------------
  [[nodiscard]] bool requires_grad() const { return checked("requires_grad").requires_grad; }
  /// Marks a leaf as needing gradients; returns *this so it chains after a factory.
  tensor& requires_grad(bool on) {
    auto& i = synced("requires_grad");
    if (i.grad_fn)
      detail::fail("requires_grad",
                   "requires_grad can only be changed on leaf tensors; this "
                   "tensor was produced by ",
                   grad_fn_name(), " (use .detach() for a new leaf)");
    i.requires_grad = on;
    return *this;
  }
  [[nodiscard]] bool is_leaf() const { return synced("is_leaf").grad_fn == nullptr; }
  /// The node that produced this tensor, or null for leaves.
  [[nodiscard]] const std::shared_ptr<node<T>>& grad_fn() const { return synced("grad_fn").grad_fn; }
  /// PyTorch's name of `grad_fn()` (e.g. "MulBackward0"), or "" for leaves.
  [[nodiscard]] std::string grad_fn_name() const;
  [[nodiscard]] std::size_t output_nr() const { return synced("output_nr").output_nr; }
  /// The accumulated gradient (undefined until a backward reaches this tensor). Reading it
  /// while another thread's backward accumulates into it gives the gradient before or after.
  [[nodiscard]] tensor grad() const {
    auto& i = checked("grad");
    std::lock_guard lock(i.mutex);
    return i.grad;
  }
  /// Replaces the accumulated gradient (pass `{}` to reset it).
  void set_grad(tensor g) {
    auto& i = checked("set_grad");
    if (g.defined() && g.shape() != i.sizes)
      detail::fail("set_grad", "gradient of shape ", to_string(g.shape()), " for a tensor of shape ",
                   to_string(i.sizes), "; expected equal shapes");
    std::lock_guard lock(i.mutex);
    i.grad = std::move(g);
  }
  /// Resets the accumulated gradient, like `zero_grad(set_to_none=True)`.
  void zero_grad() {
    auto& i = checked("zero_grad");
    tensor old;  // freed after the lock is released
    std::lock_guard lock(i.mutex);
    old = std::move(i.grad);
  }
  /// Keeps the gradient of a non-leaf tensor in `grad()` after backward.
  void retain_grad();
  /// Runs backward from this tensor; `gradient` may be omitted for one-element tensors.
  void backward(const tensor& gradient = {}, backward_options opts = {}) const;
  void backward(backward_options opts) const { backward(tensor{}, opts); }
  /// Registers `f(grad)` to run when this tensor's gradient is computed. `f` may return a
  /// replacement gradient (same shape) or nothing. Returns the hook's id.
  /// Under compiled autograd, a hook is an opaque `call_hook` node of the captured backward,
  /// run on the gradient's value; a generic lambda (`[](auto g) { ... }`) is traced instead,
  /// its ops fused with the rest of the backward.
  template <TensorHook<T> F>
  std::uint64_t register_hook(F&& f);
  /// Removes the hook with id `id` (returns false if there was none).
  bool remove_hook(std::uint64_t id);
  /// A new leaf sharing storage with this tensor, with no history.
  [[nodiscard]] tensor detach() const;

  // --- conversions and views (defined in fusegrad/eager/views.hpp) -----------------------
  [[nodiscard]] tensor contiguous() const;
  [[nodiscard]] tensor clone() const;
  [[nodiscard]] tensor reshape(const fusegrad::shape& s) const;
  [[nodiscard]] tensor view(const fusegrad::shape& s) const;
  [[nodiscard]] tensor expand(const fusegrad::shape& s) const;
  [[nodiscard]] tensor permute(const std::vector<index_t>& dims) const;
  [[nodiscard]] tensor transpose(index_t d0, index_t d1) const;
  [[nodiscard]] tensor t() const { return transpose(0, 1); }
  [[nodiscard]] tensor select(index_t d, index_t i) const;
  [[nodiscard]] tensor slice(index_t d, index_t start, index_t stop, index_t step = 1) const;
  [[nodiscard]] tensor unsqueeze(index_t d) const;
  [[nodiscard]] tensor squeeze(index_t d) const;

  /// Identity of the underlying tensor (two handles to one tensor compare equal).
  [[nodiscard]] bool is_same(const tensor& o) const noexcept { return impl_ == o.impl_; }
  /// The shared implementation. A lazy tensor (recorded by the run-time tracer) is computed
  /// first: code that reaches into the implementation needs its values.
  [[nodiscard]] const std::shared_ptr<detail::tensor_impl<T>>& impl() const {
    if (impl_ && impl_->lazy) [[unlikely]]
      impl_->lazy->realize("an op the tracer does not capture");
    return impl_;
  }
  /// The implementation as it is, lazy or not (for the tracer).
  [[nodiscard]] const std::shared_ptr<detail::tensor_impl<T>>& raw_impl() const noexcept { return impl_; }
  /// True while this tensor is recorded by the run-time tracer but not yet computed.
  [[nodiscard]] bool is_lazy() const noexcept { return impl_ && impl_->lazy; }

 private:
  detail::tensor_impl<T>& checked(std::string_view op) const {
    if (!impl_)
      detail::fail(op,
                   "the tensor is undefined (holds no data); expected a defined tensor "
                   "(was a gradient read before backward reached it?)");
    return *impl_;
  }
  detail::tensor_impl<T>& synced(std::string_view op) const {
    auto& i = checked(op);
    if (i.lazy) [[unlikely]]
      i.lazy->realize(op);
    return i;
  }
  /// `synced`, where the caller's C++ reads the elements' values: a recording trace is told
  /// (`recorder::read_values`).
  detail::tensor_impl<T>& read_by_caller(std::string_view op) const {
    auto& i = synced(op);
    if (auto* r = detail::active_recorder<T>()) [[unlikely]]
      r->read_values(*this, op);
    return i;
  }
  std::shared_ptr<detail::tensor_impl<T>> impl_;
};

namespace detail {

template <Element T>
struct tensor_impl {
  /// Provided, so that `make_pooled<tensor_impl<T>>()` (value-initialisation) runs the members'
  /// initialisers alone: an implicit constructor would first zero the whole object, the sizes'
  /// and strides' unused inline slots included (a `rep stos` on every tensor made).
  tensor_impl() noexcept {}  // NOLINT(modernize-use-equals-default): `= default` would zero it
  /// The address of element [0, ..., 0] (null where the storage has none: an empty storage,
  /// or a view of no elements into it); no check that the tensor is computed.
  [[nodiscard]] T* first() const noexcept {
    T* const p = store ? store->data() : nullptr;
    return p ? p + offset : nullptr;
  }
  std::shared_ptr<storage<T>> store;
  index_t offset = 0;
  shape sizes;
  strides st;
  bool requires_grad = false;
  bool retains_grad = false;
  tensor<T> grad;                    ///< guarded by `mutex`
  std::shared_ptr<node<T>> grad_fn;  ///< producer (non-leaf), null for leaves
  std::size_t output_nr = 0;
  std::shared_ptr<node<T>> grad_accumulator;  ///< AccumulateGrad node of a leaf, made lazily (guarded by `mutex`)
  std::atomic<bool> has_accumulator{false};   ///< set (release) once `grad_accumulator` is made; it never changes after
  std::vector<hook<T>> leaf_hooks;            ///< hooks of a leaf, run by AccumulateGrad
  lazy_source* lazy = nullptr;                ///< set while the run-time tracer holds this tensor uncomputed
  int lazy_node = -1;                         ///< its node in the tracer's pending graph
  /// Serialises what concurrent backwards (and forwards) through this tensor change: the
  /// accumulation into `grad` and the making of `grad_accumulator` (PyTorch's
  /// `AutogradMeta::mutex_`). Never held while user code (a hook) runs.
  mutable light_mutex mutex;
};

/// A fresh contiguous tensor of shape `s` (uninitialised elements) for op `op`. A shape
/// whose element or byte count overflows, and a failed allocation, throw `fusegrad::error`
/// naming `op`, the shape and the bytes.
template <Element T>
tensor<T> empty(const shape& s, std::string_view op = "empty") {
  const auto n = static_cast<std::size_t>(check_shape(op, s));
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(n, sizeof(T), &bytes))
    fail(op, "a tensor of shape ", to_string(s), " needs more than 2^64 bytes; expected a shape that fits in memory");
  auto impl = make_pooled<tensor_impl<T>>();
  try {
    impl->store = make_pooled<storage<T>>(n);
  } catch (const std::bad_alloc&) {
    fail(op, "out of memory allocating ", bytes, " bytes for a tensor of shape ", to_string(s),
         "; expected an allocation that fits in memory");
  }
  impl->sizes = s;
  set_contiguous_strides(impl->st, s);  // in place: no temporary moved in
  return tensor<T>(std::move(impl));
}

/// A tensor sharing `base`'s storage with new sizes, strides and offset (no history).
template <Element T>
tensor<T> alias(const tensor<T>& base, shape s, strides st, index_t offset) {
  auto impl = make_pooled<tensor_impl<T>>();
  impl->store = base.impl()->store;
  impl->offset = offset;
  impl->sizes = std::move(s);
  impl->st = std::move(st);
  return tensor<T>(std::move(impl));
}

/// Calls `f(linear_index_into_storage)` for each element of a strided layout, row-major.
template <class F>
void for_each_offset(const shape& s, const strides& st, index_t offset, F&& f) {
  const index_t n = fusegrad::numel(s);
  if (n == 0) return;
  const std::size_t r = s.size();
  if (r == 0) {
    f(offset);
    return;
  }
  shape idx(r, 0);  // inline up to 6 dims: no allocation per call
  const index_t inner = s[r - 1], inner_st = st[r - 1];
  index_t base = offset;
  for (index_t done = 0; done < n; done += inner) {
    for (index_t k = 0; k < inner; ++k) f(base + k * inner_st);
    for (std::size_t d = r - 1; d-- > 0;) {
      base += st[d];
      if (++idx[d] < s[d]) break;
      base -= st[d] * s[d];
      idx[d] = 0;
    }
  }
}

}  // namespace detail

template <Element T>
std::vector<T> tensor<T>::to_vector() const {
  const auto& i = read_by_caller("to_vector");
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(fusegrad::numel(i.sizes)));
  const T* p = i.store ? i.store->data() : nullptr;
  detail::for_each_offset(i.sizes, i.st, i.offset, [&](index_t o) { out.push_back(p[o]); });
  return out;
}

template <Element T>
T tensor<T>::at(std::initializer_list<index_t> idx) const {
  const auto& i = read_by_caller("at");
  if (idx.size() != i.sizes.size())
    detail::fail("at", "got ", idx.size(), " indices for a tensor of shape ", to_string(i.sizes), "; expected ",
                 i.sizes.size());
  index_t o = i.offset;
  std::size_t d = 0;
  for (index_t k : idx) {
    if (k < 0 || k >= i.sizes[d])
      detail::fail("at", "index ", k, " is out of range for dim ", d, " of shape ", to_string(i.sizes),
                   "; expected 0 <= index < ", i.sizes[d]);
    o += k * i.st[d++];
  }
  return i.store->data()[o];
}

template <Element T>
tensor<T> tensor<T>::detach() const {
  const auto& i = synced("detach");
  return detail::alias(*this, i.sizes, i.st, i.offset);
}

namespace detail {
/// Computes traced (lazy) operands before a user's op that the run-time tracer cannot record
/// (`kind` "the op" or "fg::function", `name` its name), so that the graph break's log and
/// fullgraph's error name the op rather than the accessor that would reach the data.
template <Element T, class... Ts>
void realize_for_op(std::string_view kind, std::string_view name, const tensor<T>& x, const Ts&... xs) {
  for (const tensor<T>* t : {&x, &xs...})
    if (t->is_lazy()) [[unlikely]]
      t->raw_impl()->lazy->realize(std::string(kind) + " '" + std::string(name) + "' (not captured by the tracer)");
}
}  // namespace detail

}  // namespace fusegrad
