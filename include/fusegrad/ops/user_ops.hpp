#pragma once
/// \file fusegrad/ops/user_ops.hpp
/// A program's own element-wise ops, numbered after the built-ins: the run-time IR names a
/// node's op by one integer, an index into `ops::table<T>` for a built-in, and
/// `table_size<T> + k` for the k-th user op a tracer met. The tracer, the programs and the
/// backward derivation cannot see a user's op type (they are compiled once, in the precompiled
/// runtime), so each user op reaches them as a `user_op<T>`: its name, its tile kernel, its
/// eager evaluation and its derivative rule, as function pointers instantiated where the op is
/// applied (fusegrad/eager/pointwise.hpp). The rule is the op's own, run on tensors; the
/// run-time tracer records it like any other eager code.

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string_view>
#include <type_traits>

#include "fusegrad/core/element.hpp"
#include "fusegrad/core/error.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/core/type_list.hpp"
#include "fusegrad/ops/op.hpp"
#include "fusegrad/ops/table.hpp"

namespace fusegrad {
template <Element T>
class tensor;
}  // namespace fusegrad

namespace fusegrad::ops {

/// The number of built-in element-wise ops (`table<T>`'s length): user ops come after.
template <Element T>
inline constexpr int table_size = static_cast<int>(table<T>::size);

/// A user's element-wise op whose state the IR can hold: none, or exactly one scalar of the
/// element type (a node's `scalar`), as the ops of the table.
template <class Op, class T>
concept TraceableUserOp = !TableOp<Op, T> && (UnaryOp<Op, T> || BinaryOp<Op, T>) && std::is_trivially_copyable_v<Op> &&
                          (std::is_empty_v<Op> || sizeof(Op) == sizeof(T));

/// What the run-time IR knows of a user's op (see this header's comment).
template <Element T>
struct user_op {
  std::string_view name;
  bool binary = false;
  bool has_scalar = false;      ///< the op holds one scalar (the node's `scalar`)
  bool has_derivative = false;  ///< it has a derivative rule (its results can require grad)
  int cost = 0;                 ///< `op_cost_units<Op>()`
  /// The op (its scalar `s`) over `n` elements: `b` is null for a unary op.
  void (*kernel)(T s, const T* a, const T* b, T* out, index_t n) = nullptr;
  /// The eager op on tensors (`b` null for a unary op).
  tensor<T> (*eager)(T s, const tensor<T>& a, const tensor<T>* b) = nullptr;
  /// The derivative rule: the gradient of operand `operand` (0 or 1) from the operands `a`,
  /// `b` (null for a unary op), the result `y` and its gradient `g`.
  tensor<T> (*rule)(T s, int operand, const tensor<T>& a, const tensor<T>* b, const tensor<T>& y,
                    const tensor<T>& g) = nullptr;
};

}  // namespace fusegrad::ops

namespace fusegrad::detail {
/// The user ops met so far, by number: appended under a lock, read without one (an entry is
/// published before the count that makes it visible).
template <Element T>
struct user_op_registry {
  static constexpr int capacity = 4096;
  std::array<const ops::user_op<T>*, capacity> entries{};
  std::atomic<int> count{0};
  std::mutex append;

  static user_op_registry& get() {
    static user_op_registry r;
    return r;
  }
  int add(const ops::user_op<T>* op) {
    std::lock_guard lock(append);
    const int n = count.load(std::memory_order_relaxed);
    for (int k = 0; k < n; ++k)
      if (entries[static_cast<std::size_t>(k)] == op) return k;
    if (n == capacity)
      fail("jit", "a program traced more than ", capacity, " different user element-wise ops; expected at most that many");
    entries[static_cast<std::size_t>(n)] = op;
    count.store(n + 1, std::memory_order_release);
    return n;
  }
};
}  // namespace fusegrad::detail

namespace fusegrad::ops {

/// The IR's number of user op `op` (a `user_op<T>` with static storage: its address is the
/// op's identity), numbering it on first use.
template <Element T>
int user_op_index(const user_op<T>& op) {
  return table_size<T> + fusegrad::detail::user_op_registry<T>::get().add(&op);
}

/// The user op numbered `op` (at least `table_size<T>`), null when no op has that number.
template <Element T>
const user_op<T>* find_user_op(int op) noexcept {
  auto& r = fusegrad::detail::user_op_registry<T>::get();
  const int k = op - table_size<T>;
  if (k < 0 || k >= r.count.load(std::memory_order_acquire)) return nullptr;
  return r.entries[static_cast<std::size_t>(k)];
}

/// The user op numbered `op`; an error naming `where` when there is none.
template <Element T>
const user_op<T>& user_op_at(int op, std::string_view where) {
  if (const user_op<T>* u = find_user_op<T>(op)) return *u;
  fusegrad::detail::fail(where, "op number ", op, " is neither a built-in nor a user op this program applied; expected ",
                         "0 <= op < ", table_size<T> + fusegrad::detail::user_op_registry<T>::get().count.load());
}

}  // namespace fusegrad::ops
