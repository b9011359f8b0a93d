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
#include <vector>

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
concept TraceableUserOp = !TableOp<Op, T> && (UnaryOp<Op, T> || BinaryOp<Op, T>)&&std::is_trivially_copyable_v<Op> &&
                          (std::is_empty_v<Op> || sizeof(Op) == sizeof(T));

/// What the run-time IR knows of a user's op (see this header's comment).
template <Element T>
struct user_op {
  static constexpr std::string_view kind = "user element-wise ops";
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

/// What the run-time IR knows of a user's `fg::function<F>` (fusegrad/eager/function.hpp): a
/// traced graph holds F's forward as the ops it ran and one `custom` node for its output,
/// whose gradient this record's `backward` gives.
template <Element T>
struct user_function {
  static constexpr std::string_view kind = "fg::functions";
  std::string_view name;
  int inputs = 0;
  /// `F::backward`: the gradient of each input (undefined: none) from the saved tensors, in
  /// the order `setup_context` saved them, and the output's gradient.
  std::vector<tensor<T>> (*backward)(const std::vector<tensor<T>>& saved, const tensor<T>& grad) = nullptr;
  /// `fg::function<F>::apply` on computed inputs, with its tape node (a graph run node by node).
  tensor<T> (*eager)(const std::vector<tensor<T>>& inputs) = nullptr;
};

}  // namespace fusegrad::ops

namespace fusegrad::detail {
/// The records of one kind (user ops, user functions) met so far, by number: appended under a
/// lock, read without one (an entry is published before the count that makes it visible).
template <class Record>
struct record_registry {
  static constexpr int capacity = 4096;
  std::array<const Record*, capacity> entries{};
  std::atomic<int> count{0};
  std::mutex append;

  static record_registry& get() {
    static record_registry r;
    return r;
  }
  /// The number of `r` (a record with static storage: its address is its identity).
  int add(const Record* r) {
    std::lock_guard lock(append);
    const int n = count.load(std::memory_order_relaxed);
    for (int k = 0; k < n; ++k)
      if (entries[static_cast<std::size_t>(k)] == r) return k;
    if (n == capacity)
      fail("jit", "a program traced more than ", capacity, " different ", Record::kind, "; expected at most that many");
    entries[static_cast<std::size_t>(n)] = r;
    count.store(n + 1, std::memory_order_release);
    return n;
  }
  /// Record `k`, null when none has that number.
  const Record* find(int k) const noexcept {
    if (k < 0 || k >= count.load(std::memory_order_acquire)) return nullptr;
    return entries[static_cast<std::size_t>(k)];
  }
};
}  // namespace fusegrad::detail

namespace fusegrad::ops {

/// The IR's number of user op `op` (a `user_op<T>` with static storage: its address is the
/// op's identity), numbering it on first use.
template <Element T>
int user_op_index(const user_op<T>& op) {
  return table_size<T> + fusegrad::detail::record_registry<user_op<T>>::get().add(&op);
}

/// The user op numbered `op` (at least `table_size<T>`), null when no op has that number.
template <Element T>
const user_op<T>* find_user_op(int op) noexcept {
  return fusegrad::detail::record_registry<user_op<T>>::get().find(op - table_size<T>);
}

/// The IR's number of user function `f` (a `user_function<T>` with static storage).
template <Element T>
int user_function_index(const user_function<T>& f) {
  return fusegrad::detail::record_registry<user_function<T>>::get().add(&f);
}
/// The user function numbered `k`; an error naming `where` when there is none.
template <Element T>
const user_function<T>& user_function_at(int k, std::string_view where) {
  if (const user_function<T>* f = fusegrad::detail::record_registry<user_function<T>>::get().find(k)) return *f;
  fusegrad::detail::fail(where, "function number ", k, " is not an fg::function this program applied");
}

/// The user op numbered `op`; an error naming `where` when there is none.
template <Element T>
const user_op<T>& user_op_at(int op, std::string_view where) {
  if (const user_op<T>* u = find_user_op<T>(op)) return *u;
  fusegrad::detail::fail(where, "op number ", op,
                         " is neither a built-in nor a user op this program applied; expected ", "0 <= op < ",
                         table_size<T> + fusegrad::detail::record_registry<user_op<T>>::get().count.load());
}

}  // namespace fusegrad::ops
