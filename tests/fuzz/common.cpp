// The fuzzer's shared parts (see fuzz.hpp).
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "fuzz.hpp"

namespace fuzz {

std::string format_double(double x) {
  if (std::isnan(x)) return "NAN";
  if (std::isinf(x)) return x > 0 ? "INFINITY" : "-INFINITY";
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", x);
  std::string s = b;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string tagged(char c, long long i) {
  std::string s(1, c);
  s += std::to_string(i);
  return s;
}

std::string format_shape(const fg::shape& s) {
  std::string t = "{";
  for (std::size_t k = 0; k < s.size(); ++k) t += (k ? ", " : "") + std::to_string(s[k]);
  return t + "}";
}

namespace {
bool same_bits(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  std::uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return x == y;
}
}  // namespace

std::string compare(const snap& want, const snap& got, tolerance tol) {
  if (want.defined != got.defined)
    return std::string("defined ") + (want.defined ? "eagerly" : "on the path") + ", undefined " +
           (want.defined ? "on the path" : "eagerly");
  if (!want.defined) return "";
  if (want.sizes != got.sizes)
    return "shape " + format_shape(want.sizes) + " eagerly, " + format_shape(got.sizes) + " on the path";
  double scale = 0;
  bool noise = false;  // some element passed only as rounding noise (tol.noise)
  for (double x : want.v)
    if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  for (std::size_t i = 0; i < want.v.size(); ++i) {
    const double a = want.v[i], b = got.v[i];
    bool ok;
    if (tol.nonfinite_equal && !std::isfinite(a) && !std::isfinite(b)) ok = true;
    else if (tol.bitwise) ok = same_bits(a, b);
    else if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b))
      ok = same_bits(a, b) || (std::isnan(a) && std::isnan(b));
    else ok = std::abs(a - b) <= tol.rtol * (std::max(std::abs(a), std::abs(b)) + scale) || a == b;
    if (!ok && tol.noise > 0 && std::abs(a - b) <= tol.noise) ok = noise = true;
    if (!ok)
      return "element " + std::to_string(i) + " of " + std::to_string(want.v.size()) + " (shape " +
             format_shape(want.sizes) + "): expected " + format_double(a) + ", got " + format_double(b) +
             (tol.bitwise ? " (must be bitwise equal)" : "");
  }
  if (noise) count_masked("zero_by_cancellation");
  return "";
}

bool zero_vs_nonfinite(const snap& want, const snap& got) {
  if (want.defined != got.defined || want.sizes != got.sizes) return false;
  bool any = false;
  for (std::size_t i = 0; i < want.v.size(); ++i) {
    const double a = want.v[i], b = got.v[i];
    if (same_bits(a, b) || a == b) continue;
    if (!((a == 0 && !std::isfinite(b)) || (b == 0 && !std::isfinite(a)))) return false;
    any = true;
  }
  return any;
}

std::vector<known_issue>& known_issues() {
  static std::vector<known_issue> k{
      {"cancellation",
       "not a bug, a limit of comparing in floating point: a gradient mismatch in a program whose "
       "values include a tiny one (0 < |v| < 1e-150). Reciprocal-like derivatives (div, log, pow, "
       "sqrt) then add terms beyond 1e150 that cancel, and the result depends on the order in which "
       "the tape and a compiled backward accumulate (e.g. v / v at 1e-300: (3 + 2e300) - 2e300 = 0 "
       "eagerly, 3 compiled). Counted, not reported.",
       true},
      {"zero_by_cancellation",
       "not a bug, a limit of comparing in floating point: a gradient element that is small, or "
       "zero, up to rounding, where terms of the program's size cancel (d/dx (|cat(x, x)| - |x|), "
       "d/dy (y - mean(x) y) / y, or layer_norm over two values, whose output is +-1 up to eps): "
       "the tape and a compiled backward add the terms in different orders, so the two sides "
       "differ by 2^-53 times the terms (5.6e-17 against 0, or 8.0838225e-11 against "
       "8.0838447e-11). Elements that differ by at most 64 eps times the largest magnitude among "
       "the program's values and gradients count as equal; a relative comparison cannot judge "
       "them. Counted, not reported.",
       true},
      {"empty_regrouping",
       "not a bug, two groupings of one chain rule: a gradient element that is 0 on one side and "
       "NaN or inf on the other, in a program with an empty value. The gradient flowing back from an "
       "empty tensor is a sum over nothing; eagerly it is summed first and then multiplied by the "
       "next local derivative (0 * inf = NaN), a compiled backward multiplies first and sums nothing "
       "(0), as with x [0, 1] * pow(|y - inf| + 0.1, 1.5). Counted, not reported.",
       true},
      {"logsumexp_empty",
       "a limit of fg::compile (docs/compile.md): logsumexp over an empty dim is -inf eagerly "
       "(PyTorch's rule, an overload for tensors), while the compiled composite takes the max of "
       "the empty dim and throws \"cannot reduce ... over an empty dim\". The throw of a path through "
       "fg::compile (alone or called by fg::jit) "
       "where eager gave a value, in a graph with a logsumexp, is counted, not reported.",
       true},
  };
  return k;
}
bool masked(const char* name) {
  for (const auto& k : known_issues())
    if (std::strcmp(k.name, name) == 0) return k.on;
  return false;
}
void count_masked(const char* name) {
  for (auto& k : known_issues())
    if (std::strcmp(k.name, name) == 0) ++k.hits;
}
bool unmask(const std::string& name) {
  bool found = false;
  for (auto& k : known_issues())
    if (name == "all" || name == k.name) k.on = false, found = true;
  return found || name == "all";
}

double elapsed_s() {
  static const auto t0 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace fuzz
