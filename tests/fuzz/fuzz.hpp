#pragma once
// The differential fuzzer's shared parts: options, the random source, snapshots of a run's
// values and gradients, their comparison, the known-issue switches and the report.
// See docs/fuzzing.md.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fuzz {

namespace fg = fusegrad;
using D = fg::tensor<double>;

/// Command-line options of the driver (tests/fuzz/main.cpp).
struct options {
  std::uint64_t seed = 1;
  long graphs = 2000;       ///< run-time programs to run (<= 0: no limit but `seconds`)
  long first = 0;           ///< index of the first run-time program (to rerun one: --first G --graphs 1)
  double seconds = 0;       ///< stop after this long (0: no limit but `graphs`)
  long compile_rounds = 4;  ///< rounds over the compile-time family (each: new sizes and values per graph)
  bool verbose = false;
  bool shrink = true;
  bool keep_going = false;  ///< report every mismatch instead of stopping at the first
  bool runtime = true, compiled = true;
};

/// SplitMix64: small, fast and the same everywhere.
struct rng {
  std::uint64_t s;
  explicit rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  template <class V>
  const auto& pick(const V& v) {
    return v[static_cast<std::size_t>(below(static_cast<int>(std::size(v))))];
  }
};

/// A tensor's values as the fuzzer compares them.
struct snap {
  bool defined = false;
  bool requires_grad = false;
  fg::shape sizes;
  std::vector<double> v;
};
inline snap snapshot(const D& t) {
  snap s;
  if (!t.defined()) return s;
  s.defined = true;
  s.requires_grad = t.requires_grad();
  s.sizes = t.shape();
  s.v = t.to_vector();
  return s;
}

/// Tolerances. `bitwise`: element-wise chains (no reduction, no matmul) must give the same
/// bits on every path (one tile kernel per op everywhere); all NaNs count as equal.
struct tolerance {
  bool bitwise = false;
  double rtol = 1e-9;
  /// Any non-finite value matches any non-finite value (inf vs -inf vs NaN). For gradients:
  /// a compiled backward may group a chain rule's factors or sums differently from eager
  /// (sum_to before or after a multiplication), and with infinite intermediates an
  /// algebraically equal grouping turns inf into NaN. Finite vs non-finite still differs.
  bool nonfinite_equal = false;
  /// Elements that differ by at most this much count as equal (0: off): rounding at the
  /// program's scale; a comparison that needed it counts one hit of `zero_by_cancellation`.
  double noise = 0;
};

/// Empty when `got` matches `want`, else a one-line description of the first difference.
std::string compare(const snap& want, const snap& got, tolerance tol);
/// Whether `want` and `got` differ, and only where one is 0 and the other NaN or inf (the
/// `empty_regrouping` switch).
bool zero_vs_nonfinite(const snap& want, const snap& got);

std::string format_double(double x);
/// `c` followed by the digits of `i` (appended: GCC 12 warns falsely, -Wrestrict, on
/// `"v" + std::to_string(i)` at -O3).
std::string tagged(char c, long long i);
std::string format_shape(const fg::shape& s);

// ---------------------------------------------------------------------------------------
// Known issues: each mismatch class found (and described in docs/fuzzing.md) has a switch
// here; while on, the cases it names are not compared (they are counted as "masked"), so that
// the rest can be fuzzed. `--unmask NAME` (or `all`) turns one off to check whether it is fixed.
// ---------------------------------------------------------------------------------------
struct known_issue {
  const char* name;
  const char* what;
  bool on;
  long hits = 0;  ///< comparisons it masked in this run
};
std::vector<known_issue>& known_issues();
bool masked(const char* name);         ///< whether the switch `name` is on
void count_masked(const char* name);   ///< one comparison skipped because of `name`
bool unmask(const std::string& name);  ///< turns one switch (or "all") off; false: no such name

/// Counts of one run of the fuzzer.
struct stats {
  long graphs = 0;          ///< run-time programs generated and run
  long invalid = 0;         ///< of which eager threw (every path must throw too)
  long executions = 0;      ///< path runs compared (a graph runs on many paths and shape sets)
  long masked = 0;          ///< comparisons skipped by a known-issue switch
  long compile_graphs = 0;  ///< compile-time graph cases (one graph on one shape/value set)
  long compile_executions = 0;
  long mismatches = 0;
  long fd_checks = 0;  ///< run-time programs whose eager gradients matched finite differences
  long replays = 0;    ///< of the path runs compared, trace_once calls that replayed a record
  long refused = 0;    ///< trace_once calls refused at trace time, as documented (a hook inside, ...)
};

/// The run-time program fuzzer (tests/fuzz/runtime_fuzz.cpp); returns false on a mismatch.
bool run_runtime_fuzz(const options& o, stats& st, double deadline_s);
/// The compile-time graph family (tests/fuzz/compile_family*.cpp); returns false on a mismatch.
bool run_compile_family(const options& o, stats& st, double deadline_s);
/// Seconds since the driver started.
double elapsed_s();

}  // namespace fuzz
