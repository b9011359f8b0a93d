// Op coverage. Every differentiable op is gradchecked in double over the shape classes
// scalar (0-d), 1-element, vector, matrix, broadcast operands and empty (where the op allows
// it). Forward values are compared in float and double with independent references (std::
// math, hand-written broadcasting / reduction / matmul loops). grad_fn names, storage sharing
// of views and the non-differentiable comparisons, step and sign are checked too.
// Test cases named "regression: ..." pin bugs found by these tests and since fixed.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fg = fusegrad;

namespace {

using td = fg::tensor<double>;
using fg::index_t;
// Plain function pointers (captureless lambdas convert): one gradcheck instantiation per
// arity and no std::function machinery per lambda keep the compile time down.
using fn1 = td (*)(const td&);
using fn2 = td (*)(const td&, const td&);
using fn3 = td (*)(const td&, const td&, const td&);

// ---- inputs ---------------------------------------------------------------------------
// any: N(0,1). pos: U(0.5, 2). away: N(0,1) pushed >= 0.5 away from 0 (kinks of relu/abs,
// the pole of 1/x). grid: multiples of 0.5, with ties and exact zeros (for value checks).
enum class dom { any, pos, away, grid };

template <class E = double>
fg::tensor<E> input(const fg::shape& s, dom d = dom::any, std::uint64_t seed = 1) {
  std::vector<double> v =
      d == dom::pos ? fg::rand<double>(s, seed, 0.5, 2.0).to_vector() : fg::randn<double>(s, seed).to_vector();
  for (double& e : v) {
    if (d == dom::away) e = e < 0 ? e - 0.5 : e + 0.5;
    if (d == dom::grid) e = std::round(e * 2) / 2;
  }
  return fg::from_vector<E>(std::vector<E>(v.begin(), v.end()), s);
}

// ---- checking helpers -----------------------------------------------------------------
// One out-of-line assertion (with the call site's line captured) keeps the ~200 check sites
// small, which matters for compile time.
void expect_ok(int line, bool ok, const std::string& message) {
  CAPTURE(line);
  CHECK_MESSAGE(ok, message);
}

template <class... Fs>
fg::gradcheck_result gc(td (*f)(const Fs&...), const Fs&... xs) {
  try {
    return fg::gradcheck(f, xs...);
  } catch (const std::exception& e) {  // e.g. a gradient of the wrong shape
    fg::gradcheck_result r;
    r.ok = false;
    r.message = std::string("gradcheck threw: ") + e.what();
    return r;
  }
}
#define GRADCHECK(...)                                 \
  do {                                                 \
    const fg::gradcheck_result gc_r = gc(__VA_ARGS__); \
    expect_ok(__LINE__, gc_r.ok, gc_r.message);        \
  } while (false)

std::string str(const fg::shape& s) { return fg::to_string(s); }
template <class E>
constexpr double tol_of() {
  return std::is_same_v<E, float> ? 1e-5 : 1e-12;
}
template <class E>
std::vector<double> dbl(const std::vector<E>& v) {
  return {v.begin(), v.end()};
}

/// "" when `got` matches `want` within `tol` (relative; absolute below magnitude 1; NaN
/// matches NaN), else a description of the first mismatch.
template <class E>
std::string first_diff(const std::vector<E>& got, const std::vector<double>& want, double tol) {
  if (got.size() != want.size())
    return "got " + std::to_string(got.size()) + " elements, expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if ((std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= tol * std::max(1.0, std::abs(w))) continue;
    std::ostringstream os;
    os.precision(17);
    os << "element " << i << ": got " << g << ", expected " << w;
    return os.str();
  }
  return {};
}
#define CHECK_OK(...)                        \
  do {                                       \
    const std::string ok_m = (__VA_ARGS__);  \
    expect_ok(__LINE__, ok_m.empty(), ok_m); \
  } while (false)

// ---- independent references -----------------------------------------------------------
index_t count(const fg::shape& s) {
  index_t n = 1;
  for (index_t d : s) n *= d;
  return n;
}
std::vector<index_t> unravel(index_t l, const fg::shape& s) {
  std::vector<index_t> idx(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    idx[d] = l % s[d];
    l /= s[d];
  }
  return idx;
}
index_t ravel(const std::vector<index_t>& idx, const fg::shape& s) {
  index_t l = 0;
  for (std::size_t d = 0; d < s.size(); ++d) l = l * s[d] + idx[d];
  return l;
}

/// NumPy broadcasting by hand: the output shape, and for each output element the linear
/// indices of the elements of `sa` and `sb` it reads.
std::vector<std::pair<index_t, index_t>> broadcast_pairs(const fg::shape& sa, const fg::shape& sb, fg::shape& out) {
  const std::size_t n = std::max(sa.size(), sb.size());
  auto size_in = [n](const fg::shape& s, std::size_t d) {
    return d < n - s.size() ? index_t{1} : s[d - (n - s.size())];
  };
  out.assign(n, 0);
  for (std::size_t d = 0; d < n; ++d) out[d] = size_in(sa, d) == 1 ? size_in(sb, d) : size_in(sa, d);
  std::vector<std::pair<index_t, index_t>> r;
  for (index_t l = 0; l < count(out); ++l) {
    const auto idx = unravel(l, out);
    auto pick = [&](const fg::shape& s) {
      std::vector<index_t> j(s.size());
      for (std::size_t d = 0; d < s.size(); ++d) j[d] = s[d] == 1 ? 0 : idx[d + n - s.size()];
      return ravel(j, s);
    };
    r.emplace_back(pick(sa), pick(sb));
  }
  return r;
}

enum class red { sum, mean, max };
/// Reduction over the dims flagged in `mask`, by hand; `out` gets the keepdim shape.
std::vector<double> reduce_ref(const std::vector<double>& x, const fg::shape& s, const std::vector<bool>& mask, red k,
                               fg::shape& out) {
  out = s;
  for (std::size_t d = 0; d < s.size(); ++d)
    if (mask[d]) out[d] = 1;
  std::vector<double> acc(static_cast<std::size_t>(count(out)), k == red::max ? -INFINITY : 0.0), cnt(acc.size());
  for (index_t l = 0; l < count(s); ++l) {
    auto idx = unravel(l, s);
    for (std::size_t d = 0; d < s.size(); ++d)
      if (mask[d]) idx[d] = 0;
    const auto o = static_cast<std::size_t>(ravel(idx, out));
    const double v = x[static_cast<std::size_t>(l)];
    acc[o] = k == red::max ? std::max(acc[o], v) : acc[o] + v;
    cnt[o] += 1;
  }
  if (k == red::mean)
    for (std::size_t o = 0; o < acc.size(); ++o) acc[o] /= cnt[o];
  return acc;
}

/// Naive triple loop c[n×m] = a[n×k] · b[k×m] over row-major blocks at offsets ao, bo.
std::vector<double> mm_ref(const std::vector<double>& a, const std::vector<double>& b, index_t n, index_t k, index_t m,
                           index_t ao = 0, index_t bo = 0) {
  std::vector<double> c(static_cast<std::size_t>(n * m), 0.0);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j)
      for (index_t p = 0; p < k; ++p)
        c[static_cast<std::size_t>(i * m + j)] +=
            a[static_cast<std::size_t>(ao + i * k + p)] * b[static_cast<std::size_t>(bo + p * m + j)];
  return c;
}
/// NumPy matmul by hand: 1-D operands are promoted (and the dim dropped again), batch dims
/// broadcast.
std::vector<double> matmul_ref(const std::vector<double>& a, fg::shape sa, const std::vector<double>& b, fg::shape sb,
                               fg::shape& out) {
  const bool va = sa.size() == 1, vb = sb.size() == 1;
  if (va) sa.insert(sa.begin(), 1);
  if (vb) sb.push_back(1);
  const index_t n = sa[sa.size() - 2], k = sa.back(), m = sb.back();
  std::vector<double> r;
  for (auto [ia, ib] : broadcast_pairs({sa.begin(), sa.end() - 2}, {sb.begin(), sb.end() - 2}, out)) {
    const auto c = mm_ref(a, b, n, k, m, ia * n * k, ib * k * m);
    r.insert(r.end(), c.begin(), c.end());
  }
  if (!va) out.push_back(n);
  if (!vb) out.push_back(m);
  return r;
}

// ---- gradcheck tables -----------------------------------------------------------------
// A case is named by its expression: `x` is the input of unary cases, `a`, `b` of binary ones.
struct case1 {
  const char* name;
  dom d;
  fn1 f;
};
struct case2 {
  const char* name;
  dom da, db;
  fn2 f;
};
#define C1(d, expr)                                       \
  case1 {                                                 \
#expr, dom::d, [](const td& x) -> td { return expr; } \
  }
#define A1(expr) C1(any, expr)
#define C2(da, db, expr)                                                         \
  case2 {                                                                        \
#expr, dom::da, dom::db, [](const td& a, const td& b) -> td { return expr; } \
  }

void run1(const fg::shape& s, const std::vector<case1>& cases) {
  const std::string shape = str(s);
  CAPTURE(shape);
  for (const auto& c : cases) {
    const std::string op = c.name;
    CAPTURE(op);
    GRADCHECK(c.f, input(s, c.d, 7));
  }
}
void run2(const fg::shape& sa, const fg::shape& sb, const std::vector<case2>& cases) {
  const std::string shapes = str(sa) + " with " + str(sb);
  CAPTURE(shapes);
  for (const auto& c : cases) {
    const std::string op = c.name;
    CAPTURE(op);
    GRADCHECK(c.f, input(sa, c.da, 3), input(sb, c.db, 4));
  }
}
/// Unary cases each with its own input shape.
struct shaped {
  case1 c;
  fg::shape s;
};
#define V(expr, ...)                    \
  shaped {                              \
    A1(expr), fg::shape { __VA_ARGS__ } \
  }
void run_shaped(const std::vector<shaped>& cases) {
  for (const auto& c : cases) run1(c.s, {c.c});
}

const std::vector<case1> unary_cases = {
    A1(-x),
    A1(fg::exp(x)),
    C1(pos, fg::log(x)),
    A1(fg::sin(x)),
    A1(fg::cos(x)),
    A1(fg::tanh(x)),
    A1(fg::sigmoid(x)),
    C1(away, fg::relu(x)),
    C1(pos, fg::sqrt(x)),
    C1(away, fg::abs(x)),
    A1(fg::pow(x, 2)),
    A1(fg::pow(x, 3.0)),
    C1(pos, fg::pow(x, 0.5)),
    C1(pos, fg::pow(x, -1.5)),
    C1(away, fg::pow(x, 0.0)),
    A1(x + 2.5),
    A1(2.5 + x),
    A1(x - 2.5),
    A1(2.5 - x),
    A1(x * 2.5),
    A1(2 * x),
    A1(x / 2.5),
    C1(away, 2.5 / x),
    A1(x* x + fg::sin(x)),  // one input used three times: gradients accumulate
};
const std::vector<case2> binary_cases = {
    C2(any, any, a + b),  C2(any, any, a - b),         C2(any, any, a* b),
    C2(any, away, a / b), C2(pos, any, fg::pow(a, b)), C2(any, any, fg::maximum(a, b)),
};

// ---- forward values (float and double) ------------------------------------------------
template <class E>
void unary_values() {
  using te = fg::tensor<E>;
  struct ucase {
    const char* name;
    dom d;
    te (*f)(const te&);
    double (*ref)(double);
  };
#define UV(d, expr, ref)                                                                          \
  ucase {                                                                                         \
#expr, dom::d, [](const te& x) -> te { return expr; }, [](double v) -> double { return ref; } \
  }
  std::vector<ucase> cases = {
      UV(any, -x, -v),
      UV(any, fg::exp(x), std::exp(v)),
      UV(pos, fg::log(x), std::log(v)),
      UV(any, fg::sin(x), std::sin(v)),
      UV(any, fg::cos(x), std::cos(v)),
      UV(any, fg::tanh(x), std::tanh(v)),
      UV(any, fg::sigmoid(x), 1 / (1 + std::exp(-v))),
      UV(grid, fg::relu(x), v > 0 ? v : 0.0),
      UV(pos, fg::sqrt(x), std::sqrt(v)),
      UV(grid, fg::abs(x), std::abs(v)),
      UV(grid, fg::step(x), v > 0 ? 1.0 : 0.0),
      UV(grid, fg::sign(x),
         v > 0   ? 1.0
         : v < 0 ? -1.0
                 : 0.0),
      UV(any, fg::pow(x, 2), v * v),
      UV(any, fg::pow(x, 3), v * v * v),
      UV(pos, fg::pow(x, 0.5), std::sqrt(v)),
      UV(pos, fg::pow(x, -1.5), std::pow(v, -1.5)),
  };
  if constexpr (std::is_same_v<E, double>) {  // plain lane arithmetic: double only (compile time)
    cases.insert(cases.end(), {UV(any, x + 2.5, v + 2.5), UV(any, 2.5 + x, 2.5 + v), UV(any, x - 2.5, v - 2.5),
                               UV(any, 2.5 - x, 2.5 - v), UV(any, x * 2.5, v * 2.5), UV(any, 2.5 * x, 2.5 * v),
                               UV(any, x / 4, v / 4), UV(away, 2.5 / x, 2.5 / v)});
  }
#undef UV
  auto ref = [](const te& x, double (*f)(double)) {
    std::vector<double> r = dbl(x.to_vector());
    for (double& v : r) v = f(v);
    return r;
  };
  for (index_t n : {0, 1, 3, 8, 37}) {  // 37: SIMD body and scalar tail; 1 and 3: tail only
    CAPTURE(n);
    for (const auto& c : cases) {
      const std::string op = c.name;
      CAPTURE(op);
      const te x = input<E>({n}, c.d, 10 + static_cast<std::uint64_t>(n));
      CHECK_OK(first_diff(c.f(x).to_vector(), ref(x, c.ref), tol_of<E>()));
      const te xs = input<E>({2 * n + 1}, c.d, 20).slice(0, 0, 2 * n + 1, 2);  // strided input
      CHECK_OK(first_diff(c.f(xs).to_vector(), ref(xs, c.ref), tol_of<E>()));
    }
  }
}

template <class E>
void binary_values() {
  using te = fg::tensor<E>;
  struct bcase {
    const char* name;
    dom da, db;
    te (*f)(const te&, const te&);
    double (*ref)(double, double);
  };
#define BV(da, db, expr, ref)                                                                                 \
  bcase {                                                                                                     \
#expr, dom::da, dom::db,                                                                                  \
        [](const te& a, const te& b) -> te { return expr; }, [](double x, double y) -> double { return ref; } \
  }
  const std::vector<bcase> cases = {
      BV(any, any, a + b, x + y),
      BV(any, any, a - b, x - y),
      BV(any, any, a * b, x * y),
      BV(any, away, a / b, x / y),
      BV(pos, any, fg::pow(a, b), std::pow(x, y)),
      BV(grid, grid, fg::maximum(a, b), std::max(x, y)),
      BV(grid, grid, fg::gt(a, b), x > y),
      BV(grid, grid, fg::ge(a, b), x >= y),
      BV(grid, grid, fg::lt(a, b), x < y),
      BV(grid, grid, fg::le(a, b), x <= y),
      BV(grid, grid, fg::eq(a, b), x == y),
      BV(grid, grid, fg::ne(a, b), x != y),
  };
#undef BV
  const std::vector<std::pair<fg::shape, fg::shape>> pairs = {
      {{37}, {37}},
      {{}, {37}},
      {{37}, {}},
      {{1}, {37}},
      {{3, 1}, {1, 4}},
      {{4}, {2, 3, 4}},
      {{2, 3, 4}, {3, 1}},
      {{5, 37}, {37}},
      {{37, 1}, {1, 5}},
      {{0}, {}},
      {{2, 0}, {2, 1}},
      {{0}, {0}},
      // bias-like operands repeated over more than one tile (periods that do not divide it)
      {{40, 37}, {37}},
      {{37}, {9, 40, 37}},
      {{3, 300}, {300}}};
  for (int layout = 0; layout < 2; ++layout) {
    for (const auto& [sa, sb] : pairs) {
      const std::string shapes = str(sa) + " with " + str(sb) + (layout ? " (strided)" : "");
      CAPTURE(shapes);
      for (const auto& c : cases) {
        const std::string op = c.name;
        CAPTURE(op);
        te a = input<E>(sa, c.da, 5), b = input<E>(sb, c.db, 6);
        if (layout == 1) {  // same values through non-contiguous views
          if (sa.size() == 2) a = a.t().contiguous().t();
          if (sb.size() == 1) b = input<E>({2 * sb[0]}, c.db, 6).slice(0, 0, 2 * sb[0], 2);
        }
        const auto av = dbl(a.to_vector()), bv = dbl(b.to_vector());
        fg::shape out;
        std::vector<double> want;
        for (auto [i, j] : broadcast_pairs(sa, sb, out))
          want.push_back(c.ref(av[static_cast<std::size_t>(i)], bv[static_cast<std::size_t>(j)]));
        const te y = c.f(a, b);
        CHECK(str(y.shape()) == str(out));
        CHECK_OK(first_diff(y.to_vector(), want, tol_of<E>()));
      }
    }
  }
}

template <class E>
void reduction_values() {
  using te = fg::tensor<E>;
  struct rcase {
    fg::shape s;
    std::vector<index_t> dims;  // empty: all dims
    bool keepdim;
  };
  const std::vector<rcase> cases = {
      {{}, {}, false},         {{1}, {}, false},           {{37}, {}, false},      {{100}, {0}, true},
      {{5, 37}, {}, false},    {{5, 37}, {0}, false},      {{5, 37}, {1}, true},   {{5, 37}, {-1}, false},
      {{5, 37}, {0, 1}, true}, {{2, 3, 4}, {0, 2}, false}, {{2, 3, 4}, {1}, true}, {{3, 1, 4}, {1}, false},
      {{0}, {}, false},        {{2, 0}, {1}, false},       {{0, 3}, {0}, true},    {{2, 0}, {0}, false},
  };
  for (int layout = 0; layout < 2; ++layout) {
    for (const auto& c : cases) {
      if (layout == 1 && c.s.size() < 2) continue;
      const std::string what = str(c.s) + " over " + std::to_string(c.dims.size()) + " dims, keepdim " +
                               std::to_string(c.keepdim) + (layout ? " (strided)" : "");
      CAPTURE(what);
      std::vector<bool> mask(c.s.size(), c.dims.empty());
      for (index_t d : c.dims) mask[static_cast<std::size_t>(d < 0 ? d + static_cast<index_t>(c.s.size()) : d)] = true;
      te x = input<E>(c.s, dom::any, 12);
      if (layout == 1) x = x.transpose(0, 1).contiguous().transpose(0, 1);  // same values, strided
      const bool all = c.dims.empty();
      for (red k : {red::sum, red::mean, red::max}) {
        CAPTURE(static_cast<int>(k));
        fg::shape out;
        const auto want = reduce_ref(dbl(x.to_vector()), c.s, mask, k, out);
        index_t folded = 1;  // elements folded into each output
        for (std::size_t d = 0; d < c.s.size(); ++d) folded *= mask[d] ? c.s[d] : 1;
        if (k == red::max && folded == 0) {  // max over an empty reduction throws
          CHECK_THROWS_AS((void)(all ? fg::max(x) : fg::max(x, c.dims, c.keepdim)), fg::error);
          continue;
        }
        const te y = k == red::sum    ? (all ? fg::sum(x) : fg::sum(x, c.dims, c.keepdim))
                     : k == red::mean ? (all ? fg::mean(x) : fg::mean(x, c.dims, c.keepdim))
                                      : (all ? fg::max(x) : fg::max(x, c.dims, c.keepdim));
        if (all) CHECK(y.dim() == 0);
        if (c.keepdim) CHECK(str(y.shape()) == str(out));
        CHECK(y.numel() == static_cast<index_t>(want.size()));
        CHECK_OK(first_diff(y.to_vector(), want, tol_of<E>()));
      }
    }
  }
  // Against std::accumulate / std::max_element over long vectors (SIMD body and tail).
  for (index_t n : {7, 37, 1000}) {
    const te x = input<E>({n}, dom::any, 13);
    const auto v = dbl(x.to_vector());
    const double s = std::accumulate(v.begin(), v.end(), 0.0);
    CHECK(fg::sum(x).item() == doctest::Approx(s).epsilon(tol_of<E>() * 10));
    CHECK(fg::mean(x).item() == doctest::Approx(s / double(n)).epsilon(tol_of<E>() * 10));
    CHECK(fg::max(x).item() == *std::max_element(v.begin(), v.end()));
  }
}

template <class E>
void matmul_values() {
  using te = fg::tensor<E>;
  const double tol = tol_of<E>() * 10;
  const std::vector<std::pair<fg::shape, fg::shape>> pairs = {
      {{5, 7}, {7, 6}},    {{37}, {37}},     {{5, 7}, {7}},    {{5}, {5, 7}},    {{2, 1, 3, 4}, {5, 4, 2}},
      {{5, 7}, {3, 7, 2}}, {{2, 5, 7}, {7}}, {{7}, {2, 7, 3}}, {{2, 0}, {0, 3}}, {{0, 3}, {3, 2}}};
  for (const auto& [sa, sb] : pairs) {
    const std::string shapes = str(sa) + " with " + str(sb);
    CAPTURE(shapes);
    const te a = input<E>(sa, dom::any, 14), b = input<E>(sb, dom::any, 15);
    fg::shape out;
    const auto want = matmul_ref(dbl(a.to_vector()), sa, dbl(b.to_vector()), sb, out);
    const te y = fg::matmul(a, b);
    CHECK(str(y.shape()) == str(out));
    CHECK_OK(first_diff(y.to_vector(), want, tol));
    if (sa.size() == 2 && sb.size() == 2) CHECK_OK(first_diff(fg::mm(a, b).to_vector(), want, tol));
  }
  // mm with transposed (non-contiguous) operands, bmm, linear with and without bias.
  const te at = input<E>({7, 5}, dom::any, 16), bt = input<E>({6, 7}, dom::any, 17);
  CHECK_OK(first_diff(fg::mm(at.t(), bt.t()).to_vector(),
                      mm_ref(dbl(at.t().contiguous().to_vector()), dbl(bt.t().contiguous().to_vector()), 5, 7, 6),
                      tol));
  const te ba = input<E>({3, 4, 5}, dom::any, 18), bb = input<E>({3, 5, 2}, dom::any, 19);
  fg::shape out;
  CHECK_OK(first_diff(fg::bmm(ba, bb).to_vector(),
                      matmul_ref(dbl(ba.to_vector()), {3, 4, 5}, dbl(bb.to_vector()), {3, 5, 2}, out), tol));
  const te x = input<E>({2, 4, 7}, dom::any, 20), w = input<E>({6, 7}, dom::any, 21),
           bias = input<E>({6}, dom::any, 22);
  std::vector<double> wt(42);  // wᵀ by hand
  for (std::size_t o = 0; o < 6; ++o)
    for (std::size_t i = 0; i < 7; ++i) wt[i * 6 + o] = w.to_vector()[o * 7 + i];
  std::vector<double> want = matmul_ref(dbl(x.to_vector()), {2, 4, 7}, wt, {7, 6}, out);
  CHECK_OK(first_diff(fg::linear(x, w).to_vector(), want, tol));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += bias.to_vector()[i % 6];
  CHECK(str(fg::linear(x, w, bias).shape()) == "[2, 4, 6]");
  CHECK_OK(first_diff(fg::linear(x, w, bias).to_vector(), want, tol));
}

}  // namespace

// =========================================================================================
// gradchecks (double)
// =========================================================================================

TEST_CASE("gradcheck: unary ops and tensor-scalar arithmetic") {
  SUBCASE("scalar (0-d)") { run1({}, unary_cases); }
  SUBCASE("1-element") { run1({1}, unary_cases); }
  SUBCASE("vector") { run1({5}, unary_cases); }
  SUBCASE("matrix") { run1({3, 4}, unary_cases); }
  SUBCASE("3-d") { run1({2, 3, 2}, unary_cases); }
  SUBCASE("empty") {
    run1({0}, unary_cases);
    run1({2, 0}, unary_cases);
  }
}

TEST_CASE("gradcheck: binary tensor-tensor ops") {
  SUBCASE("scalar (0-d)") { run2({}, {}, binary_cases); }
  SUBCASE("1-element") { run2({1}, {1}, binary_cases); }
  SUBCASE("vector") { run2({5}, {5}, binary_cases); }
  SUBCASE("matrix") { run2({3, 4}, {3, 4}, binary_cases); }
  SUBCASE("broadcast") {
    for (const auto& [sa, sb] : std::vector<std::pair<fg::shape, fg::shape>>{{{3, 1}, {1, 4}},
                                                                             {{4}, {2, 3, 4}},
                                                                             {{2, 3, 4}, {4}},
                                                                             {{}, {3}},
                                                                             {{3}, {}},
                                                                             {{1}, {3, 4}},
                                                                             {{2, 1, 4}, {3, 1}}})
      run2(sa, sb, binary_cases);
  }
  SUBCASE("non-contiguous operands") {
    run2({4, 3}, {3, 4}, {C2(any, any, a.t() * b), C2(any, away, a.t() / b.t().t())});
    run2({6}, {3}, {C2(any, away, a.slice(0, 0, 6, 2) / b), C2(any, any, fg::maximum(a.slice(0, 1, 6, 2), b))});
  }
  SUBCASE("empty") {
    for (const auto& [sa, sb] : std::vector<std::pair<fg::shape, fg::shape>>{
             {{0}, {0}}, {{0}, {}}, {{}, {0}}, {{2, 0}, {2, 1}}, {{2, 0}, {0}}, {{1, 0}, {3, 1}}})
      run2(sa, sb, binary_cases);
  }
}

TEST_CASE("gradcheck: reductions sum / mean / max") {
  SUBCASE("scalar (0-d)") {
    run1({}, {A1(fg::sum(x)), A1(fg::sum(x, 0)), A1(fg::sum(x, -1, true)), A1(fg::mean(x)), A1(fg::mean(x, {0}, true)),
              A1(fg::max(x)), A1(fg::max(x, -1, true))});
  }
  SUBCASE("1-element and vector") {
    for (const fg::shape& s : {fg::shape{1}, fg::shape{5}})
      run1(s, {A1(fg::sum(x)), A1(fg::sum(x, {0}, true)), A1(fg::mean(x)), A1(fg::mean(x, -1)), A1(fg::max(x)),
               A1(fg::max(x, 0)), A1(fg::max(x, -1, true))});
  }
  SUBCASE("matrix") {
    run1({3, 4},
         {A1(fg::sum(x)), A1(fg::sum(x, {0}, true)), A1(fg::sum(x, 1)), A1(fg::sum(x, {0, 1})), A1(fg::mean(x)),
          A1(fg::mean(x, {0, 1})), A1(fg::mean(x, 0)), A1(fg::mean(x, -1, true)), A1(fg::max(x)), A1(fg::max(x, 0)),
          A1(fg::max(x, -1, true)), A1(fg::max(x, {1, 0}, true)), A1(fg::sum(x.t(), 1)), A1(fg::max(x.t(), 0))});
  }
  SUBCASE("3-d") {
    run1({2, 3, 4},
         {A1(fg::sum(x, {0, 2})), A1(fg::mean(x, {2, 0}, true)), A1(fg::max(x, {0, 2})), A1(fg::max(x, 1, true))});
  }
  SUBCASE("empty") {
    for (const fg::shape& s : {fg::shape{0}, fg::shape{2, 0}, fg::shape{0, 3}})
      run1(s, {A1(fg::sum(x)), A1(fg::sum(x, 0)), A1(fg::sum(x, -1, true)), A1(fg::mean(x)),  // mean: NaN
               A1(fg::mean(x, {0}, true))});
    // max: fine over non-empty slices of an empty tensor ([2, 0] over dim 0 -> [0]); an
    // empty reduction throws.
    run1({2, 0}, {A1(fg::max(x, 0)), A1(fg::max(x, {0}, true))});
    CHECK(str(fg::max(input({2, 0}), 0).shape()) == "[0]");
    CHECK_THROWS_AS((void)fg::max(input({0})), fg::error);
    CHECK_THROWS_AS((void)fg::max(input({2, 0}), 1), fg::error);
  }
}

TEST_CASE("gradcheck: matmul mm bmm linear") {
  const std::vector<case2> mat = {C2(any, any, fg::matmul(a, b))};
  SUBCASE("1-D . 1-D") {
    run2({4}, {4}, mat);
    run2({1}, {1}, mat);
  }
  SUBCASE("2-D . 1-D and 1-D . 2-D") {
    run2({3, 4}, {4}, mat);
    run2({4}, {4, 3}, mat);
    run2({1, 1}, {1}, mat);
  }
  SUBCASE("2-D . 2-D") {
    run2({3, 4}, {4, 2}, mat);
    run2({1, 1}, {1, 1}, mat);
  }
  SUBCASE("batched, broadcast batch dims") {
    run2({2, 3, 4}, {2, 4, 5}, mat);
    run2({2, 1, 3, 4}, {5, 4, 2}, mat);
    run2({3, 4}, {2, 4, 5}, mat);
    run2({2, 3, 4}, {4}, mat);
    run2({4}, {2, 4, 3}, mat);
  }
  SUBCASE("empty") {
    run2({0}, {0}, mat);           // 0-d zero
    run2({2, 0}, {0, 3}, mat);     // [2, 3] zeros
    run2({0, 3}, {3, 2}, mat);     // [0, 2]
    run2({0, 2, 3}, {3, 4}, mat);  // empty batch
  }
  SUBCASE("mm and bmm") {
    run2({3, 4}, {4, 2}, {C2(any, any, fg::mm(a, b))});
    run2({1, 1}, {1, 1}, {C2(any, any, fg::mm(a, b))});
    run2({2, 0}, {0, 3}, {C2(any, any, fg::mm(a, b))});
    run2({4, 3}, {4, 2}, {C2(any, any, fg::mm(a.t(), b))});
    run2({3, 2}, {3, 3}, {C2(any, any, fg::mm(a, a.t()) * b)});
    run2({2, 3, 4}, {2, 4, 5}, {C2(any, any, fg::bmm(a, b))});
    run2({0, 3, 4}, {0, 4, 5}, {C2(any, any, fg::bmm(a, b))});
  }
  SUBCASE("linear") {
    const fn3 lin = [](const td& x, const td& w, const td& b) { return fg::linear(x, w, b); };
    for (const fg::shape& s : {fg::shape{5}, fg::shape{4, 5}, fg::shape{2, 4, 5}, fg::shape{0, 5}}) {
      const std::string shape = str(s);
      CAPTURE(shape);
      GRADCHECK(lin, input(s), input({3, 5}, dom::any, 2), input({3}, dom::any, 3));
    }
    run2({4, 5}, {3, 5}, {C2(any, any, fg::linear(a, b))});
    run2({1}, {1, 1}, {C2(any, any, fg::linear(a, b))});
  }
}

TEST_CASE("gradcheck: views and copies") {
  SUBCASE("reshape / view") {
    run_shaped({V(x.reshape({2, 6}), 3, 4), V(x.reshape({-1, 2}), 3, 4), V(x.t().reshape({12}), 3, 4),
                V(x.reshape({1})), V(x.reshape({}), 1), V(x.reshape({0, 3}), 0), V(x.view({12}), 3, 4),
                V(x.view({1, 1}))});
  }
  SUBCASE("expand") {
    run_shaped({V(x.expand({3, 4}), 3, 1), V(x.expand({-1, 4}), 3, 1), V(x.expand({2, 3})), V(x.expand({5}), 1),
                V(x.expand({2, 3, 4}), 4), V(x.expand({2, 0}), 0), V(x.expand({3, 0}), 1, 0)});
  }
  SUBCASE("permute / transpose") {
    run_shaped({V(x.permute({2, 0, 1}), 2, 3, 4), V(x.permute({1, 0}), 3, 4), V(x.permute({})), V(x.permute({0}), 1),
                V(x.permute({1, 0}), 2, 0), V(x.transpose(0, 1), 3, 4), V(x.transpose(0, -1), 2, 3, 4),
                V(x.transpose(0, 0)), V(x.t(), 1, 5), V(x.t(), 0, 3)});
  }
  SUBCASE("select / slice (with step)") {
    run_shaped({V(x.select(0, 1), 3, 4), V(x.select(1, -1), 3, 4), V(x.select(0, 2), 5), V(x.select(0, 0), 1),
                V(x.select(0, 1), 2, 0), V(x.slice(0, 1, 9, 3), 10), V(x.slice(1, 0, 4, 2), 3, 4),
                V(x.slice(0, -2, 3), 3, 4), V(x.slice(0, 0, 1), 1), V(x.slice(0, 2, 2), 5), V(x.slice(1, 0, 0), 2, 0),
                V(x.slice(0, 0, 4, 2).slice(1, 1, 3).select(0, 1), 4, 3)});
  }
  SUBCASE("unsqueeze / squeeze") {
    run_shaped({V(x.unsqueeze(0)), V(x.unsqueeze(-1), 5), V(x.unsqueeze(1), 3, 4), V(x.unsqueeze(0), 2, 0),
                V(x.squeeze(0), 1), V(x.squeeze(1), 3, 1, 4), V(x.squeeze(0), 5), V(x.squeeze(0))});
  }
  SUBCASE("cat") {
    run2({2, 3}, {4, 3}, {C2(any, any, fg::cat(std::vector<td>{a, b}, 0))});
    run2({1}, {5}, {C2(any, any, fg::cat(std::vector<td>{a, b}))});
    run2({0}, {0}, {C2(any, any, fg::cat(std::vector<td>{a, b}))});
    run2({2, 2}, {2, 0}, {C2(any, any, fg::cat(std::vector<td>{a, b, a * 2.0}, -1))});
  }
  SUBCASE("contiguous / clone") {
    run_shaped({V(x.t().contiguous(), 3, 4), V(x.slice(0, 0, 5, 2).contiguous(), 5), V(x.contiguous()),
                V(x.clone(), 3, 4), V(fg::clone(x.t()), 2, 3), V(x.clone()), V(x.clone(), 0)});
  }
}

// =========================================================================================
// forward values against independent references (float and double)
// =========================================================================================

TEST_CASE("values: unary ops vs std math (SIMD body + scalar tail + strided)") {
  SUBCASE("float") { unary_values<float>(); }
  SUBCASE("double") { unary_values<double>(); }
}
TEST_CASE("values: binary ops and comparisons vs hand-written broadcasting") {
  SUBCASE("float") { binary_values<float>(); }
  SUBCASE("double") { binary_values<double>(); }
}
TEST_CASE("values: sum / mean / max vs hand loops + std::accumulate + std::max_element") {
  SUBCASE("float") { reduction_values<float>(); }
  SUBCASE("double") { reduction_values<double>(); }
}
TEST_CASE("values: matmul / mm / bmm / linear vs naive triple loop") {
  SUBCASE("float") { matmul_values<float>(); }
  SUBCASE("double") { matmul_values<double>(); }
}

/// Transposed operands read in place and transposing copies: the same values, bit for bit,
/// as the element-by-element definitions (float and double, blocks of 8 and 4 with tails).
template <class T>
void transposed_operands() {
  using tt = fg::tensor<T>;
  for (const auto& [R, C] : {std::pair<fg::index_t, fg::index_t>{4, 4}, {9, 13}, {16, 8}, {37, 5}, {64, 64}}) {
    CAPTURE(R);
    CAPTURE(C);
    const tt x = fg::randn<T>({C, R}, 3);
    const auto xv = x.to_vector();
    const auto y = x.t().contiguous().to_vector();  // y[i][j] = x[j][i]
    bool same = true;
    for (fg::index_t i = 0; i < R; ++i)
      for (fg::index_t j = 0; j < C; ++j)
        same = same && y[static_cast<std::size_t>(i * C + j)] == xv[static_cast<std::size_t>(j * R + i)];
    CHECK(same);
    const tt xb = fg::randn<T>({2, C, R}, 4);  // batched: transpose(1, 2)
    const auto xbv = xb.to_vector();
    const auto yb = xb.transpose(1, 2).contiguous().to_vector();
    same = true;
    for (fg::index_t b = 0; b < 2; ++b)
      for (fg::index_t i = 0; i < R; ++i)
        for (fg::index_t j = 0; j < C; ++j)
          same = same && yb[static_cast<std::size_t>((b * R + i) * C + j)] ==
                             xbv[static_cast<std::size_t>((b * C + j) * R + i)];
    CHECK(same);
    // A transposed left operand is read in place: the bits of the product of its copy.
    const tt m = fg::randn<T>({C, 7}, 5);
    const tt a = fg::randn<T>({C, R}, 6);
    CHECK(fg::mm(a.t(), m.t().t()).to_vector() == fg::mm(a.t().contiguous(), m).to_vector());
    const tt ab = fg::randn<T>({2, C, R}, 7), mb = fg::randn<T>({2, C, 3}, 8);
    CHECK(fg::bmm(ab.transpose(1, 2), mb).to_vector() == fg::bmm(ab.transpose(1, 2).contiguous(), mb).to_vector());
    // linear's weight gradient, computed as (gyᵀ x)ᵀ for the transposed view w.t(): the bits of
    // xᵀ gy through a contiguous copy.
    const tt w = fg::randn<T>({R, C}, 9).requires_grad(true), w2 = w.detach().requires_grad(true);
    const tt in = fg::randn<T>({5, C}, 10);
    fg::sum(fg::sin(fg::linear(in, w))).backward();
    fg::sum(fg::sin(fg::mm(in, w2.t().contiguous()))).backward();
    CHECK(w.grad().to_vector() == w2.grad().to_vector());
    CHECK(w.grad().is_contiguous());
    // A row vector times a transposed matrix (`linear` on one sample) is computed as w xᵀ with
    // w read in place, one batch or several: the bits of the product through wᵀ's copy.
    const tt v = fg::randn<T>({C}, 15);
    CHECK(fg::matmul(v, w.detach().t()).to_vector() == fg::matmul(v, w.detach().t().contiguous()).to_vector());
    const tt vb = fg::randn<T>({3, 1, C}, 16), wb = fg::randn<T>({3, R, C}, 17);
    CHECK(fg::bmm(vb, wb.transpose(1, 2)).to_vector() == fg::bmm(vb, wb.transpose(1, 2).contiguous()).to_vector());
    // Left operands of any strides are read in place: an expanded one (the gradient of a sum),
    // a column slice; the bits of their copies.
    const tt g = fg::full<T>({1}, T(0.75)).expand({R, 1}), r = fg::randn<T>({1, C}, 18);
    CHECK(fg::mm(g, r).to_vector() == fg::mm(g.contiguous(), r).to_vector());
    const tt wide = fg::randn<T>({R, 2 * C}, 19), mc = fg::randn<T>({C, 6}, 20);
    const tt cols = fg::slice(wide, 1, 0, 2 * C, 2);  // every other column: strides {2C, 2}
    CHECK_FALSE(cols.is_contiguous());
    CHECK(fg::mm(cols, mc).to_vector() == fg::mm(cols.contiguous(), mc).to_vector());
  }
}

TEST_CASE("transposed operands: copies and products read in place keep the bits") {
  SUBCASE("float") { transposed_operands<float>(); }
  SUBCASE("double") { transposed_operands<double>(); }
  // gradcheck of the paths in double: the transposed-view backward of mm and bmm.
  const td w = fg::randn<double>({4, 6}, 11).requires_grad(true), x = fg::randn<double>({3, 6}, 12).requires_grad(true);
  CHECK(fg::gradcheck(
      {}, [](const td& a, const td& b) { return fg::linear(a, b); }, x, w));
  const td xb = fg::randn<double>({2, 5, 4}, 13).requires_grad(true),
           yb = fg::randn<double>({2, 5, 3}, 14).requires_grad(true);
  CHECK(fg::gradcheck(
      {}, [](const td& a, const td& b) { return fg::bmm(b.transpose(1, 2), a); }, xb, yb));
  CHECK(fg::gradcheck(
      {}, [](const td& a, const td& b) { return fg::bmm(a.transpose(1, 2), b); }, yb, xb));
}

/// `linear` is one node (LinearBackward0) with the values and gradients of its composition
/// `matmul(x, w.t()) + b` (x flattened to its rows), bit for bit: vector, matrix and batched inputs, strided inputs, a
/// transposed weight, with and without a bias, each input with or without grad.
template <class T>
void linear_as_composition() {
  using tt = fg::tensor<T>;
  const fg::index_t in = 13, out = 9;
  const tt big = fg::randn<T>({4, 2 * in}, 21);
  const std::vector<tt> inputs{fg::randn<T>({in}, 22),        fg::randn<T>({5, in}, 23),
                               fg::randn<T>({2, 3, in}, 24),  fg::slice(big, 1, 0, 2 * in, 2),
                               fg::randn<T>({in, 6}, 25).t(), fg::randn<T>({3, in, 2}, 26).transpose(1, 2),
                               fg::randn<T>({0, in}, 27)};
  const std::vector<tt> weights{fg::randn<T>({out, in}, 28), fg::randn<T>({in, out}, 29).t()};
  for (std::size_t xi = 0; xi < inputs.size(); ++xi)
    for (std::size_t wi = 0; wi < weights.size(); ++wi)
      for (int mode = 0; mode < 4; ++mode) {  // bit 0: a bias; bit 1: x requires grad
        CAPTURE(xi);
        CAPTURE(wi);
        CAPTURE(mode);
        const bool bias = mode & 1, xg = mode & 2;
        const tt x1 = xg ? inputs[xi].detach().requires_grad(true) : inputs[xi];
        const tt x2 = xg ? inputs[xi].detach().requires_grad(true) : inputs[xi];
        const tt w1 = weights[wi].detach().requires_grad(true), w2 = weights[wi].detach().requires_grad(true);
        const tt b0 = fg::randn<T>({out}, 30);
        const tt b1 = bias ? b0.detach().requires_grad(true) : tt{}, b2 = bias ? b0.detach().requires_grad(true) : tt{};
        const tt y1 = fg::linear(x1, w1, b1);
        // A batched x as its rows, [N, in] (as PyTorch's linear flattens it for addmm): the
        // weight's gradient summed over all rows in order, not batch by batch.
        const tt x2f = x2.dim() > 2 ? x2.reshape({-1, in}) : x2;
        const tt m2 = fg::matmul(x2f, w2.t());
        fg::shape ys(x2.shape().begin(), x2.shape().end() - 1);
        ys.push_back(out);
        const tt y2 = (bias ? tt(m2 + b2) : m2).reshape(ys);
        CHECK(y1.grad_fn_name() == "LinearBackward0");
        REQUIRE(y1.shape() == y2.shape());
        CHECK(y1.to_vector() == y2.to_vector());
        const tt u = fg::randn<T>(y1.shape(), 31);  // a weighted sum: every output counts
        fg::sum(fg::sin(y1) * u).backward();
        fg::sum(fg::sin(y2) * u).backward();
        CHECK(w1.grad().to_vector() == w2.grad().to_vector());
        if (xg) CHECK(x1.grad().to_vector() == x2.grad().to_vector());
        if (bias) CHECK(b1.grad().to_vector() == b2.grad().to_vector());
        // A plain sum: the gradient reaching the node is expanded (stride 0), read in place.
        for (tt t : {x1, x2, w1, w2, b1, b2})  // handles to the same tensors
          if (t.defined() && t.requires_grad()) t.zero_grad();
        fg::sum(fg::linear(x1, w1, b1)).backward();
        fg::sum(bias ? tt(fg::matmul(x2f, w2.t()) + b2) : fg::matmul(x2f, w2.t())).backward();
        CHECK(w1.grad().to_vector() == w2.grad().to_vector());
        if (xg) CHECK(x1.grad().to_vector() == x2.grad().to_vector());
        if (bias) CHECK(b1.grad().to_vector() == b2.grad().to_vector());
      }
}

TEST_CASE("linear: one node, the values and gradients of matmul(x, w.t()) + b") {
  SUBCASE("float") { linear_as_composition<float>(); }
  SUBCASE("double") { linear_as_composition<double>(); }
  // Derivatives in double: first (gradcheck) and second (gradgradcheck, create_graph).
  const td x = fg::randn<double>({3, 5}, 32).requires_grad(true), w = fg::randn<double>({4, 5}, 33).requires_grad(true),
           b = fg::randn<double>({4}, 34).requires_grad(true), v = fg::randn<double>({5}, 35).requires_grad(true);
  const auto lin = [](const td& a, const td& c, const td& d) { return fg::linear(a, c, d); };
  CHECK(fg::gradcheck({}, lin, x, w, b));
  CHECK(fg::gradcheck({}, lin, v, w, b));
  // The gradient of sum(sin(linear)) (create_graph) projected on fixed directions, checked in turn.
  const auto projected = [](const td& a, const td& c, const td& d) {
    fg::enable_grad on;  // gradcheck's finite differences run under no_grad
    const td y = fg::sum(fg::sin(fg::linear(a, c, d)));
    const auto g = fg::autograd::grad({y}, {a, c, d}, {.create_graph = true});
    return fg::sum(g[0] * 0.7) + fg::sum(fg::sin(g[1])) + fg::sum(g[2] * g[2]);
  };
  constexpr fg::gradcheck_options second{.eps = 1e-6, .atol = 1e-5, .rtol = 1e-4};
  CHECK(fg::gradcheck(second, projected, x, w, b));
  CHECK(fg::gradcheck(second, projected, v, w, b));
}

TEST_CASE("comparisons / step / sign: exact values and no gradient") {
  td a = fg::from_vector<double>({-1, 0, 2, 2, 3, -0.5}), b = fg::from_vector<double>({0, 0, 1, 2, 4, -0.5});
  a.requires_grad(true);
  CHECK(fg::gt(a, b).to_vector() == std::vector<double>{0, 0, 1, 0, 0, 0});
  CHECK(fg::ge(a, b).to_vector() == std::vector<double>{0, 1, 1, 1, 0, 1});
  CHECK(fg::lt(a, b).to_vector() == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(fg::le(a, b).to_vector() == std::vector<double>{1, 1, 0, 1, 1, 1});
  CHECK(fg::eq(a, b).to_vector() == std::vector<double>{0, 1, 0, 1, 0, 1});
  CHECK(fg::ne(a, b).to_vector() == std::vector<double>{1, 0, 1, 0, 1, 0});
  CHECK(fg::step(a).to_vector() == std::vector<double>{0, 0, 1, 1, 1, 0});
  CHECK(fg::sign(a).to_vector() == std::vector<double>{-1, 0, 1, 1, 1, -1});
  const td s = fg::scalar_tensor(2.0);
  CHECK(fg::gt(a, s).to_vector() == std::vector<double>{0, 0, 0, 0, 1, 0});  // broadcast 0-d
  CHECK(fg::eq(s, a).to_vector() == std::vector<double>{0, 0, 1, 1, 0, 0});
  for (const td& r : {fg::gt(a, b), fg::ne(a, b), fg::step(a), fg::sign(a)}) {
    CHECK_FALSE(r.requires_grad());
    CHECK(r.grad_fn_name().empty());
  }
  const fg::tensor<float> f = fg::from_vector<float>({-2.f, 0.f, 1.5f});
  CHECK(fg::sign(f).to_vector() == std::vector<float>{-1, 0, 1});
  CHECK(fg::le(f, f).to_vector() == std::vector<float>{1, 1, 1});
  CHECK(std::isnan(fg::sign(fg::from_vector<double>({NAN})).item()));
}

TEST_CASE("detach(x): x's value and no gradient, in eager mode, fg::compile and fg::jit") {
  const td x0 = fg::from_vector<double>({-1.5, 0.25, 3.0, -0.0});
  const auto f = [](auto x) { return fg::sum(x * fg::detach(x)); };  // gradient: detach(x) = x
  const td a = x0.detach().clone().requires_grad(true), b = x0.detach().clone().requires_grad(true),
           c = x0.detach().clone().requires_grad(true);
  const td d = fg::detach(a);
  CHECK(d.to_vector() == x0.to_vector());
  CHECK_FALSE(d.requires_grad());
  f(a).backward();
  fg::compile(f)(b).backward();
  fg::jit([&](const td& x) { return f(x); })(c).backward();
  CHECK(a.grad().to_vector() == x0.to_vector());
  CHECK(b.grad().to_vector() == x0.to_vector());
  CHECK(c.grad().to_vector() == x0.to_vector());
  // The softmax family shifts by a detached max: a row's gradient is y (g - Σ g y) alone, with
  // nothing added at the max's position (the shift's gradient is zero, not rounding noise).
  const td r = fg::from_vector<double>({1.0, 2.0, 2.0, 0.5}).requires_grad(true);
  const td g = fg::from_vector<double>({0.3, -1.0, 2.0, 0.7});
  fg::sum(fg::softmax(r, -1) * g).backward();
  const std::vector<double> y = fg::softmax(fg::from_vector<double>({1.0, 2.0, 2.0, 0.5}), -1).to_vector();
  double gy = 0;
  for (std::size_t i = 0; i < 4; ++i) gy += g.to_vector()[i] * y[i];
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(r.grad().to_vector()[i] == doctest::Approx(y[i] * (g.to_vector()[i] - gy)).epsilon(1e-15));
}

TEST_CASE("gradient values: ties split evenly + only inputs requiring grad get one") {
  td a = fg::from_vector<double>({1, 2, 3}), b = fg::from_vector<double>({1, 5, 0});
  a.requires_grad(true);
  b.requires_grad(true);
  fg::sum(fg::maximum(a, b)).backward();
  CHECK(a.grad().to_vector() == std::vector<double>{0.5, 0, 1});
  CHECK(b.grad().to_vector() == std::vector<double>{0.5, 1, 0});
  td x = fg::from_vector<double>({1, 3, 3, 2}, {2, 2});
  x.requires_grad(true);
  fg::max(x).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 0.5, 0.5, 0});
  x.zero_grad();
  fg::sum(fg::max(x, 1)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 1, 1, 0});
  td c = input({3}), d = input({3}, dom::any, 2);
  c.requires_grad(true);
  fg::sum(c * d).backward();
  CHECK(c.grad().to_vector() == d.to_vector());
  CHECK_FALSE(d.grad().defined());
}

TEST_CASE("grad_fn names") {
  td a = input({3, 4}), b = input({3, 4}, dom::pos, 2);
  const td v = input({4}, dom::any, 3);
  a.requires_grad(true);
  b.requires_grad(true);
  const std::vector<std::pair<td, const char*>> cases = {
      {a + b, "AddBackward0"},
      {a + 1.0, "AddBackward1"},
      {1.0 + a, "AddBackward1"},
      {a - b, "SubBackward0"},
      {a - 1.0, "SubBackward1"},
      {1.0 - a, "RsubBackward1"},
      {a * b, "MulBackward0"},
      {a * 2.0, "MulBackward1"},
      {a * v, "MulBackward0"},
      {a / b, "DivBackward0"},
      {a / 2.0, "DivBackward1"},
      {2.0 / a, "RdivBackward1"},
      {-a, "NegBackward0"},
      {fg::exp(a), "ExpBackward0"},
      {fg::log(b), "LogBackward0"},
      {fg::sin(a), "SinBackward0"},
      {fg::cos(a), "CosBackward0"},
      {fg::tanh(a), "TanhBackward0"},
      {fg::sigmoid(a), "SigmoidBackward0"},
      {fg::relu(a), "ReluBackward0"},
      {fg::sqrt(b), "SqrtBackward0"},
      {fg::abs(a), "AbsBackward0"},
      {fg::pow(a, 2), "PowBackward0"},
      {fg::pow(b, a), "PowBackward1"},
      {fg::maximum(a, b), "MaximumBackward0"},
      {fg::sum(a), "SumBackward0"},
      {fg::sum(a, {0}), "SumBackward1"},
      {fg::sum(a, 1, true), "SumBackward1"},
      {fg::mean(a), "MeanBackward0"},
      {fg::mean(a, {0, 1}), "MeanBackward1"},
      {fg::max(a), "MaxBackward1"},
      {fg::max(a, -1, true), "MaxBackward0"},
      {fg::mm(a, b.t()), "MmBackward0"},
      {fg::matmul(a, b.t()), "MmBackward0"},
      {fg::bmm(a.unsqueeze(0), b.t().unsqueeze(0)), "BmmBackward0"},
      {fg::linear(a, b, v.slice(0, 0, 3)), "LinearBackward0"},
      {a.reshape({12}), "ViewBackward0"},
      {a.view({4, 3}), "ViewBackward0"},
      {a.select(0, 0).expand({2, 4}), "ExpandBackward0"},
      {a.permute({1, 0}), "PermuteBackward0"},
      {a.transpose(0, 1), "TransposeBackward0"},
      {a.select(1, 2), "SelectBackward0"},
      {a.slice(0, 0, 3, 2), "SliceBackward0"},
      {a.unsqueeze(0), "UnsqueezeBackward0"},
      {a.unsqueeze(0).squeeze(0), "SqueezeBackward1"},
      {fg::cat(std::vector<td>{a, b}), "CatBackward0"},
      {a.t().contiguous(), "CloneBackward0"},
      {a.clone(), "CloneBackward0"},
  };
  for (const auto& c : cases) {
    const std::string_view name = c.second;  // not a structured binding: CAPTURE uses it in a lambda (clang 14)
    CAPTURE(name);
    CHECK(c.first.grad_fn_name() == name);
  }
  {
    fg::no_grad guard;
    CHECK(fg::cos(a).grad_fn_name().empty());
    CHECK_FALSE((a * b).requires_grad());
  }
  CHECK((v * v).grad_fn_name().empty());  // no input requires grad
  CHECK(a.contiguous().is_same(a));       // already contiguous: no copy, no node
}

TEST_CASE("views share storage + to_vector of strided views") {
  std::vector<double> buf(12);
  std::iota(buf.begin(), buf.end(), 0.0);
  const td x = fg::view_of(buf.data(), {3, 4});
  CHECK(x.data_ptr() == buf.data());
  const td row = x.select(0, 1), col = x.select(1, -2), sl = x.slice(1, 1, 4, 2), tr = x.transpose(0, 1);
  CHECK(row.data_ptr() == buf.data() + 4);
  CHECK(row.to_vector() == std::vector<double>{4, 5, 6, 7});
  CHECK(col.data_ptr() == buf.data() + 2);
  CHECK(col.strides() == fg::strides{4});
  CHECK(col.to_vector() == std::vector<double>{2, 6, 10});
  CHECK(sl.data_ptr() == buf.data() + 1);
  CHECK(str(sl.shape()) == "[3, 2]");
  CHECK(sl.strides() == fg::strides{4, 2});
  CHECK(sl.to_vector() == std::vector<double>{1, 3, 5, 7, 9, 11});
  CHECK(x.slice(0, 0, 3, 2).to_vector() == std::vector<double>{0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(tr.data_ptr() == buf.data());
  CHECK_FALSE(tr.is_contiguous());
  CHECK(tr.to_vector() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(x.permute({1, 0}).to_vector() == tr.to_vector());
  const td ex = row.unsqueeze(0).expand({2, 4});
  CHECK(ex.strides() == fg::strides{0, 1});  // the expanded dim has stride 0
  CHECK(ex.data_ptr() == buf.data() + 4);
  CHECK(ex.to_vector() == std::vector<double>{4, 5, 6, 7, 4, 5, 6, 7});
  CHECK(x.reshape({2, 6}).data_ptr() == buf.data());  // contiguous: a view
  CHECK(x.view({12}).data_ptr() == buf.data());
  CHECK(x.unsqueeze(1).squeeze(1).data_ptr() == buf.data());
  CHECK(x.contiguous().data_ptr() == buf.data());
  CHECK(tr.reshape({12}).data_ptr() != buf.data());  // non-contiguous: a copy
  CHECK(x.clone().data_ptr() != buf.data());
  const td cl = x.clone(), ct = tr.contiguous();
  buf[5] = 100;  // writes to the user's memory show through every view, not the copies
  CHECK(row.at({1}) == 100);
  CHECK(tr.at({1, 1}) == 100);
  CHECK(sl.at({1, 0}) == 100);
  CHECK(ex.at({1, 1}) == 100);
  CHECK(cl.at({1, 1}) == 5);
  CHECK(ct.at({1, 1}) == 5);
  col.data_ptr()[4] = -1;  // col[1] is element 2 + 4 of the base
  CHECK(buf[6] == -1);
  CHECK(x.at({1, 2}) == -1);
  CHECK(fg::cat(std::vector<td>{row, col}, 0).to_vector() == std::vector<double>{4, 100, -1, 7, 2, -1, 10});
}

// =========================================================================================
// Regressions: bugs these tests found, fixed in the library.
// =========================================================================================

TEST_CASE("regression: pow at a zero base agrees between SIMD lanes and the scalar tail") {
  // pow's SIMD path used xsimd::pow, which returns 0 for a zero base whatever the
  // exponent; the scalar tail (std::pow) and PyTorch give pow(0, 0) = 1, pow(0, -1) = inf.
  // 17 doubles fill at least two SIMD batches at any width up to 8 (AVX2: [0 x 16, 1]).
  CHECK(fg::pow(fg::zeros<double>({17}), 0).to_vector() == std::vector<double>(17, 1.0));
  CHECK(fg::pow(fg::zeros<double>({17}), -1).to_vector() == std::vector<double>(17, INFINITY));
  // The same for a tensor exponent (pow_op::value reaches xsimd::pow through ADL).
  CHECK(fg::pow(fg::zeros<double>({17}), fg::zeros<double>({17})).to_vector() == std::vector<double>(17, 1.0));
  // And so d/dx pow(x, 1) = 1 * pow(x, 0) is 0 instead of 1 at x = 0 in the SIMD lanes.
  td x = fg::zeros<double>({17});
  x.requires_grad(true);
  fg::sum(fg::pow(x, 1)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>(17, 1.0));
}

TEST_CASE("regression: a tensor with a size-0 dim after a dim of size > 1 is contiguous") {
  // contiguous_strides({2, 0}) = {1, 1}, but is_contiguous() wants stride 0 for dim 0
  // (the running product after the size-0 dim), so a fresh [2, 0] tensor reported
  // non-contiguous (PyTorch: every empty tensor is contiguous). view() then throws, and so
  // does reshape(), whose contiguous copy has the same strides; batched matmul with an
  // empty inner dim fails the same way.
  const td e = fg::zeros<double>({2, 0});
  CHECK(e.is_contiguous());
  CHECK_NOTHROW((void)e.reshape({0}));
  CHECK_NOTHROW((void)e.view({0, 2}));
  CHECK_NOTHROW((void)fg::matmul(fg::zeros<double>({2, 3, 0}), fg::zeros<double>({2, 0, 4})));
}

TEST_CASE("regression: pow with a negative base and an integer exponent in SIMD lanes") {
  // xsimd's pow is exp(b log a): NaN for a negative base even with an integer exponent.
  const auto x = fg::full<double>({17}, -2.0);
  CHECK(fg::pow(x, 3).to_vector() == std::vector<double>(17, -8.0));
  for (double v : fg::pow(x, fg::full<double>({17}, 2.0)).to_vector()) CHECK(v == doctest::Approx(4.0).epsilon(1e-14));
  CHECK(std::isnan(fg::pow(x, 0.5).to_vector()[3]));
}

TEST_CASE("regression: d pow(a, b) / db is 0 at a == 0 (PyTorch), not 0 * log 0") {
  auto a = fg::zeros<double>({9}).requires_grad(true);
  auto b = fg::full<double>({9}, 2.0).requires_grad(true);
  fg::sum(fg::pow(a, b)).backward();
  CHECK(b.grad().to_vector() == std::vector<double>(9, 0.0));
}

TEST_CASE("regression: sum(x, {}) reduces over all dims, not dim 0") {
  const auto x = fg::ones<double>({3, 4});
  CHECK(fg::sum(x, {}).shape() == fg::shape{});
  CHECK(fg::mean(x, {}).shape() == fg::shape{});
  CHECK(fg::max(x, {}).shape() == fg::shape{});
}

TEST_CASE("tanh_backward and sigmoid_backward equal their three-op compositions bit for bit") {
  // Each is one op whose value rounds after each step as g * (1 - y * y) and g * (y * (1 - y))
  // round as three eager ops (GCC would otherwise contract a multiply and an add into one
  // fused multiply-add): the gradients of tanh and sigmoid keep their bits on every path. 37
  // elements: the SIMD body and the scalar tail, in float and double.
  auto check = [](auto zero) {
    using T = decltype(zero);
    const auto g = fg::randn<T>({37}, 11) * T(3);
    const auto y = fg::tanh(fg::randn<T>({37}, 12) * T(2));  // outputs of tanh and sigmoid's range
    const auto s = fg::sigmoid(fg::randn<T>({37}, 13) * T(3));
    const fg::tensor<T> t_op = fg::tanh_backward(g, y), t_ref = g * (T(1) - y * y);
    const fg::tensor<T> s_op = fg::sigmoid_backward(g, s), s_ref = g * (s * (T(1) - s));
    int t_bad = 0, s_bad = 0;
    for (fg::index_t i = 0; i < 37; ++i) {
      t_bad += t_op.data_ptr()[i] != t_ref.data_ptr()[i];
      s_bad += s_op.data_ptr()[i] != s_ref.data_ptr()[i];
    }
    CHECK(t_bad == 0);
    CHECK(s_bad == 0);
  };
  check(0.0f);
  check(0.0);
}

// PyTorch's spellings: comparison operators are the element-wise comparisons (on tensors, on
// fg::compile's symbolic values and under fg::jit), and cat/stack take braced lists.
TEST_CASE("x > 0.0, 0.5 < x and the other orderings are gt/ge/lt/le on every path") {
  const auto x = fg::from_vector<double>({-1.0, 0.5, 2.0, 0.0}, {2, 2});
  const auto y = fg::from_vector<double>({0.0, 0.5, 1.0, 0.0}, {2, 2});
  CHECK((x > 0.0).to_vector() == fg::gt(x, 0.0).to_vector());
  CHECK((x >= 0.5).to_vector() == fg::ge(x, 0.5).to_vector());
  CHECK((x < y).to_vector() == fg::lt(x, y).to_vector());
  CHECK((x <= y).to_vector() == fg::le(x, y).to_vector());
  CHECK((0.5 < x).to_vector() == std::vector<double>{0, 0, 1, 0});
  CHECK((0.5 <= x).to_vector() == std::vector<double>{0, 1, 1, 0});
  CHECK((1 > x).to_vector() == std::vector<double>{1, 1, 0, 1});
  CHECK((0 >= x).to_vector() == std::vector<double>{1, 0, 0, 1});
  // A mask written with operators, through fg::compile and fg::jit: eager's values and gradients.
  auto masked = [](auto a, auto b) { return fg::sum(fg::where(a > 0.0, a * b, b) * (b >= a)); };
  const auto f = fg::compile(masked);
  const auto j = fg::jit([&](const fg::tensor<double>& a, const fg::tensor<double>& b) { return masked(a, b); });
  auto run = [&](auto&& fn) {
    auto a = fg::from_vector<double>({-1.0, 0.5, 2.0, 0.25}, {2, 2}).requires_grad(true);
    auto b = fg::from_vector<double>({0.0, 0.5, 1.0, 3.0}, {2, 2}).requires_grad(true);
    const fg::tensor<double> v = fn(a, b);
    v.backward();
    return std::vector<std::vector<double>>{v.to_vector(), a.grad().to_vector(), b.grad().to_vector()};
  };
  const auto want = run(masked);
  CHECK(want[0] == std::vector<double>{0.0 + 0.25 + 0.0 + 0.75});
  CHECK(run(f) == want);
  CHECK(run(j) == want);
}

TEST_CASE("cat and stack take braced lists, as torch.cat([a, b], 1)") {
  const auto a = fg::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const auto b = fg::from_vector<float>({5, 6}, {2, 1});
  CHECK(fg::cat({a, b}, 1).to_vector() == fg::cat(std::vector{a, b}, 1).to_vector());
  CHECK(fg::cat({a, b}, 1).shape() == fg::shape{2, 3});
  CHECK(fg::stack({a, a}, 1).to_vector() == fg::stack(std::vector{a, a}, 1).to_vector());
  CHECK(fg::stack({a, a}).shape() == fg::shape{2, 2, 2});
}
