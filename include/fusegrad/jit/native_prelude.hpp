#pragma once
/// \file fusegrad/jit/native_prelude.hpp
/// What every generated loop function includes (jit/native_emitter.hpp): the op structs, the
/// masked loads and stores, the reductions' state, and the few helpers the generated code
/// calls. Precompiled once per code cache, so that one program's code compiles in well under
/// a second. It holds no graph: the generated code names the ops it runs.

#include <algorithm>
#include <bit>
#include <type_traits>

#include "fusegrad/core/simd.hpp"
#include "fusegrad/jit/native_abi.hpp"
#include "fusegrad/loops/tile.hpp"
#include "fusegrad/loops/tile_reductions.hpp"
#include "fusegrad/ops/list.hpp"

namespace fusegrad::detail::jit::native_kernel {

/// The op object of an instruction: an op without state, or one holding its one constant (as
/// the interpreter's `op_kernel` builds it).
template <class Op, Element T>
[[gnu::always_inline]] inline Op make_op(T s) noexcept {
  if constexpr (std::is_empty_v<Op>) return Op{};
  else return std::bit_cast<Op>(s);
}

/// A batch of a stream at `p`: whole, or its first `m` elements (the tile's last batch), read
/// as the tile kernels read them.
template <bool Tail, Element T>
[[gnu::always_inline]] inline simd<T> load(const T* p, index_t m) noexcept {
  if constexpr (Tail) return load_head<false>(p, m);
  else return simd<T>::load_unaligned(p);
}

using fusegrad::detail::op_boundary;

/// Stores a batch at `p`: whole, or its first `m` lanes.
template <bool Tail, Element T>
[[gnu::always_inline]] inline void store(T* p, const simd<T>& v, index_t m) noexcept {
  if constexpr (Tail) store_head(p, v, m);
  else v.store_unaligned(p);
}

}  // namespace fusegrad::detail::jit::native_kernel
