#pragma once
/// \file fusegrad/core/machine.hpp
/// Facts about the machine that plans depend on: the size of the cache a call's values must
/// fit in for the "cached" save/recompute plan (partition/costs.hpp) to be the faster one, and
/// the size beyond which a loop's values stream from memory.

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace fusegrad {

namespace detail {
/// A positive byte count from environment variable `name`, or 0.
inline std::size_t env_bytes(const char* name) noexcept {
  const char* e = std::getenv(name);
  if (!e) return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(e, &end, 10);
  return end != e ? static_cast<std::size_t>(v) : 0;
}

/// The size of CPU 0's level-`level` cache as Linux's sysfs gives it (what `lscpu` shows), or
/// 0. Read before the C library's figure, which comes from `cpuid` and can be the whole host's:
/// on this project's virtual machines glibc says 384 MiB of L3 where the core sees 32 MiB.
inline std::size_t sysfs_cache_bytes(int level) noexcept {
  for (int index = 0; index < 8; ++index) {
    char path[96];
    std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
    std::FILE* f = std::fopen(path, "r");
    if (!f) return 0;
    int lv = 0;
    const bool read = std::fscanf(f, "%d", &lv) == 1;
    std::fclose(f);
    if (!read || lv != level) continue;
    std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    f = std::fopen(path, "r");
    if (!f) return 0;
    unsigned long long n = 0;
    char unit = 0;
    const int got = std::fscanf(f, "%llu%c", &n, &unit);
    std::fclose(f);
    if (got < 1 || n == 0) return 0;
    const unsigned shift = got == 2 && (unit == 'K' || unit == 'k')   ? 10
                           : got == 2 && (unit == 'M' || unit == 'm') ? 20
                                                                      : 0;
    return static_cast<std::size_t>(n) << shift;
  }
  return 0;
}

/// The size of CPU 0's level-`level` cache: environment variable `env` where it is set, else
/// sysfs's figure, else the C library's (`sc`: its `sysconf` name, or -1), else `fallback`.
inline std::size_t query_cache_level(const char* env, int level, [[maybe_unused]] int sc,
                                     std::size_t fallback) noexcept {
  if (const std::size_t v = env_bytes(env); v > 0) return v;
  if (const std::size_t v = sysfs_cache_bytes(level); v > 0) return v;
#if defined(__unix__) || defined(__APPLE__)
  if (sc >= 0)
    if (const long v = ::sysconf(sc); v > 0) return static_cast<std::size_t>(v);
#endif
  return fallback;
}

#if defined(_SC_LEVEL2_CACHE_SIZE)
inline constexpr int sc_level2 = _SC_LEVEL2_CACHE_SIZE, sc_level3 = _SC_LEVEL3_CACHE_SIZE;
#else
inline constexpr int sc_level2 = -1, sc_level3 = -1;
#endif

/// The L2 cache of one core (512 KiB where nothing says).
inline std::size_t query_cache_bytes() noexcept {
  return query_cache_level("FUSEGRAD_CACHE_BYTES", 2, sc_level2, std::size_t{512} << 10);
}
inline std::atomic<std::size_t>& cache_bytes_setting() noexcept {
  static std::atomic<std::size_t> bytes{query_cache_bytes()};
  return bytes;
}
/// The last-level cache, L3 (32 MiB where nothing says).
inline std::size_t query_last_cache_bytes() noexcept {
  return query_cache_level("FUSEGRAD_LAST_CACHE_BYTES", 3, sc_level3, std::size_t{32} << 20);
}
inline std::atomic<std::size_t>& last_cache_bytes_setting() noexcept {
  static std::atomic<std::size_t> bytes{query_last_cache_bytes()};
  return bytes;
}
}  // namespace detail

/// The cache size (bytes) below which a compiled function's values count as cache-resident:
/// the L2 cache of one core, queried once at start-up; `FUSEGRAD_CACHE_BYTES` overrides it.
inline std::size_t cache_bytes() noexcept { return detail::cache_bytes_setting().load(std::memory_order_relaxed); }
/// Sets `cache_bytes()` (0 restores the queried value).
inline void set_cache_bytes(std::size_t bytes) noexcept {
  detail::cache_bytes_setting().store(bytes ? bytes : detail::query_cache_bytes(), std::memory_order_relaxed);
}

/// The size (bytes) of the last-level cache, above which what a loop reads and writes comes
/// from memory (a run-time program's loops then walk longer tiles: fusegrad/jit/program.hpp):
/// queried once at start-up; `FUSEGRAD_LAST_CACHE_BYTES` overrides it.
inline std::size_t last_cache_bytes() noexcept {
  return detail::last_cache_bytes_setting().load(std::memory_order_relaxed);
}
/// Sets `last_cache_bytes()` (0 restores the queried value).
inline void set_last_cache_bytes(std::size_t bytes) noexcept {
  detail::last_cache_bytes_setting().store(bytes ? bytes : detail::query_last_cache_bytes(), std::memory_order_relaxed);
}

}  // namespace fusegrad
