#pragma once
/// \file fusegrad/core/error.hpp
/// The one exception type of fusegrad and the helpers that build its messages.
///
/// Every message has the form `fusegrad::<op>: <what happened>; expected <what>`,
/// so a user reading it knows which call failed, with which shapes or values.

#include <charconv>
#include <concepts>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace fusegrad {

/// Thrown for every bad input: shape mismatches, bad broadcasts, out-of-range dims,
/// a second backward through a freed graph, reading a tensor that holds no data, ...
class error : public std::runtime_error {
 public:
  error(std::string_view op, const std::string& what)
      : std::runtime_error("fusegrad::" + std::string(op) + ": " + what), op_(op) {}
  /// The name of the operation that rejected its input (e.g. "add", "matmul").
  [[nodiscard]] const std::string& op() const noexcept { return op_; }

 private:
  std::string op_;
};

namespace detail {

/// One argument of an error message as text: strings are viewed, numbers are formatted into
/// the piece itself (integers exactly, floating point like `std::ostream`'s default `%g`).
/// Messages are built from a list of pieces by one non-template function, so a call of
/// `fail` with a new combination of argument types costs the compiler almost nothing.
class msg_piece {
 public:
  msg_piece(std::string_view s) noexcept : s_(s) {}
  msg_piece(const char* s) noexcept : s_(s) {}
  msg_piece(const std::string& s) noexcept : s_(s) {}
  msg_piece(char c) noexcept : s_(buf_, 1) { buf_[0] = c; }
  msg_piece(bool b) noexcept : s_(b ? "true" : "false") {}
  template <std::integral I>
  requires(!std::same_as<I, bool> && !std::same_as<I, char>) msg_piece(I v)
  noexcept {
    const auto r = std::to_chars(buf_, buf_ + sizeof buf_, v);
    s_ = std::string_view(buf_, static_cast<std::size_t>(r.ptr - buf_));
  }
  template <std::floating_point F>
  msg_piece(F v) noexcept {
    const auto r = std::to_chars(buf_, buf_ + sizeof buf_, v, std::chars_format::general, 6);
    s_ = std::string_view(buf_, static_cast<std::size_t>(r.ptr - buf_));
  }
  msg_piece(const msg_piece&) = delete;
  msg_piece& operator=(const msg_piece&) = delete;
  [[nodiscard]] std::string_view view() const noexcept { return s_; }

 private:
  char buf_[40] = {};
  std::string_view s_;
};

/// The pieces of a message, joined.
inline std::string join_pieces(std::initializer_list<msg_piece> pieces) {
  std::string r;
  for (const msg_piece& p : pieces) r += p.view();
  return r;
}

/// Every argument as text, joined: `cat("got ", 3, " dims")`.
template <class... Args>
[[nodiscard]] std::string cat(const Args&... args) {
  return join_pieces({args...});
}

/// Throws `fusegrad::error` for `op` with the message `pieces` (out of line: one per program).
[[noreturn, gnu::noinline, gnu::cold]] inline void raise(std::string_view op, std::initializer_list<msg_piece> pieces) {
  throw error(op, join_pieces(pieces));
}

/// Throws `fusegrad::error` for `op` with a message joined from `args`.
template <class... Args>
[[noreturn]] void fail(std::string_view op, const Args&... args) {
  raise(op, {args...});
}

}  // namespace detail
}  // namespace fusegrad
