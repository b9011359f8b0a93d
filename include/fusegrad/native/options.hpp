#pragma once
/// \file fusegrad/native/options.hpp
/// The switches, counters and log of the native code cache (native/code_cache.hpp): whether
/// generated C++ is compiled at all, and in the background or on the calling thread.
///
/// `FUSEGRAD_NATIVE=off|async|sync` (read once, at first use; default `async`):
///   - `off`: nothing is compiled, every caller runs its interpreter;
///   - `async`: a request queues the compile for a background thread and returns at once;
///   - `sync`: a request compiles (or loads from the disk cache) before it returns.
/// `set_mode` overrides the variable from code. Lines go to standard error, prefixed with
/// `[fusegrad:native]`, or to the sink `set_log_sink` installs.

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace fusegrad::native {

enum class mode { off, async, sync };

/// A snapshot of the native cache's counters (all caches, all threads).
struct counters_t {
  std::uint64_t compiles = 0;     ///< kernels compiled by this process
  std::uint64_t memory_hits = 0;  ///< requests served by a function already loaded
  std::uint64_t disk_hits = 0;    ///< kernels loaded from a library another run (or cache) compiled
  std::uint64_t failures = 0;     ///< kernels that failed (once each), and a refused cache directory (once)
  std::uint64_t fallbacks = 0;    ///< runs of the interpreter because no native code was ready
};

}  // namespace fusegrad::native

namespace fusegrad::detail::native {

struct counter_cells {
  std::atomic<std::uint64_t> compiles{0}, memory_hits{0}, disk_hits{0}, failures{0}, fallbacks{0};
};
inline counter_cells& counters() noexcept {
  static counter_cells c;
  return c;
}
inline void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }

struct log_state {
  std::mutex m;
  std::function<void(std::string_view)> sink;
  std::atomic<bool> sources{false};
};
inline log_state& log_cells() {
  static log_state s;
  return s;
}

/// One line to the sink (standard error by default), whole: lines of several threads do not mix.
inline void log(std::string_view line) {
  auto& s = log_cells();
  const std::lock_guard<std::mutex> lock(s.m);
  if (s.sink) {
    s.sink(line);
    return;
  }
  std::fprintf(stderr, "[fusegrad:native] %.*s\n", static_cast<int>(line.size()), line.data());
}

/// The mode `FUSEGRAD_NATIVE` names; an unknown value is logged once and gives the default.
inline fusegrad::native::mode mode_from_environment() {
  using fusegrad::native::mode;
  const char* v = std::getenv("FUSEGRAD_NATIVE");
  if (v == nullptr || *v == '\0') return mode::async;
  const std::string_view s(v);
  if (s == "off") return mode::off;
  if (s == "async") return mode::async;
  if (s == "sync") return mode::sync;
  log("FUSEGRAD_NATIVE=" + std::string(s) + " is not one of off, async, sync; using async");
  return mode::async;
}

inline std::atomic<fusegrad::native::mode>& mode_cell() noexcept {
  static std::atomic<fusegrad::native::mode> m{[]() noexcept {
    try {
      return mode_from_environment();
    } catch (...) {  // a sink that throws, or no memory for the line: the default
      return fusegrad::native::mode::async;
    }
  }()};
  return m;
}

}  // namespace fusegrad::detail::native

namespace fusegrad::native {

/// The mode now: `FUSEGRAD_NATIVE`, or what `set_mode` set last.
inline mode current_mode() noexcept { return detail::native::mode_cell().load(std::memory_order_relaxed); }
inline void set_mode(mode m) noexcept { detail::native::mode_cell().store(m, std::memory_order_relaxed); }

inline counters_t counters() noexcept {
  auto& c = detail::native::counters();
  auto r = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {r(c.compiles), r(c.memory_hits), r(c.disk_hits), r(c.failures), r(c.fallbacks)};
}
inline void reset_counters() noexcept {
  auto& c = detail::native::counters();
  for (auto* a : {&c.compiles, &c.memory_hits, &c.disk_hits, &c.failures, &c.fallbacks})
    a->store(0, std::memory_order_relaxed);
}
/// The caller ran its interpreter because no native code was ready.
inline void note_fallback() noexcept { detail::native::bump(detail::native::counters().fallbacks); }

/// Sets the sink of the native cache's log lines (each without its trailing newline); an empty
/// function restores the default, standard error.
inline void set_log_sink(std::function<void(std::string_view)> sink) {
  auto& s = detail::native::log_cells();
  const std::lock_guard<std::mutex> lock(s.m);
  s.sink = std::move(sink);
}
/// Whether each compiled source is logged with the file it was built in (off by default).
inline void set_log_sources(bool on) noexcept {
  detail::native::log_cells().sources.store(on, std::memory_order_relaxed);
}
inline bool log_sources() noexcept { return detail::native::log_cells().sources.load(std::memory_order_relaxed); }

}  // namespace fusegrad::native
