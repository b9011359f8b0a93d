#pragma once
/// \file fusegrad/jit/log.hpp
/// Counters and logs of the run-time compiler (the counterparts of `torch._dynamo.utils.counters`
/// and `TORCH_LOGS`).
///
/// `FUSEGRAD_LOGS` is a comma-separated list of channels, read once at first use:
///   - `graph`: each captured graph as readable code, when it is compiled;
///   - `guards`: the guards of each new cache entry;
///   - `recompiles`: each recompile with the guard that failed;
///   - `graph_breaks`: where and why a traced function broke its graph (once per reason);
///   - `output_code`: the compiled program of each entry;
///   - `compiled_autograd`, `compiled_autograd_verbose`: reserved for compiled autograd.
/// `all` turns every channel on. `fg::logs::set("recompiles,graph")` does the same from code,
/// and `fg::logs::set_sink` redirects the lines (default: standard error, one line each,
/// prefixed with `[fusegrad:<channel>]`).

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace fusegrad {

/// A snapshot of the run-time compiler's counters (all functions, all threads).
struct jit_counters {
  std::uint64_t unique_graphs = 0;               ///< graphs compiled (cache entries made)
  std::uint64_t graph_breaks = 0;                ///< sync points that split a traced function's graph
  std::uint64_t cache_hits = 0;                  ///< graphs served by an existing entry
  std::uint64_t cache_misses = 0;                ///< graphs with no matching entry
  std::uint64_t recompiles = 0;                  ///< misses of a graph that had entries (a guard failed)
  std::uint64_t fallbacks = 0;                   ///< graphs run eagerly (recompile limit reached, or too large)
  std::uint64_t compiled_autograd_captures = 0;  ///< backward passes captured (cache misses)
  std::uint64_t compiled_autograd_hits = 0;      ///< backward passes whose tape matched a cached key
  std::uint64_t compiled_autograd_direct = 0;    ///< hits that ran the captured graph on collected inputs (no rule run)
};

namespace detail {
struct jit_counter_cells {
  std::atomic<std::uint64_t> unique_graphs{0}, graph_breaks{0}, cache_hits{0}, cache_misses{0}, recompiles{0},
      fallbacks{0}, ca_captures{0}, ca_hits{0}, ca_direct{0};
};
inline jit_counter_cells& counter_cells() noexcept {
  static jit_counter_cells c;
  return c;
}
inline void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

/// The counters now.
inline jit_counters counters() noexcept {
  auto& c = detail::counter_cells();
  auto r = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {r(c.unique_graphs), r(c.graph_breaks), r(c.cache_hits), r(c.cache_misses), r(c.recompiles),
          r(c.fallbacks),     r(c.ca_captures),  r(c.ca_hits),    r(c.ca_direct)};
}
/// Sets every counter to zero.
inline void reset_counters() noexcept {
  auto& c = detail::counter_cells();
  for (auto* a : {&c.unique_graphs, &c.graph_breaks, &c.cache_hits, &c.cache_misses, &c.recompiles, &c.fallbacks,
                  &c.ca_captures, &c.ca_hits, &c.ca_direct})
    a->store(0, std::memory_order_relaxed);
}

namespace logs {

/// A log channel (see this header's comment).
enum channel : unsigned {
  graph = 1U << 0,
  guards = 1U << 1,
  recompiles = 1U << 2,
  graph_breaks = 1U << 3,
  output_code = 1U << 4,
  compiled_autograd = 1U << 5,
  compiled_autograd_verbose = 1U << 6,
};

[[nodiscard]] inline std::string_view name(channel c) noexcept {
  switch (c) {
    case graph: return "graph";
    case guards: return "guards";
    case recompiles: return "recompiles";
    case graph_breaks: return "graph_breaks";
    case output_code: return "output_code";
    case compiled_autograd: return "compiled_autograd";
    case compiled_autograd_verbose: return "compiled_autograd_verbose";
  }
  return "?";
}

/// Parses a channel list such as "recompiles,graph" (unknown names are ignored).
[[nodiscard]] inline unsigned parse(std::string_view spec) noexcept {
  unsigned m = 0;
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '+')) item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == "all") m = ~0U;
    for (unsigned b = 0; b < 7; ++b)
      if (item == name(static_cast<channel>(1U << b))) m |= 1U << b;
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return m;
}

namespace detail {
inline std::atomic<unsigned>& mask() noexcept {
  static std::atomic<unsigned> m{[] {
    const char* env = std::getenv("FUSEGRAD_LOGS");
    return env ? parse(env) : 0U;
  }()};
  return m;
}
struct sink_state {
  std::mutex mu;
  std::function<void(channel, std::string_view)> fn;
};
inline sink_state& sink() {
  static sink_state s;
  return s;
}
}  // namespace detail

/// Turns on exactly the channels in `spec` (the `FUSEGRAD_LOGS` syntax; "" turns all off).
inline void set(std::string_view spec) noexcept { detail::mask().store(parse(spec), std::memory_order_relaxed); }
/// Whether channel `c` is on.
[[nodiscard]] inline bool enabled(channel c) noexcept {
  return (detail::mask().load(std::memory_order_relaxed) & c) != 0;
}
/// Sends log lines to `fn(channel, text)` instead of standard error (an empty function restores it).
inline void set_sink(std::function<void(channel, std::string_view)> fn) {
  std::lock_guard lock(detail::sink().mu);
  detail::sink().fn = std::move(fn);
}
/// Writes `text` to channel `c` if it is on.
inline void emit(channel c, std::string_view text) {
  if (!enabled(c)) return;
  auto& s = detail::sink();
  std::lock_guard lock(s.mu);
  if (s.fn) s.fn(c, text);
  else
    std::fprintf(stderr, "[fusegrad:%.*s] %.*s\n", static_cast<int>(name(c).size()), name(c).data(),
                 static_cast<int>(text.size()), text.data());
}

}  // namespace logs
}  // namespace fusegrad
