#pragma once
/// \file fusegrad/core/hash.hpp
/// The library's two hashes, and a hash as a file name (`hex64`). `fnv1a`: the one hash of every
/// cache key (a graph's structure, the jit's and compiled autograd's keys, a backward rule's
/// constants, an expression node's op name at compile time, the native code cache's file names).
/// Only the native code cache's keys outlive the process, and it compares the whole source it
/// stored before it loads anything (native/code_cache.hpp).
/// `pointer_slot`: the hash of a pointer for the open-addressing tables keyed by node (the
/// engine's slots, compiled autograd's NodeCall index).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fusegrad::detail {

/// FNV-1a, mixing a whole 64-bit word per step (or a string's bytes one by one): cheap, order
/// sensitive, and usable in constant evaluation (expr/ hashes op names at compile time).
///
///   fnv1a h;                  // or fnv1a h(seed) to continue another hash
///   h.mix(kind).mix(name);
///   key = h.value();
class fnv1a {
 public:
  /// The published basis is 14695981039346656037; this one lacks its last digit, as every key
  /// here always has. The start does not change how well the steps spread, so it stays and the
  /// keys stay what they were (the native code cache's file names, the only keys kept on disk,
  /// change with it anyway whenever fusegrad's headers do).
  static constexpr std::uint64_t offset_basis = 1469598103934665603ULL;

  constexpr fnv1a() noexcept = default;
  /// Continues from `seed` (another hash's value) instead of the offset basis.
  constexpr explicit fnv1a(std::uint64_t seed) noexcept : h_(seed) {}

  constexpr fnv1a& mix(std::uint64_t v) noexcept {
    h_ = (h_ ^ v) * prime;
    return *this;
  }
  /// The bytes of `s`, one step each (as unsigned char: a byte above 0x7f is not sign-extended).
  constexpr fnv1a& mix(std::string_view s) noexcept {
    for (const char c : s) mix(static_cast<unsigned char>(c));
    return *this;
  }

  [[nodiscard]] constexpr std::uint64_t value() const noexcept { return h_; }

 private:
  static constexpr std::uint64_t prime = 1099511628211ULL;
  std::uint64_t h_ = offset_basis;
};

/// `p`'s starting slot in a table of `mask + 1` slots (a power of two): allocations are 16-byte
/// aligned, so the low bits carry nothing; a Fibonacci multiply spreads the rest.
inline std::size_t pointer_slot(const void* p, std::size_t mask) noexcept {
  return static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & mask;
}

/// `v` as 16 hexadecimal digits (a file name).
inline std::string hex64(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

}  // namespace fusegrad::detail
