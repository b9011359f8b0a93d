// test_ops: forward values in float and double against independent references (std:: math,
// hand-written broadcasting, reduction and matmul loops); transposed operands read in place;
// linear as its composition.
#include "helpers.hpp"

namespace {

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
