// The compile-time graph family's run-time part: each graph (instantiated in
// compile_family_<k>.cpp) runs on random sizes m, n and values through every path; values
// and gradients are compared with eager's. See compile_family.hpp.
#include "compile_family.hpp"

#include <cstdio>
#include <limits>
#include <sstream>

namespace fuzz {
namespace family {

namespace {
const char* name(cop k) {
  switch (k) {
    case cop::neg: return "neg";
    case cop::abs: return "abs";
    case cop::sin: return "sin";
    case cop::cos: return "cos";
    case cop::tanh: return "tanh";
    case cop::sigmoid: return "sigmoid";
    case cop::relu: return "relu";
    case cop::exp: return "exp";
    case cop::log: return "log";
    case cop::sqrt: return "sqrt";
    case cop::maximum: return "maximum";
    case cop::pow: return "pow";
    default: return "?";
  }
}

std::string node_text(const cgraph& g, int i) {
  const cnode& c = g.n[static_cast<std::size_t>(i)];
  const std::string A = c.a >= 0 ? tagged('t', c.a) : "", B = c.b >= 0 ? tagged('t', c.b) : "";
  const std::string k = format_double(c.k);
  switch (c.op) {
    case cop::x: return "x";
    case cop::y: return "y";
    case cop::s: return "s";
    case cop::neg: return "-" + A;
    case cop::add_s: return A + " + " + k;
    case cop::mul_s: return A + " * " + k;
    case cop::sub_s: return A + " - " + k;
    case cop::rdiv_s: return k + " / " + A;
    case cop::pow_s: return "fg::pow(" + A + ", " + k + ")";
    case cop::add: return A + " + " + B;
    case cop::sub: return A + " - " + B;
    case cop::mul: return A + " * " + B;
    case cop::div: return A + " / " + B;
    case cop::mask_step: return "fg::step(" + A + ")";
    case cop::mask_gt: return "fg::gt(" + A + ", " + B + ")";
    case cop::sum_all: return "fg::sum(" + A + ")";
    case cop::mean_all: return "fg::mean(" + A + ")";
    case cop::max_all: return "fg::max(" + A + ")";
    case cop::sum_last: return "fg::sum(" + A + ", -1, true)";
    case cop::mean_last: return "fg::mean(" + A + ", -1, true)";
    case cop::max_last: return "fg::max(" + A + ", -1, true)";
    case cop::softmax_last: return "fg::softmax(" + A + ", -1)";
    case cop::log_softmax_last: return "fg::log_softmax(" + A + ", -1)";
    case cop::logsumexp_last: return "fg::logsumexp(" + A + ", -1, true)";
    case cop::layer_norm_last: return "fg::layer_norm(" + A + ")";
    case cop::rms_norm_last: return "fg::rms_norm(" + A + ")";
    case cop::matmul: return "fg::matmul(" + A + ", w)";
    case cop::linear: return "fg::linear(" + A + ", w, y)";
    case cop::maximum:
    case cop::pow: return std::string("fg::") + name(c.op) + "(" + A + ", " + B + ")";
    default: return std::string("fg::") + name(c.op) + "(" + A + ")";
  }
}

/// Only the nodes reachable from the root count (the generator leaves some unused).
std::vector<char> reachable(const cgraph& g) {
  std::vector<char> r(static_cast<std::size_t>(g.count), 0);
  r[static_cast<std::size_t>(g.root)] = 1;
  for (int i = g.count - 1; i >= 0; --i)
    if (r[static_cast<std::size_t>(i)])
      for (int o : {g.n[static_cast<std::size_t>(i)].a, g.n[static_cast<std::size_t>(i)].b})
        if (o >= 0) r[static_cast<std::size_t>(o)] = 1;
  return r;
}

struct result {
  bool threw = false, fg_error = false;
  std::string what;
  snap out;
  std::vector<snap> grads;
};

template <class F>
result run_path(F&& forward, const std::vector<D>& base, std::uint64_t wseed, int ca) {
  result r;
  try {
    std::vector<D> in;
    for (const D& b : base) in.push_back(b.detach().clone().requires_grad(true));
    const D out = forward(in[0], in[1], in[2], in[3]);
    r.out = snapshot(out);
    const D loss = fg::sum(out * fg::randn<double>(out.shape(), wseed));
    if (ca) {
      fg::compiled_autograd::enable on;
      loss.backward();
    } else {
      loss.backward();
    }
    for (const D& t : in) r.grads.push_back(snapshot(t.grad()));
  } catch (const fg::error& e) {
    r.threw = r.fg_error = true;
    r.what = e.what();
  } catch (const std::exception& e) {
    r.threw = true;
    r.what = std::string("a non-fusegrad exception: ") + e.what();
  }
  return r;
}

std::string differ(const result& want, const result& got, bool exact) {
  if (want.threw != got.threw)
    return want.threw ? "throw: eager threw \"" + want.what + "\"; the path did not"
                      : "throw: the path threw \"" + got.what + "\"; eager did not";
  if (want.threw) return got.fg_error ? "" : "throw: the path threw " + got.what;
  if (auto d = compare(want.out, got.out, {exact, 1e-9}); !d.empty())
    return std::string(exact ? "value (bitwise): " : "value: ") + d;
  static const char* names[] = {"x", "y", "s", "w"};
  // Gradient elements equal up to rounding at the program's scale (see known_issues()): the
  // largest magnitude among the output and the gradients (the family's values are not kept).
  double scale = 0;
  const auto widen = [&](const snap& v) {
    for (double x : v.v)
      if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  };
  widen(want.out);
  for (const snap& g : want.grads) widen(g);
  const double noise = masked("zero_by_cancellation") ? 64 * std::numeric_limits<double>::epsilon() * scale : 0;
  for (std::size_t k = 0; k < want.grads.size(); ++k) {
    const snap &a = want.grads[k], &b = got.grads[k];
    if (a.defined != b.defined) {  // undefined and zeros are equal (see runtime_fuzz.cpp)
      const snap& def = a.defined ? a : b;
      if (std::all_of(def.v.begin(), def.v.end(), [](double v) { return v == 0; })) continue;
    }
    if (auto d = compare(a, b, {false, 1e-8, true, noise}); !d.empty()) {
      const bool empty = want.out.v.empty() || std::any_of(want.grads.begin(), want.grads.end(),
                                                           [](const snap& g) { return g.defined && g.v.empty(); });
      if (empty && masked("empty_regrouping") && zero_vs_nonfinite(a, b)) {
        count_masked("empty_regrouping");
        continue;
      }
      return std::string("grad of ") + names[k] + ": " + d;
    }
  }
  return "";
}
}  // namespace

std::string print_graph(const cgraph& g) {
  std::ostringstream o;
  const auto live = reachable(g);
  o << "auto fn = [](const auto& x, const auto& y, const auto& s, const auto& w) {  // x [m, n], y [n], s [], w [n, "
       "n]\n";
  for (int i = 0; i < g.count; ++i) {
    const cnode& c = g.n[static_cast<std::size_t>(i)];
    if (!live[static_cast<std::size_t>(i)] || c.op == cop::x || c.op == cop::y || c.op == cop::s) continue;
    o << "  const auto t" << i << " = " << node_text(g, i) << ";\n";
  }
  std::string root = node_text(g, g.root);
  const cop r = g.n[static_cast<std::size_t>(g.root)].op;
  if (r != cop::x && r != cop::y && r != cop::s) root = tagged('t', g.root);
  o << "  return " << root << ";\n};\n";
  std::string text = o.str();
  // leaves are spelled by name: replace tK of leaf nodes
  for (int i = g.count - 1; i >= 0; --i) {
    const cop k = g.n[static_cast<std::size_t>(i)].op;
    if (k != cop::x && k != cop::y && k != cop::s) continue;
    const std::string from = tagged('t', i), to = k == cop::x ? "x" : k == cop::y ? "y" : "s";
    for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos;) {
      const char next = at + from.size() < text.size() ? text[at + from.size()] : ' ';
      const char prev = at > 0 ? text[at - 1] : ' ';
      if (std::isdigit(static_cast<unsigned char>(next)) || std::isalnum(static_cast<unsigned char>(prev))) {
        at += from.size();
        continue;
      }
      text.replace(at, from.size(), to);
      at += to.size();
    }
  }
  return text;
}

bool run_case(const options& o, stats& st, std::uint64_t seed, const cgraph& g, const paths& p, std::uint64_t round) {
  rng r(seed * 1000003u + round * 7919u + o.seed * 104729u);
  static constexpr fg::index_t ms[] = {0, 1, 2, 3, 5, 8, 17};
  static constexpr fg::index_t ns[] = {0, 1, 2, 3, 4, 5, 7, 9, 33, 64, 100};
  const fg::index_t m = r.chance(0.1) ? ms[r.below(2)] : ms[2 + r.below(5)];
  const fg::index_t n = r.chance(0.1) ? ns[r.below(2)] : ns[2 + r.below(9)];
  const std::uint64_t vseed = r.next() % 1000000007u;
  const std::vector<fg::shape> shapes{{m, n}, {n}, {}, {n, n}};
  std::vector<D> base;
  for (std::size_t i = 0; i < shapes.size(); ++i) base.push_back(fg::randn<double>(shapes[i], vseed + i));
  std::vector<std::pair<std::size_t, std::pair<fg::index_t, double>>> specials;
  if (r.chance(0.15)) {
    static constexpr double sv[] = {0.0,
                                    -0.0,
                                    std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(),
                                    std::numeric_limits<double>::quiet_NaN(),
                                    1.0,
                                    -1.0};
    for (int k = 0; k < 2; ++k) {
      const auto i = static_cast<std::size_t>(r.below(3));  // not w
      const fg::index_t ne = base[i].numel();
      if (ne == 0) continue;
      const fg::index_t at = static_cast<fg::index_t>(r.below(static_cast<int>(ne)));
      const double v = sv[r.below(7)];
      base[i].data()[at] = v;
      specials.push_back({i, {at, v}});
    }
  }
  ++st.compile_graphs;
  const std::uint64_t wseed = vseed + 17;
  const result want = run_path(p.eager, base, wseed, 0);
  if (!want.threw) ++st.compile_executions;
  if (want.threw && !want.fg_error) {
    std::printf("=== MISMATCH in compile-time graph %llu: eager threw %s\n", static_cast<unsigned long long>(seed),
                want.what.c_str());
    return false;
  }
  const bool exact = g.n[static_cast<std::size_t>(g.root)].exact;
  struct path {
    const char* name;
    D (*fn)(const D&, const D&, const D&, const D&);
    int ca;  ///< 1: the backward under compiled autograd
  };
  const path ps[] = {
      {"fg::compile (fused)", p.fused, 0},
      {"fg::compile (aot_eager)", p.aot_eager, 0},
      {"fg::compile (backend::eager)", p.backend_eager, 0},
      {"fg::jit of the lambda", p.jitted, 0},
      {"fg::jit of the fused compiled function", p.jitted_compiled, 0},
      {"compiled autograd over fg::compile (fused)", p.fused, 1},
  };
  for (const path& pa : ps) {
    const result got = run_path(pa.fn, base, wseed, pa.ca);
    ++st.compile_executions;
    std::string d = differ(want, got, exact);
    if (d.empty()) continue;
    if (!want.threw && got.threw && std::string_view(pa.name).find("compile") != std::string_view::npos &&
        got.what.find("over an empty dim") != std::string::npos &&
        std::any_of(g.n.begin(), g.n.begin() + g.count, [](const cnode& c) { return c.op == cop::logsumexp_last; }) &&
        masked("logsumexp_empty")) {
      count_masked("logsumexp_empty");
      continue;
    }
    ++st.mismatches;
    std::printf("\n=== MISMATCH in compile-time graph %llu (round %llu), path %s, m = %lld, n = %lld\n%s\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(round), pa.name,
                static_cast<long long>(m), static_cast<long long>(n), d.c_str());
    std::printf(
        "--- reproducer ---\n// fusegrad fuzz reproducer: compile-time graph %llu, path %s\n// %s\n"
        "#include <cmath>\n#include <iomanip>\n#include <iostream>\n#include <fusegrad/fusegrad.hpp>\n"
        "namespace fg = fusegrad;\nusing D = fg::tensor<double>;\n\n%s\n",
        static_cast<unsigned long long>(seed), pa.name, d.c_str(), print_graph(g).c_str());
    std::printf("int main() {\n  std::cout << std::setprecision(17);\n  auto inputs = [] {\n    std::vector<D> in;\n");
    for (std::size_t i = 0; i < shapes.size(); ++i)
      std::printf("    in.push_back(fg::randn<double>(%s, %llu));\n", format_shape(shapes[i]).c_str(),
                  static_cast<unsigned long long>(vseed + i));
    for (const auto& [i, e] : specials)
      std::printf("    in[%zu].data()[%lld] = %s;\n", i, static_cast<long long>(e.first),
                  format_double(e.second).c_str());
    std::printf("    for (auto& t : in) t.requires_grad(true);\n    return in;\n  };\n");
    const char* make = pa.fn == p.fused || pa.ca  ? "fg::compile(fn)"
                       : pa.fn == p.aot_eager     ? "fg::compile<fg::backend::aot_eager>(fn)"
                       : pa.fn == p.backend_eager ? "fg::compile<fg::backend::eager>(fn)"
                       : pa.fn == p.jitted        ? "fg::jit(fn)"
                                           : "fg::jit([c = fg::compile(fn)](const D& a, const D& b, const D& e, const "
                                             "D& v) { return c(a, b, e, v); })";
    std::printf("  auto path = %s;\n", make);
    std::printf(
        "  for (int through_path : {0, 1}) {\n    std::vector<D> in = inputs();\n    try {\n"
        "      D out = through_path ? path(in[0], in[1], in[2], in[3]) : fn(in[0], in[1], in[2], in[3]);\n"
        "      D loss = fg::sum(out * fg::randn<double>(out.shape(), %llu));\n",
        static_cast<unsigned long long>(wseed));
    if (pa.ca)
      std::printf(
          "      if (through_path) {\n        fg::compiled_autograd::enable on;\n        loss.backward();\n      } "
          "else {\n        loss.backward();\n      }\n");
    else std::printf("      loss.backward();\n");
    std::printf(
        "      std::cout << (through_path ? \"path\" : \"eager\") << \": \" << out << \"\\n\";\n"
        "      for (auto& t : in) std::cout << \"  grad: \" << t.grad() << \"\\n\";\n"
        "    } catch (const std::exception& e) {\n      std::cout << \"threw: \" << e.what() << \"\\n\";\n    }\n  "
        "}\n}\n--- end ---\n");
    return false;
  }
  return true;
}

}  // namespace family

bool run_compile_family(const options& o, stats& st, double deadline_s) {
  std::vector<family::entry> all;
  for (auto slice : {family::slice_0, family::slice_1, family::slice_2, family::slice_3}) {
    auto s = slice();
    all.insert(all.end(), s.begin(), s.end());
  }
  bool ok = true;
  for (long round = 0; round < o.compile_rounds; ++round)
    for (const auto& e : all) {
      if (deadline_s > 0 && elapsed_s() > deadline_s) return ok;
      if (o.verbose)
        std::printf("compile-time graph %llu, round %ld\n", static_cast<unsigned long long>(e.seed), round);
      if (!e.run(o, st, static_cast<std::uint64_t>(round))) {
        ok = false;
        if (!o.keep_going) return false;
      }
    }
  return ok;
}

}  // namespace fuzz
