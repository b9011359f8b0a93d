// The differential fuzzer's driver: fusegrad_fuzz [--seed S] [--graphs N] [--first G] [--seconds T]
// [--compile-rounds R] [--runtime-only | --compile-only] [--no-shrink] [--keep-going]
// [--unmask NAME|all] [--list-known] [--verbose]. See docs/fuzzing.md.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz.hpp"

int main(int argc, char** argv) {
  fuzz::options o;
  auto usage = [] {
    std::fprintf(stderr,
                 "usage: fusegrad_fuzz [--seed S] [--graphs N] [--seconds T] [--compile-rounds R]\n"
                 "                     [--runtime-only | --compile-only] [--no-shrink] [--keep-going]\n"
                 "                     [--unmask NAME|all] [--list-known] [--verbose]\n"
                 "  --graphs 0 --seconds T: run for T seconds\n");
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--seed") {
      const char* v = value();
      if (!v) return usage();
      o.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--graphs") {
      const char* v = value();
      if (!v) return usage();
      o.graphs = std::strtol(v, nullptr, 10);
    } else if (a == "--first") {
      const char* v = value();
      if (!v) return usage();
      o.first = std::strtol(v, nullptr, 10);
    } else if (a == "--seconds") {
      const char* v = value();
      if (!v) return usage();
      o.seconds = std::strtod(v, nullptr);
    } else if (a == "--compile-rounds") {
      const char* v = value();
      if (!v) return usage();
      o.compile_rounds = std::strtol(v, nullptr, 10);
    } else if (a == "--runtime-only") {
      o.compiled = false;
    } else if (a == "--compile-only") {
      o.runtime = false;
    } else if (a == "--no-shrink") {
      o.shrink = false;
    } else if (a == "--keep-going") {
      o.keep_going = true;
    } else if (a == "--verbose") {
      o.verbose = true;
    } else if (a == "--unmask") {
      const char* v = value();
      if (!v || !fuzz::unmask(v)) {
        std::fprintf(stderr, "--unmask: no known issue named '%s' (see --list-known)\n", v ? v : "");
        return 2;
      }
    } else if (a == "--list-known") {
      for (const auto& k : fuzz::known_issues())
        std::printf("%-28s %s  %s\n", k.name, k.on ? "masked  " : "unmasked", k.what);
      return 0;
    } else {
      return usage();
    }
  }
  if (o.graphs <= 0 && o.seconds <= 0) return usage();
  (void)fuzz::elapsed_s();
  const double deadline = o.seconds > 0 ? o.seconds : 0;
  fuzz::stats st;
  bool ok = true;
  // The compile-time family first (its graphs are fixed; rounds draw new shapes and values),
  // then run-time programs until the count or the time is reached.
  if (o.compiled) ok = fuzz::run_compile_family(o, st, deadline) && ok;
  const double t_compile = fuzz::elapsed_s();
  if (o.runtime && (ok || o.keep_going)) ok = fuzz::run_runtime_fuzz(o, st, deadline) && ok;
  const double t = fuzz::elapsed_s();
  int masks = 0;
  long masked = 0;  // every comparison a switch skipped, whichever check skipped it
  for (const auto& k : fuzz::known_issues()) {
    masks += k.on;
    masked += k.hits;
    if (k.hits) std::printf("  masked by %-28s %ld\n", k.name, k.hits);
  }
  std::printf(
      "fusegrad_fuzz seed %llu: %ld run-time graphs (%ld invalid: eager threw) in %.1f s, %.1f graphs/s, %ld path runs "
      "compared (%ld of them trace_once replays; %ld trace_once calls refused as documented), %ld eager gradients "
      "against finite differences; %ld compile-time graph cases (%ld path runs) in %.2f s; %ld comparisons masked by "
      "%d known-issue switches; %ld mismatches\n",
      static_cast<unsigned long long>(o.seed), st.graphs, st.invalid, t - t_compile,
      t > t_compile ? static_cast<double>(st.graphs) / (t - t_compile) : 0.0, st.executions, st.replays, st.refused,
      st.fd_checks, st.compile_graphs, st.compile_executions, t_compile, masked, masks, st.mismatches);
  if (fusegrad::native::current_mode() != fusegrad::native::mode::off) {
    const auto c = fusegrad::native::counters();
    std::printf("native code: %llu kernels compiled, %llu memory hits, %llu disk hits, %llu failures\n",
                static_cast<unsigned long long>(c.compiles), static_cast<unsigned long long>(c.memory_hits),
                static_cast<unsigned long long>(c.disk_hits), static_cast<unsigned long long>(c.failures));
  }
  return ok ? 0 : 1;
}
