#pragma once
/// \file fusegrad/runtime/compile.hpp
/// The precompiled runtime's part for `fg::compile` (see fusegrad/runtime.hpp): the node
/// evaluator, the fused loop runner, a compiled call's shapes and its log line, and the tile
/// kernels of the ops computed beside their sibling (sin and cos: what a row body calls).

#include "fusegrad/compile/compile.hpp"
#include "fusegrad/compile/node_eval.hpp"
#include "fusegrad/kernel/fused.hpp"
#include "fusegrad/runtime/eager.hpp"

/// The compile runtime for element type `T`.
// NOLINTBEGIN(bugprone-macro-parentheses): the arguments are types, which cannot be parenthesized
#define FUSEGRAD_RUNTIME_COMPILE(T)                                                                                   \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::matmul_values<T>(const tensor<T>&, const tensor<T>&, bool, bool);     \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::matmul_operand<T>(const tensor<T>&, bool);                            \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::matmul_node_value<T>(const tensor<T>&, const tensor<T>&, bool, bool); \
  FUSEGRAD_RT_EXTERN template struct detail::node_eval<T>;                                                            \
  FUSEGRAD_RT_EXTERN template class detail::fused_runner<T>;                                                          \
  FUSEGRAD_RT_EXTERN template void detail::log_plan<T>(std::string_view, const detail::compiled_graph<T>&,            \
                                                       std::size_t);                                                  \
  FUSEGRAD_RT_EXTERN template void detail::run_compiled<T>(                                                           \
      const detail::compiled_graph<T>&, std::shared_ptr<const void>, const void* const*,                              \
      const std::vector<tensor<T>>&, detail::shape_memo*, std::span<tensor<T>>);                                      \
  FUSEGRAD_RT_EXTERN template void detail::fused_shapes<T>(detail::node_eval<T>&, const detail::role*, const bool*,   \
                                                           std::size_t);                                              \
  FUSEGRAD_RT_EXTERN template void detail::tile_sibling_kernel<ops::sin_op, T>(const ops::sin_op&, const T*, T*, T*,  \
                                                                               index_t);                              \
  FUSEGRAD_RT_EXTERN template void detail::tile_sibling_kernel<ops::cos_op, T>(const ops::cos_op&, const T*, T*, T*,  \
                                                                               index_t);
// NOLINTEND(bugprone-macro-parentheses)

#if defined(FUSEGRAD_PRECOMPILED) && !defined(FUSEGRAD_BUILDING_RUNTIME)
#define FUSEGRAD_RT_EXTERN extern
namespace fusegrad {
FUSEGRAD_RUNTIME_COMPILE(float)
FUSEGRAD_RUNTIME_COMPILE(double)
}  // namespace fusegrad
#undef FUSEGRAD_RT_EXTERN
#endif
