#pragma once
/// \file fusegrad/runtime/eager.hpp
/// The precompiled runtime's part for eager tensors (see fusegrad/runtime.hpp): the tensor,
/// the tape's nodes and engine, every eager op with its kernels, gradcheck's machinery.
/// Under `FUSEGRAD_PRECOMPILED` these instantiations are declared `extern` here, and the TU
/// is checked, when the program links, to be compiled for the runtime's instruction set.

#include "fusegrad/core/simd.hpp"
#include "fusegrad/eager/autograd.hpp"
#include "fusegrad/eager/factories.hpp"
#include "fusegrad/eager/gradcheck.hpp"
#include "fusegrad/eager/kernels.hpp"
#include "fusegrad/eager/matmul.hpp"
#include "fusegrad/eager/pointwise.hpp"
#include "fusegrad/eager/recorder.hpp"
#include "fusegrad/eager/reduce.hpp"
#include "fusegrad/eager/tensor.hpp"
#include "fusegrad/eager/views.hpp"
#include "fusegrad/loops/tile.hpp"
#include "fusegrad/ops/all.hpp"
#include "fusegrad/ops/list.hpp"
#include "fusegrad/ops/max.hpp"
#include "fusegrad/ops/reduce.hpp"

/// Each op of the op list (ops/list.hpp) for element type `float` or `double`: its eager kernel
/// and its tile kernel, by `FUSEGRAD_RT_U` or `FUSEGRAD_RT_B` for its arity. (One macro per
/// element type: an X-macro's entry cannot see the `T` of the macro that expands the list.)
#define FUSEGRAD_RT_OP_float(arity, form, op) FUSEGRAD_RT_##arity(float, FUSEGRAD_OP_TYPE(form, op, float))
#define FUSEGRAD_RT_OP_double(arity, form, op) FUSEGRAD_RT_##arity(double, FUSEGRAD_OP_TYPE(form, op, double))

// NOLINTBEGIN(bugprone-macro-parentheses): the arguments are types, which cannot be parenthesized
#define FUSEGRAD_RT_U(T, Op)                                                          \
  FUSEGRAD_RT_EXTERN template tensor<T> apply_op<T, Op>(const Op&, const tensor<T>&); \
  FUSEGRAD_RT_EXTERN template void detail::tile_kernel<Op, T>(const void*, const T*, const T*, T*, index_t);
#define FUSEGRAD_RT_B(T, Op)                                                                            \
  FUSEGRAD_RT_EXTERN template tensor<T> apply_op<T, Op>(const Op&, const tensor<T>&, const tensor<T>&); \
  FUSEGRAD_RT_EXTERN template void detail::tile_kernel<Op, T>(const void*, const T*, const T*, T*, index_t);

/// The eager runtime for element type `T`.
// (gradcheck_values: finite differences are only meaningful in double, but the check is generic.)
#define FUSEGRAD_RUNTIME_EAGER(T)                                                                                      \
  FUSEGRAD_RT_EXTERN template class tensor<T>;                                                                         \
  FUSEGRAD_RT_EXTERN template class node<T>;                                                                           \
  FUSEGRAD_RT_EXTERN template class detail::saving_node<T>;                                                            \
  FUSEGRAD_RT_EXTERN template class detail::rule_node<T>;                                                              \
  FUSEGRAD_OP_LIST(FUSEGRAD_RT_OP_##T)                                                                                 \
  FUSEGRAD_RT_EXTERN template void detail::run_engine<T>(const std::vector<tensor<T>>&, std::vector<tensor<T>>, bool); \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::sum_to<T>(const tensor<T>&, const shape&);                             \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::reduce_keepdim<T>(const tensor<T>&, const std::vector<bool>&,          \
                                                                  detail::reduce_op);                                  \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::reduce_values<T>(detail::reduce_op, const tensor<T>&,                  \
                                                                 const std::vector<bool>&, bool);                      \
  FUSEGRAD_RT_EXTERN template tensor<T> expand<T>(const tensor<T>&, const shape&);                                     \
  FUSEGRAD_RT_EXTERN template tensor<T> view<T>(const tensor<T>&, const shape&);                                       \
  FUSEGRAD_RT_EXTERN template tensor<T> reshape<T>(const tensor<T>&, const shape&);                                    \
  FUSEGRAD_RT_EXTERN template tensor<T> sum<T>(const tensor<T>&, const std::vector<index_t>&, bool);                   \
  FUSEGRAD_RT_EXTERN template tensor<T> mean<T>(const tensor<T>&, const std::vector<index_t>&, bool);                  \
  FUSEGRAD_RT_EXTERN template tensor<T> max<T>(const tensor<T>&, const std::vector<index_t>&, bool);                   \
  FUSEGRAD_RT_EXTERN template tensor<T> matmul<T>(const tensor<T>&, const tensor<T>&);                                 \
  FUSEGRAD_RT_EXTERN template tensor<T> linear<T>(const tensor<T>&, const tensor<T>&, const tensor<T>&);               \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::bmm_values<T>(const tensor<T>&, const tensor<T>&);                     \
  FUSEGRAD_RT_EXTERN template void detail::map_strided<T>(detail::tile_fn<T>, const void*, const tensor<T>&,           \
                                                          const tensor<T>*, tensor<T>&);                               \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::pointwise_values<T>(std::string_view, detail::tile_fn<T>, const void*, \
                                                                    const tensor<T>&, const tensor<T>*);               \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::contiguous_copy<T>(const tensor<T>&);                                  \
  FUSEGRAD_RT_EXTERN template void detail::fill<T>(const tensor<T>&, T);                                               \
  FUSEGRAD_RT_EXTERN template std::shared_ptr<node<T>> detail::grad_accumulator<T>(const tensor<T>&);                  \
  FUSEGRAD_RT_EXTERN template edge<T> detail::gradient_edge<T>(const tensor<T>&);                                      \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::apply_hook<T>(const hook<T>&, tensor<T>);                              \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::run_hook<T>(const hook<T>&, tensor<T>);                                \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::run_hooks<T>(const std::vector<hook<T>>&, tensor<T>);                  \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::add_grads<T>(const tensor<T>&, const tensor<T>&);                      \
  FUSEGRAD_RT_EXTERN template std::shared_ptr<node<T>> detail::attach<T>(                                              \
      std::shared_ptr<node<T>>, std::span<const tensor<T>>, std::span<tensor<T>* const>);                              \
  FUSEGRAD_RT_EXTERN template tensor<T> detail::empty<T>(const shape&, std::string_view);                              \
  FUSEGRAD_RT_EXTERN template tensor<T> randn<T>(const shape&, std::uint64_t);                                         \
  FUSEGRAD_RT_EXTERN template void lanes::detail_trig::trig_by_class<lanes::detail_trig::trig_fn::sin, T>(const T*,    \
                                                                                                          T*, int);    \
  FUSEGRAD_RT_EXTERN template void lanes::detail_trig::trig_by_class<lanes::detail_trig::trig_fn::cos, T>(const T*,    \
                                                                                                          T*, int);    \
  FUSEGRAD_RT_EXTERN template void lanes::detail_trig::trig_by_class<lanes::detail_trig::trig_fn::tan, T>(const T*,    \
                                                                                                          T*, int);    \
  FUSEGRAD_RT_EXTERN template gradcheck_result detail::gradcheck_values<T>(                                            \
      const gradcheck_options&, const detail::gradcheck_call<T>&, std::vector<tensor<T>>&);
// NOLINTEND(bugprone-macro-parentheses)

namespace fusegrad::detail {
/// The precompiled runtime's instruction set, checked when a program links: a TU that uses the
/// runtime refers to this member for the xsimd architecture it was compiled for, and the
/// runtime defines it for its own only (src/runtime_float.cpp). Compiled for another one
/// (`-march=native` on an AVX-512 machine against an AVX2 runtime, or no `-mavx2`), a TU would
/// run the runtime's code beside inline code of other widths; instead the link fails, and the
/// linker's message is this name, with the TU's architecture in angle brackets.
// NOLINTBEGIN(bugprone-reserved-identifier): the name is the linker's message; `__` sets its words apart
template <class Arch>
struct
    fusegrad_runtime_was_built_for_another_instruction_set__compile_this_file_with_the_flags_of_target_fusegrad_fusegrad {
  static const bool linked;
};
// NOLINTEND(bugprone-reserved-identifier)
}  // namespace fusegrad::detail

#if defined(FUSEGRAD_PRECOMPILED) && !defined(FUSEGRAD_BUILDING_RUNTIME)
namespace {
[[gnu::used, maybe_unused]] const bool* const fusegrad_instruction_set_check =
    &fusegrad::detail::
        fusegrad_runtime_was_built_for_another_instruction_set__compile_this_file_with_the_flags_of_target_fusegrad_fusegrad<
            xsimd::default_arch>::linked;
}  // namespace
#define FUSEGRAD_RT_EXTERN extern
namespace fusegrad {
FUSEGRAD_RUNTIME_EAGER(float)
FUSEGRAD_RUNTIME_EAGER(double)
}  // namespace fusegrad
#undef FUSEGRAD_RT_EXTERN
#endif
