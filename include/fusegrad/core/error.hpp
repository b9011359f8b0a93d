#pragma once
/// \file fusegrad/core/error.hpp
/// The one exception type of fusegrad and the helpers that build its messages.
///
/// Every message has the form `fusegrad::<op>: <what happened>; expected <what>`,
/// so a user reading it knows which call failed, with which shapes or values.

#include <sstream>
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

/// Streams every argument into one string: `cat("got ", 3, " dims")`.
template <class... Args>
[[nodiscard]] std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

/// Throws `fusegrad::error` for `op` with a message streamed from `args`.
template <class... Args>
[[noreturn]] void fail(std::string_view op, const Args&... args) {
  throw error(op, cat(args...));
}

}  // namespace detail
}  // namespace fusegrad
