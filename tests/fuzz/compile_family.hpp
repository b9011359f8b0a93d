#pragma once
// The compile-time graph family: `fg::compile` needs a graph in a C++ type, so graphs are
// generated at compile time. A constexpr generator (seeded by a template argument) builds a
// small expression DAG over four inputs — x [m, n], y [n], s [] and w [n, n] — choosing ops
// whose shapes fit for every m and n; `expr<G, Node>` turns it into a generic lambda's body.
// Each graph is then run, at run time, on random sizes and values through eager (the
// reference), fg::compile with the three backends, fg::jit (tracing the lambda, and tracing
// the compiled function) and compiled autograd over a compiled forward.
// Each compile_family_<k>.cpp instantiates a slice of the family (compile time: see
// docs/fuzzing.md).
#include <array>
#include <optional>
#include <string>

#include "fuzz.hpp"

namespace fuzz::family {

// clang-format off
enum class cop : std::uint8_t {
  x, y, s,                                               // leaves (w only feeds matmul/linear)
  neg, abs, sin, cos, tanh, sigmoid, relu, exp, log, sqrt,  // one operand
  add_s, mul_s, sub_s, rdiv_s, pow_s,                    // with a constant
  add, sub, mul, div, maximum, pow,                      // two operands (broadcasting)
  mask_gt, mask_step,                                    // a * gt(b, c), a * step(b): no gradient through the mask
  sum_all, mean_all, max_all, sum_last, mean_last, max_last,  // reductions (last dim: keepdim)
  softmax_last, log_softmax_last, logsumexp_last,        // the softmax family over the last dim (logsumexp: keepdim)
  layer_norm_last, rms_norm_last,                        // the normalisations over the last dim
  matmul, linear,                                        // a [..., n] x w [n, n]; a wᵀ + y
};
// clang-format on

/// A dim class of a shape's last two positions: absent, literal 1, or the size m (second to
/// last) / n (last). Broadcasting between any two shapes of the family is always valid.
enum dimc : std::uint8_t { none = 0, one = 1, full = 2 };

struct cnode {
  cop op{};
  int a = -1, b = -1, c = -1;
  double k = 0;
  dimc d0 = none, d1 = none;  ///< shape: [d0, d1] (d0 = m-or-1, d1 = n-or-1)
  bool exact = true;          ///< no reduction or matmul below (element-wise chains are bitwise equal on every path)
};

inline constexpr int max_nodes = 48;

struct cgraph {
  std::array<cnode, max_nodes> n{};
  int count = 0;
  int root = -1;
};

constexpr std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The generator: `budget` nodes at most, each op chosen by the seed among those whose shape rule fits.
struct cgen {
  cgraph g{};
  std::uint64_t st;
  constexpr explicit cgen(std::uint64_t seed) : st(mix(seed * 7919 + 1)) {}
  constexpr int below(int k) {
    st = mix(st);
    return static_cast<int>(st % static_cast<std::uint64_t>(k));
  }
  constexpr int push(cnode c) {
    if (g.count >= max_nodes) throw "fuzz::family: too many nodes";  // a compile error in constant evaluation
    g.n[static_cast<std::size_t>(g.count)] = c;
    return g.count++;
  }
  constexpr const cnode& at(int i) const { return g.n[static_cast<std::size_t>(i)]; }
  constexpr int leaf() {
    const int w = below(10);
    if (w < 6) return push({cop::x, -1, -1, -1, 0, full, full, true});
    if (w < 9) return push({cop::y, -1, -1, -1, 0, none, full, true});
    return push({cop::s, -1, -1, -1, 0, none, none, true});
  }
  static constexpr dimc join(dimc a, dimc b) { return a > b ? a : b; }
  constexpr int unary(cop op, int a, double k = 0) {
    const cnode& A = at(a);
    return push({op, a, -1, -1, k, A.d0, A.d1, A.exact});
  }
  constexpr int positive(int a) { return unary(cop::add_s, unary(cop::abs, a), 0.1); }
  constexpr int binary(cop op, int a, int b) {
    const cnode& A = at(a);
    const cnode& B = at(b);
    return push({op, a, b, -1, 0, join(A.d0, B.d0), join(A.d1, B.d1), A.exact && B.exact});
  }
  /// A subgraph of about `size` nodes; may reuse `avail` (an earlier node) to make a DAG.
  constexpr int make(int size, int avail) {
    if (size <= 1 || g.count >= max_nodes / 2) return (avail >= 0 && below(3) == 0) ? avail : leaf();
    const int w = below(100);
    if (w < 30) {  // one operand
      constexpr cop ops[] = {cop::neg,     cop::abs,  cop::sin, cop::cos, cop::tanh,
                             cop::sigmoid, cop::relu, cop::exp, cop::log, cop::sqrt};
      const cop op = ops[below(10)];
      int a = make(size - 1, avail);
      if (op == cop::exp) a = unary(cop::tanh, a);
      if (op == cop::log || op == cop::sqrt) a = positive(a);
      return unary(op, a);
    }
    if (w < 42) {  // with a constant
      constexpr cop ops[] = {cop::add_s, cop::mul_s, cop::sub_s, cop::rdiv_s, cop::pow_s};
      constexpr double ks[] = {0.5, 2.0, -1.5, 3.0, 0.25};
      constexpr double ps[] = {2.0, 3.0, -1.0, 0.5, 1.5, 0.0, 17.0, -2.0};
      const cop op = ops[below(5)];
      int a = make(size - 1, avail);
      const double k = op == cop::pow_s ? ps[below(8)] : ks[below(5)];
      if (op == cop::pow_s && k != static_cast<double>(static_cast<long long>(k))) a = positive(a);
      if (op == cop::rdiv_s) a = unary(cop::add_s, unary(cop::abs, a), 0.5);
      return unary(op, a, k);
    }
    if (w < 70) {  // two operands
      constexpr cop ops[] = {cop::add, cop::sub, cop::mul, cop::div, cop::maximum, cop::pow, cop::mul, cop::add};
      const cop op = ops[below(8)];
      int a = make(size / 2, avail);
      int b = make(size - size / 2, a);
      if (op == cop::div) b = unary(cop::add_s, unary(cop::abs, b), 0.5);
      if (op == cop::pow) {
        a = positive(a);
        b = unary(cop::tanh, b);
      }
      return binary(op, a, b);
    }
    if (w < 76) {  // a mask from exact values
      const int a = make(size / 2, avail);
      const int b = make(size - size / 2, a);
      if (!at(b).exact) return binary(cop::mul, a, b);
      if (below(2) == 0) {
        const int m = binary(cop::mask_step, b, b);  // step(b), shaped like b
        return binary(cop::mul, a, m);
      }
      const int c = leaf();
      const int m = binary(cop::mask_gt, b, c);
      return binary(cop::mul, a, m);
    }
    if (w < 90) {  // reductions
      const int a = make(size - 1, avail);
      const cnode& A = at(a);
      const int kind = below(12);
      if (kind >= 6 && A.d1 != none) {  // the softmax family and the normalisations: rows, as in attention
        constexpr cop ops[] = {cop::softmax_last, cop::log_softmax_last, cop::logsumexp_last, cop::layer_norm_last,
                               cop::rms_norm_last};
        const cop op = ops[(kind - 6) % 5];
        return push({op, a, -1, -1, 0, A.d0, op == cop::logsumexp_last ? one : A.d1, false});
      }
      if (kind < 3 || A.d1 == none) {  // over all dims: a 0-d result
        constexpr cop ops[] = {cop::sum_all, cop::mean_all, cop::max_all};
        const cop op = ops[kind % 3];
        return push({op, a, -1, -1, 0, none, none, op == cop::max_all && A.exact});
      }
      constexpr cop ops[] = {cop::sum_last, cop::mean_last, cop::max_last};
      const cop op = ops[kind % 3];
      return push({op, a, -1, -1, 0, A.d0, one, op == cop::max_last && A.exact});
    }
    // a matrix product with w: the operand's last dim must be n
    int a = make(size - 1, avail);
    if (at(a).d1 != full) a = binary(cop::add, a, push({cop::y, -1, -1, -1, 0, none, full, true}));
    const cnode& A = at(a);
    if (below(2) == 0) return push({cop::matmul, a, -1, -1, 0, A.d0, full, false});
    return push({cop::linear, a, -1, -1, 0, A.d0, full, false});  // a wᵀ + y
  }
};

constexpr cgraph make_graph(std::uint64_t seed) {
  cgen gen(seed);
  const int size = 3 + gen.below(8);
  gen.g.root = gen.make(size, -1);
  return gen.g;
}

/// The expression of node `N` of graph `G` over the inputs (tensors, symbolic values or lazy tensors).
template <const cgraph& G, int N>
constexpr auto expr(const auto& x, const auto& y, const auto& s, const auto& w) {
  constexpr cnode c = G.n[static_cast<std::size_t>(N)];
  if constexpr (c.op == cop::x) return x;
  else if constexpr (c.op == cop::y) return y;
  else if constexpr (c.op == cop::s) return s;
  else {
    const auto A = expr<G, c.a>(x, y, s, w);
    if constexpr (c.op == cop::neg) return -A;
    else if constexpr (c.op == cop::abs) return fusegrad::abs(A);
    else if constexpr (c.op == cop::sin) return fusegrad::sin(A);
    else if constexpr (c.op == cop::cos) return fusegrad::cos(A);
    else if constexpr (c.op == cop::tanh) return fusegrad::tanh(A);
    else if constexpr (c.op == cop::sigmoid) return fusegrad::sigmoid(A);
    else if constexpr (c.op == cop::relu) return fusegrad::relu(A);
    else if constexpr (c.op == cop::exp) return fusegrad::exp(A);
    else if constexpr (c.op == cop::log) return fusegrad::log(A);
    else if constexpr (c.op == cop::sqrt) return fusegrad::sqrt(A);
    else if constexpr (c.op == cop::add_s) return A + c.k;
    else if constexpr (c.op == cop::mul_s) return A * c.k;
    else if constexpr (c.op == cop::sub_s) return A - c.k;
    else if constexpr (c.op == cop::rdiv_s) return c.k / A;
    else if constexpr (c.op == cop::pow_s) return fusegrad::pow(A, c.k);
    else if constexpr (c.op == cop::sum_all) return fusegrad::sum(A);
    else if constexpr (c.op == cop::mean_all) return fusegrad::mean(A);
    else if constexpr (c.op == cop::max_all) return fusegrad::max(A);
    else if constexpr (c.op == cop::sum_last) return fusegrad::sum(A, -1, true);
    else if constexpr (c.op == cop::mean_last) return fusegrad::mean(A, -1, true);
    else if constexpr (c.op == cop::max_last) return fusegrad::max(A, -1, true);
    else if constexpr (c.op == cop::softmax_last) return fusegrad::softmax(A, -1);
    else if constexpr (c.op == cop::log_softmax_last) return fusegrad::log_softmax(A, -1);
    else if constexpr (c.op == cop::logsumexp_last) return fusegrad::logsumexp(A, -1, true);
    else if constexpr (c.op == cop::layer_norm_last) return fusegrad::layer_norm(A);
    else if constexpr (c.op == cop::rms_norm_last) return fusegrad::rms_norm(A);
    else if constexpr (c.op == cop::matmul) return fusegrad::matmul(A, w);
    else if constexpr (c.op == cop::linear) return fusegrad::linear(A, w, y);
    else {
      const auto B = expr<G, c.b>(x, y, s, w);
      if constexpr (c.op == cop::add) return A + B;
      else if constexpr (c.op == cop::sub) return A - B;
      else if constexpr (c.op == cop::mul) return A * B;
      else if constexpr (c.op == cop::div) return A / B;
      else if constexpr (c.op == cop::maximum) return fusegrad::maximum(A, B);
      else if constexpr (c.op == cop::pow) return fusegrad::pow(A, B);
      else if constexpr (c.op == cop::mask_step) return fusegrad::step(A);
      else if constexpr (c.op == cop::mask_gt) return fusegrad::gt(A, B);
      else static_assert(N < 0, "unknown op");
    }
  }
}

/// The graph as C++ (for reproducers).
std::string print_graph(const cgraph& g);

/// One graph of the family, type-erased: runs it on random sizes and values.
struct entry {
  std::uint64_t seed;
  const cgraph* graph;
  /// Runs round `round` of this graph; false on a mismatch (printed).
  bool (*run)(const options& o, stats& st, std::uint64_t round);
};

/// Shared run-time part (compile_family.cpp): the checks of one graph on one shape/value set,
/// given the path functions of the graph.
struct paths {
  D (*eager)(const D&, const D&, const D&, const D&);
  D (*fused)(const D&, const D&, const D&, const D&);
  D (*aot_eager)(const D&, const D&, const D&, const D&);
  D (*backend_eager)(const D&, const D&, const D&, const D&);
  D (*jitted)(const D&, const D&, const D&, const D&);           ///< fg::jit of the lambda
  D (*jitted_compiled)(const D&, const D&, const D&, const D&);  ///< fg::jit of the fused compiled function
};
bool run_case(const options& o, stats& st, std::uint64_t seed, const cgraph& g, const paths& p, std::uint64_t round);

template <std::uint64_t Seed>
struct graph_of {
  static constexpr cgraph g = make_graph(Seed);
  static constexpr auto fn = [](const auto& x, const auto& y, const auto& s, const auto& w) {
    return expr<g, g.root>(x, y, s, w);
  };
  static D eager(const D& x, const D& y, const D& s, const D& w) { return fn(x, y, s, w); }
  static D fused(const D& x, const D& y, const D& s, const D& w) {
    static const auto f = fusegrad::compile<fusegrad::backend::fused>(fn);
    return f(x, y, s, w);
  }
  static D aot(const D& x, const D& y, const D& s, const D& w) {
    static const auto f = fusegrad::compile<fusegrad::backend::aot_eager>(fn);
    return f(x, y, s, w);
  }
  static D beager(const D& x, const D& y, const D& s, const D& w) {
    static const auto f = fusegrad::compile<fusegrad::backend::eager>(fn);
    return f(x, y, s, w);
  }
  static D jitted(const D& x, const D& y, const D& s, const D& w) {
    static const auto f = fusegrad::jit(fn, {.recompile_limit = 64, .name = "family"});
    return f(x, y, s, w);
  }
  static D jitted_compiled(const D& x, const D& y, const D& s, const D& w) {
    static const auto c = fusegrad::compile<fusegrad::backend::fused>(fn);
    static const auto f = fusegrad::jit([](const D& a, const D& b, const D& e, const D& v) { return c(a, b, e, v); },
                                        {.recompile_limit = 64, .name = "family_compiled"});
    return f(x, y, s, w);
  }
  static bool run(const options& o, stats& st, std::uint64_t round) {
    static constexpr paths p{&eager, &fused, &aot, &beager, &jitted, &jitted_compiled};
    return run_case(o, st, Seed, g, p, round);
  }
  static constexpr entry value{Seed, &g, &run};
};

/// The family's slices (one per compile_family_<k>.cpp).
std::vector<entry> slice_0();
std::vector<entry> slice_1();
std::vector<entry> slice_2();
std::vector<entry> slice_3();

}  // namespace fuzz::family
