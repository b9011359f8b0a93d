#pragma once
/// \file fusegrad/core/hash.hpp
/// The hash of a pointer for the open-addressing tables keyed by node (the engine's slots,
/// compiled autograd's NodeCall index): allocations are 16-byte aligned, so the low bits carry
/// nothing; a Fibonacci multiply spreads the rest.

#include <cstddef>
#include <cstdint>

namespace fusegrad::detail {

/// `p`'s starting slot in a table of `mask + 1` slots (a power of two).
inline std::size_t pointer_slot(const void* p, std::size_t mask) noexcept {
  return static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & mask;
}

}  // namespace fusegrad::detail
