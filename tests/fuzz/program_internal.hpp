#pragma once

// What the files of the run-time programs (program_inputs.cpp, program_interpreter.cpp,
// program_generator.cpp, program_printer.cpp; see program.hpp) share: the classes of ops, the
// literal size 1, the positions of special values.
#include "program.hpp"
#include "user_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

namespace fuzz {

namespace {

inline bool is_unary(op k) { return k <= op::sign; }
inline bool is_scalar(op k) { return k >= op::add_s && k <= op::pow_s; }
inline bool is_binary(op k) { return k >= op::add && k <= op::ne; }
inline bool is_compare(op k) { return k >= op::gt && k <= op::ne; }
inline bool no_grad_op(op k) { return k == op::step || k == op::sign || is_compare(k) || k == op::detach; }

constexpr int lit1 = -1;

inline fg::index_t special_index(double pos, fg::index_t n) {
  return std::min<fg::index_t>(n - 1, static_cast<fg::index_t>(pos * static_cast<double>(n)));
}

}  // namespace

}  // namespace fuzz
