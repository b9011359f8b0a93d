#pragma once
/// \file fusegrad/ops/compare.hpp
/// Element-wise comparisons giving 1 or 0 in the operands' element type, between two operands
/// (broadcasting) or an operand and a scalar (`gt(x, 0.5)`). They carry no gradient;
/// derivative rules and `where` use them as masks. NaN compares false, except `ne` (true).
#include "fusegrad/ops/op.hpp"

namespace fusegrad {
namespace ops {
struct gt_op {
  static constexpr std::string_view name = "gt";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return lanes::gt(a, b);
  }
};
struct ge_op {
  static constexpr std::string_view name = "ge";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return lanes::ge(a, b);
  }
};
struct lt_op {
  static constexpr std::string_view name = "lt";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return lanes::gt(b, a);
  }
};
struct le_op {
  static constexpr std::string_view name = "le";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return lanes::ge(b, a);
  }
};
struct eq_op {
  static constexpr std::string_view name = "eq";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return lanes::eq(a, b);
  }
};
struct ne_op {
  static constexpr std::string_view name = "ne";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  template <class V>
  static constexpr V value(const V& a, const V& b) {
    return lanes::ne(a, b);
  }
};
template <Element T>
struct gt_scalar_op {
  static constexpr std::string_view name = "gt";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  T s;
  template <class V>
  constexpr V value(const V& a) const {
    return lanes::gt(a, V(s));
  }
};
template <Element T>
struct ge_scalar_op {
  static constexpr std::string_view name = "ge";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  T s;
  template <class V>
  constexpr V value(const V& a) const {
    return lanes::ge(a, V(s));
  }
};
template <Element T>
struct lt_scalar_op {
  static constexpr std::string_view name = "lt";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  T s;
  template <class V>
  constexpr V value(const V& a) const {
    return lanes::gt(V(s), a);
  }
};
template <Element T>
struct le_scalar_op {
  static constexpr std::string_view name = "le";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  T s;
  template <class V>
  constexpr V value(const V& a) const {
    return lanes::ge(V(s), a);
  }
};
template <Element T>
struct eq_scalar_op {
  static constexpr std::string_view name = "eq";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  T s;
  template <class V>
  constexpr V value(const V& a) const {
    return lanes::eq(a, V(s));
  }
};
template <Element T>
struct ne_scalar_op {
  static constexpr std::string_view name = "ne";
  static constexpr double cost = 0.3;  ///< in streamed loads: arithmetic, a few instructions
  T s;
  template <class V>
  constexpr V value(const V& a) const {
    return lanes::ne(a, V(s));
  }
};
}  // namespace ops

template <Operand A, Operand B>
constexpr auto gt(const A& a, const B& b) {
  return apply_op(ops::gt_op{}, a, b);
}
template <Operand A, Operand B>
constexpr auto ge(const A& a, const B& b) {
  return apply_op(ops::ge_op{}, a, b);
}
template <Operand A, Operand B>
constexpr auto lt(const A& a, const B& b) {
  return apply_op(ops::lt_op{}, a, b);
}
template <Operand A, Operand B>
constexpr auto le(const A& a, const B& b) {
  return apply_op(ops::le_op{}, a, b);
}
template <Operand A, Operand B>
constexpr auto eq(const A& a, const B& b) {
  return apply_op(ops::eq_op{}, a, b);
}
template <Operand A, Operand B>
constexpr auto ne(const A& a, const B& b) {
  return apply_op(ops::ne_op{}, a, b);
}

#define FUSEGRAD_COMPARE_SCALAR(fn)                                                        \
  template <Operand A, Scalar S>                                                           \
  constexpr auto fn(const A& a, S s) {                                                     \
    return apply_op(ops::fn##_scalar_op<element_of<A>>{static_cast<element_of<A>>(s)}, a); \
  }
// clang-format off
FUSEGRAD_COMPARE_SCALAR(gt) FUSEGRAD_COMPARE_SCALAR(ge) FUSEGRAD_COMPARE_SCALAR(lt)
FUSEGRAD_COMPARE_SCALAR(le) FUSEGRAD_COMPARE_SCALAR(eq) FUSEGRAD_COMPARE_SCALAR(ne)
// clang-format on
#undef FUSEGRAD_COMPARE_SCALAR

    // PyTorch's spelling of the ordering comparisons, on every operand and between an operand and
    // a scalar: `x > 0.0` is `gt(x, 0.0)`, `0.5 < x` is `gt(x, 0.5)`. `==` and `!=` stay C++'s
    // value equality (containers, algorithms and C++20's rewritten comparisons expect a bool from
    // them): `eq` and `ne` are the element-wise ones.
    template <Operand A, Operand B>
    constexpr auto operator>(const A& a, const B& b) {
  return gt(a, b);
}
template <Operand A, Operand B>
constexpr auto operator>=(const A& a, const B& b) {
  return ge(a, b);
}
template <Operand A, Operand B>
constexpr auto operator<(const A& a, const B& b) {
  return lt(a, b);
}
template <Operand A, Operand B>
constexpr auto operator<=(const A& a, const B& b) {
  return le(a, b);
}
template <Operand A, Scalar S>
constexpr auto operator>(const A& a, S s) {
  return gt(a, s);
}
template <Operand A, Scalar S>
constexpr auto operator>=(const A& a, S s) {
  return ge(a, s);
}
template <Operand A, Scalar S>
constexpr auto operator<(const A& a, S s) {
  return lt(a, s);
}
template <Operand A, Scalar S>
constexpr auto operator<=(const A& a, S s) {
  return le(a, s);
}
template <Scalar S, Operand A>
constexpr auto operator>(S s, const A& a) {
  return lt(a, s);
}
template <Scalar S, Operand A>
constexpr auto operator>=(S s, const A& a) {
  return le(a, s);
}
template <Scalar S, Operand A>
constexpr auto operator<(S s, const A& a) {
  return gt(a, s);
}
template <Scalar S, Operand A>
constexpr auto operator<=(S s, const A& a) {
  return ge(a, s);
}
}  // namespace fusegrad

/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
// clang-format off
#define FUSEGRAD_OPS_IN_COMPARE(X)                                                               \
  X(B, plain, gt_op) X(B, plain, ge_op) X(B, plain, lt_op) X(B, plain, le_op) X(B, plain, eq_op) \
  X(B, plain, ne_op) X(U, scalar, gt_scalar_op) X(U, scalar, ge_scalar_op)                       \
  X(U, scalar, lt_scalar_op) X(U, scalar, le_scalar_op) X(U, scalar, eq_scalar_op)               \
  X(U, scalar, ne_scalar_op)
// clang-format on
