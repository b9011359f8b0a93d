// test_regress_numerics: PyTorch's special values on every path (NaN, infinities, singular
// matrices, empty dims), and max's gradient.
#include "helpers.hpp"

TEST_CASE("regression: max's gradient never divides 0 / 0, when no element equals the max") {
  // Values that no longer reach the saved max (as when the max and its input were rounded
  // differently): the gradient goes nowhere instead of being NaN everywhere.
  for (const bool captured : {false, true}) {
    CAPTURE(captured);
    tf x = fg::from_vector<float>({1.0f, 3.0f, 2.0f}, {3}).requires_grad(true);
    const tf y = fg::max(x);
    x.data_ptr()[1] = 2.5f;  // behind the tape's back: the saved input changes, not its version
    if (captured) {
      fg::compiled_autograd::enable on;
      (y * 2.0f).backward();
    } else {
      (y * 2.0f).backward();
    }
    for (const float g : x.grad().to_vector()) CHECK(g == 0.0f);
  }
}

TEST_CASE("regression: special values match PyTorch on every path") {
  using B = fg::backend::fused;
  SUBCASE("relu(NaN) is NaN, its gradient 0") {
    auto f = [](auto x) { return fg::relu(x); };
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      tf x = fg::from_vector<float>(std::vector<float>{f_nan, -1.0f, 2.0f, -0.0f}, {4}).requires_grad(true);
      const tf y = path == 0 ? f(x) : path == 1 ? fg::compile<B>(f)(x) : fg::jit(f)(x);
      fg::sum(y).backward();
      const auto v = y.to_vector(), g = x.grad().to_vector();
      CHECK(std::isnan(v[0]));
      CHECK(v[1] == 0.0f);
      CHECK(v[2] == 2.0f);
      CHECK(g == std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f});
    }
  }
  SUBCASE("d/dx x^0 = 0 everywhere, x = ±inf, 0 and NaN included") {
    auto f = [](auto x) { return fg::pow(x, 0.0); };
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      td x = fg::from_vector<double>({INFINITY, -INFINITY, 0.0, NAN, 2.0}, {5}).requires_grad(true);
      const td y = path == 0 ? f(x) : path == 1 ? fg::compile<B>(f)(x) : fg::jit(f)(x);
      fg::sum(y).backward();
      CHECK(y.to_vector() == std::vector<double>(5, 1.0));
      CHECK(x.grad().to_vector() == std::vector<double>(5, 0.0));
    }
  }
  SUBCASE("d/da a^b = 0 at a = b = 0; d/db there is 0 too") {
    auto f = [](auto a, auto b) { return fg::pow(a, b); };
    for (int path = 0; path < 3; ++path) {
      CAPTURE(path);
      td a = fg::from_vector<double>({0.0, 0.0, 2.0}, {3}).requires_grad(true);
      td b = fg::from_vector<double>({0.0, 2.0, 0.0}, {3}).requires_grad(true);
      const td y = path == 0 ? f(a, b) : path == 1 ? fg::compile<B>(f)(a, b) : fg::jit(f)(a, b);
      fg::sum(y).backward();
      CHECK(y.to_vector() == std::vector<double>{1.0, 0.0, 1.0});
      CHECK(a.grad().to_vector() == std::vector<double>{0.0, 0.0, 0.0});
      CHECK(b.grad().to_vector() == std::vector<double>{0.0, 0.0, std::log(2.0)});
    }
  }
  SUBCASE("a max with NaN elements is NaN and sends its gradient to them") {
    auto full_max = [](auto x) { return fg::max(x) * 1.0; };
    auto row_max = [](auto x) { return fg::max(x, -1) * 1.0; };
    for (int path = 0; path < 5; ++path) {
      CAPTURE(path);  // eager, compile (fused, aot_eager), jit, compiled autograd
      // Row 0: two NaNs share the gradient; row 1: no NaN, a tie; row 2: one NaN at the end.
      td x = fg::from_vector<double>({NAN, 1.0, NAN, 0.0, 3.0, 3.0, 1.0, 2.0, NAN}, {3, 3}).requires_grad(true);
      td xr = x.detach().clone().requires_grad(true);
      td m, r;
      if (path == 0 || path == 4) m = full_max(x), r = row_max(xr);
      if (path == 1) m = fg::compile<B>(full_max)(x), r = fg::compile<B>(row_max)(xr);
      if (path == 2) {
        m = fg::compile<fg::backend::aot_eager>(full_max)(x);
        r = fg::compile<fg::backend::aot_eager>(row_max)(xr);
      }
      if (path == 3) m = fg::jit(full_max)(x), r = fg::jit(row_max)(xr);
      {
        std::optional<fg::compiled_autograd::enable> on;
        if (path == 4) on.emplace();
        m.backward();
        fg::sum(r).backward();
      }
      CHECK(std::isnan(m.item()));
      CHECK(x.grad().to_vector() == std::vector<double>{1.0 / 3, 0, 1.0 / 3, 0, 0, 0, 0, 0, 1.0 / 3});
      const auto rv = r.to_vector();
      CHECK(std::isnan(rv[0]));
      CHECK(rv[1] == 3.0);
      CHECK(std::isnan(rv[2]));
      CHECK(xr.grad().to_vector() == std::vector<double>{0.5, 0, 0.5, 0, 0.5, 0.5, 0, 0, 1});
    }
  }
}

TEST_CASE("regression: the softmax family's infinities are PyTorch's on every path") {
  using B = fg::backend::fused;
  auto sm = [](auto x) { return fg::softmax(x, -1); };
  auto lsm = [](auto x) { return fg::log_softmax(x, -1); };
  auto lse = [](auto x) { return fg::logsumexp(x, -1); };
  // Row 0 holds +inf, row 1 is all -inf, row 2 holds -inf among finite values.
  const td x =
      fg::from_vector<double>({INFINITY, 1.0, 2.0, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0.0, 0.0}, {3, 3});
  for (int path = 0; path < 3; ++path) {
    CAPTURE(path);  // eager, fg::compile, fg::jit
    auto run = [&](auto f) { return path == 0 ? td(f(x)) : path == 1 ? td(fg::compile<B>(f)(x)) : td(fg::jit(f)(x)); };
    const auto s = run(sm).to_vector(), l = run(lsm).to_vector(), e = run(lse).to_vector();
    for (int k = 0; k < 6; ++k) {  // inf - inf in the first two rows: NaN throughout, as PyTorch
      CHECK(std::isnan(s[static_cast<std::size_t>(k)]));
      CHECK(std::isnan(l[static_cast<std::size_t>(k)]));
    }
    CHECK(s[6] == 0.0);
    CHECK(s[7] == 0.5);
    CHECK(l[6] == -INFINITY);
    CHECK(l[7] == -std::log(2.0));
    CHECK(e == std::vector<double>{INFINITY, -INFINITY, std::log(2.0)});  // the shift rule: no NaN
  }
}

TEST_CASE("regression: logsumexp over an empty dim is -inf, as PyTorch") {
  td x = fg::zeros<double>({3, 0}).requires_grad(true);
  const td y = fg::logsumexp(x, -1);
  CHECK(y.shape() == fg::shape{3});
  CHECK(y.to_vector() == std::vector<double>(3, -INFINITY));
  CHECK(fg::logsumexp(x, 1, true).shape() == fg::shape{3, 1});
  fg::sum(y).backward();
  CHECK(x.grad().shape() == fg::shape{3, 0});
  CHECK(fg::jit([](auto v) { return fg::logsumexp(v, -1); })(x.detach()).to_vector() ==
        std::vector<double>(3, -INFINITY));
  // A dim out of range is the usual error, not a crash in the empty check.
  CHECK_THROWS_WITH_AS((void)fg::logsumexp(x, 2), doctest::Contains("dim 2 is out of range"), fg::error);
}

TEST_CASE("regression: det's gradient at a singular matrix is the cofactor matrix, as PyTorch's") {
  // Rank 2 of 3 (exactly: a zero pivot): the cofactors are nonzero (a finite, PyTorch-equal
  // gradient, not a throw). cof(A)_ij = (-1)^(i+j) det(minor_ij), by hand: only the third
  // row's minors miss the zero row.
  td a = fg::from_vector<double>({1, 2, 3, 4, 5, 6, 0, 0, 0}, {3, 3}).requires_grad(true);
  const td d = fg::det(a);
  CHECK(d.item() == 0.0);
  d.backward();
  const std::vector<double> cof{0, 0, 0, 0, 0, 0, -3, 6, -3}, got = a.grad().to_vector();
  for (std::size_t k = 0; k < cof.size(); ++k)
    CHECK(got[k] == doctest::Approx(cof[k]).epsilon(1e-14));  // (LU of the minors rounds)
  // Rank 1: every 2 x 2 minor vanishes, so the gradient is 0.
  td b = fg::from_vector<double>({1, 2, 0, 2, 4, 0, 0, 0, 0}, {3, 3}).requires_grad(true);
  fg::det(b).backward();
  CHECK(b.grad().to_vector() == std::vector<double>(9, 0.0));
  // 1 x 1: d det / dA = 1 at A = 0.
  td c = fg::zeros<double>({1, 1}).requires_grad(true);
  fg::det(c).backward();
  CHECK(c.grad().to_vector() == std::vector<double>{1.0});
  // Invertible matrices keep det A · A⁻ᵀ, and its double backward.
  td e = fg::from_vector<double>({2, 1, 1, 3}, {2, 2}).requires_grad(true);
  fg::det(e).backward();
  CHECK(e.grad().to_vector() == std::vector<double>{3, -1, -1, 2});
  // A second derivative through the singular case would treat the cofactors as constants: an error.
  td f = fg::from_vector<double>({1, 2, 2, 4}, {2, 2}).requires_grad(true);
  CHECK_THROWS_WITH_AS((void)fg::autograd::grad<double>({fg::det(f)}, {f}, {}, {.create_graph = true}),
                       doctest::Contains("double backward at a matrix of determinant 0"), fg::error);
  // logdet at a singular matrix: -inf, and a NaN gradient (no A⁻ᵀ), not a throw.
  td g = fg::from_vector<double>({1, 2, 2, 4}, {2, 2}).requires_grad(true);
  const td l = fg::logdet(g);
  CHECK(l.item() == -INFINITY);
  l.backward();
  for (double v : g.grad().to_vector()) CHECK(std::isnan(v));
}

TEST_CASE("hvp on spans is forward over reverse on dense duals: the seed's zero tangent meets an infinity") {
  // H v of sum(exp(x)) is exp(x) v. At x = +inf the backward multiplies the seed's tangent (0)
  // by exp(inf): 0 · inf = NaN, where PyTorch's double backward (and JAX's symbolic zeros)
  // never forms that product and gives inf (docs/functional.md, "Special values").
  const std::vector<double> x{INFINITY, 1.0}, v{1.0, 1.0};
  const auto hv = fg::hvp([](const auto& t) { return fg::sum(fg::exp(t)); })(x, v);
  CHECK(std::isnan(hv[0]));
  CHECK(hv[1] == doctest::Approx(std::exp(1.0)));
  // A tangent of the wrong length names the transform.
  CHECK_THROWS_WITH_AS((void)fg::hvp([](const auto& t) { return fg::sum(fg::exp(t)); })(x, std::vector<double>{1.0}),
                       doctest::Contains("hvp: a tangent of 1 elements"), fg::error);
}
