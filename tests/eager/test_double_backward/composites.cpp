// test_double_backward: second derivatives of composite functions against closed forms;
// reductions, broadcasting, views, matmul, indexing and scans differentiated again;
// backward(create_graph).
#include "helpers.hpp"

TEST_CASE("double backward: second derivatives against closed forms") {
  const std::vector<double> xs{0.3, 0.9, 1.7, 2.4};
  struct row {
    const char* name;
    std::function<td(const td&)> f;
    double (*d1)(double);
    double (*d2)(double);
  };
  const std::vector<row> rows = {
      {"sin", [](const td& x) { return fg::sin(x); }, [](double v) { return std::cos(v); },
       [](double v) { return -std::sin(v); }},
      {"cos", [](const td& x) { return fg::cos(x); }, [](double v) { return -std::sin(v); },
       [](double v) { return -std::cos(v); }},
      {"tan", [](const td& x) { return fg::tan(x); }, [](double v) { return 1 / (std::cos(v) * std::cos(v)); },
       [](double v) { return 2 * std::tan(v) / (std::cos(v) * std::cos(v)); }},
      {"exp", [](const td& x) { return fg::exp(x); }, [](double v) { return std::exp(v); },
       [](double v) { return std::exp(v); }},
      {"log", [](const td& x) { return fg::log(x); }, [](double v) { return 1 / v; },
       [](double v) { return -1 / (v * v); }},
      {"sqrt", [](const td& x) { return fg::sqrt(x); }, [](double v) { return 0.5 / std::sqrt(v); },
       [](double v) { return -0.25 / (v * std::sqrt(v)); }},
      {"tanh", [](const td& x) { return fg::tanh(x); }, [](double v) { return 1 - std::tanh(v) * std::tanh(v); },
       [](double v) { return -2 * std::tanh(v) * (1 - std::tanh(v) * std::tanh(v)); }},
      {"sigmoid", [](const td& x) { return fg::sigmoid(x); },
       [](double v) {
         const double s = 1 / (1 + std::exp(-v));
         return s * (1 - s);
       },
       [](double v) {
         const double s = 1 / (1 + std::exp(-v));
         return s * (1 - s) * (1 - 2 * s);
       }},
      {"pow 3", [](const td& x) { return fg::pow(x, 3.0); }, [](double v) { return 3 * v * v; },
       [](double v) { return 6 * v; }},
      {"reciprocal", [](const td& x) { return fg::reciprocal(x); }, [](double v) { return -1 / (v * v); },
       [](double v) { return 2 / (v * v * v); }},
      {"atan", [](const td& x) { return fg::atan(x); }, [](double v) { return 1 / (1 + v * v); },
       [](double v) { return -2 * v / ((1 + v * v) * (1 + v * v)); }},
      {"erf", [](const td& x) { return fg::erf(x); }, [](double v) { return 2 / std::sqrt(M_PI) * std::exp(-v * v); },
       [](double v) { return -4 * v / std::sqrt(M_PI) * std::exp(-v * v); }},
      {"softplus", [](const td& x) { return fg::softplus(x); }, [](double v) { return 1 / (1 + std::exp(-v)); },
       [](double v) {
         const double s = 1 / (1 + std::exp(-v));
         return s * (1 - s);
       }},
      {"log1p", [](const td& x) { return fg::log1p(x); }, [](double v) { return 1 / (1 + v); },
       [](double v) { return -1 / ((1 + v) * (1 + v)); }},
      {"x * x * x (products)", [](const td& x) { return x * x * x; }, [](double v) { return 3 * v * v; },
       [](double v) { return 6 * v; }},
      {"x / (1 + x)", [](const td& x) { return x / (x + 1.0); }, [](double v) { return 1 / ((1 + v) * (1 + v)); },
       [](double v) { return -2 / ((1 + v) * (1 + v) * (1 + v)); }},
  };
  for (const auto& r : rows) {
    CAPTURE(r.name);
    td x = vec(xs);
    const td g = fg::autograd::grad(fg::sum(r.f(x)), x, {.create_graph = true});
    REQUIRE(g.requires_grad());
    const td gg = fg::autograd::grad(fg::sum(g), x);
    for (int i = 0; i < 4; ++i) {
      CHECK(g.at({i}) == doctest::Approx(r.d1(xs[static_cast<std::size_t>(i)])).epsilon(1e-12));
      CHECK(gg.at({i}) == doctest::Approx(r.d2(xs[static_cast<std::size_t>(i)])).epsilon(1e-12));
    }
  }
  // A mixed partial: d²(x² y³)/dx dy = 6 x y².
  td x = vec({1.5}), y = vec({-0.5});
  const td gx = fg::autograd::grad(fg::sum(x * x * y * y * y), x, {.create_graph = true});
  const td gxy = fg::autograd::grad(fg::sum(gx), y);
  CHECK(gxy.item() == doctest::Approx(6 * 1.5 * 0.25).epsilon(1e-14));
}

TEST_CASE("double backward: reductions, broadcasting, views and matmul") {
  // f(A) = sum((A v)^2) for A [3, 2]: grad = 2 (A v) vᵀ; its directional derivative along W
  // is 2 (W v) vᵀ, so d/dA <grad, W> = 2 W v vᵀ... here checked by gradgradcheck.
  auto a = fg::from_vector<double>({0.1, -0.4, 0.7, 0.2, -0.3, 0.9}, {3, 2});
  auto v = fg::from_vector<double>({0.6, -1.1}, {2, 1});
  auto mm_f = [v](const td& m) { return fg::mm(m, v) * fg::mm(m, v); };
  CHECK(fg::gradcheck(second, projected_gradient(mm_f), a).ok);
  auto bmm_f = [](const td& m) { return fg::bmm(m, m.transpose(1, 2)); };
  CHECK(fg::gradcheck(second, projected_gradient(bmm_f),
                      fg::from_vector<double>({0.1, -0.4, 0.7, 0.2, -0.3, 0.9}, {1, 3, 2}))
            .ok);
  // Closed form: Hessian of sum((A v)^2) in the direction of A itself is 2 A v vᵀ.
  td am = a.detach().requires_grad(true);
  const td g = fg::autograd::grad(fg::sum(mm_f(am)), am, {.create_graph = true});
  const td hv = fg::autograd::grad(fg::sum(g * am.detach()), am);
  const td want = fg::mm(fg::mm(a, v), v.t()) * 2.0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) CHECK(hv.at({i, j}) == doctest::Approx(want.at({i, j})).epsilon(1e-13));

  auto views = [](const td& m) {
    const td e = m.reshape({2, 3}).transpose(0, 1).unsqueeze(0).expand({2, 3, 2}).permute({2, 1, 0});
    return fg::exp(e) * fg::sum(fg::sum(m, 0, true).reshape({1, 1, 2}), 1, true).squeeze(1).unsqueeze(1);
  };
  CHECK(fg::gradcheck(second, projected_gradient(views), a).ok);
  auto reductions = [](const td& m) { return fg::mean(fg::sin(m), {1}, true) * fg::max(m, {0}) + fg::sum(m * m); };
  CHECK(fg::gradcheck(second, projected_gradient(reductions), a).ok);
  auto concat = [](const td& m) {
    return fg::cat(std::vector<td>{m, fg::cos(m)}, 1) * fg::cat(std::vector<td>{fg::tanh(m), m}, 1);
  };
  CHECK(fg::gradcheck(second, projected_gradient(concat), a).ok);
  auto flipped = [](const td& m) { return fg::flip(m * m, {0}) * m; };
  CHECK(fg::gradcheck(second, projected_gradient(flipped), a).ok);
}

// slice, select and index_select: their backward puts the gradient into zeros, recorded with
// the read as its rule (SliceBackwardBackward0, ...): differentiable again, and again.
TEST_CASE("double backward: slice, select and index_select") {
  auto a = fg::from_vector<double>({0.1, -0.4, 0.7, 0.2, -0.3, 0.9, 1.1, -0.8, 0.5, 0.35, -1.2, 0.6}, {3, 4});
  auto sliced = [](const td& m) {
    return fg::sin(m.slice(1, 1, 4)) * m.slice(1, 0, 3) + fg::sum(fg::exp(m.slice(0, 0, 3, 2)));
  };
  CHECK(fg::gradcheck(second, projected_gradient(sliced), a).ok);
  auto selected = [](const td& m) {
    return fg::tanh(m.select(0, 1)) * m.select(1, -1).slice(0, 0, 1) + fg::sum(m.select(1, 2) * m.select(1, 2));
  };
  CHECK(fg::gradcheck(second, projected_gradient(selected), a).ok);
  auto indexed = [](const td& m) {
    const std::vector<fg::index_t> idx{2, 0, 2, 1};
    return fg::sin(fg::index_select(m, 1, idx)) * fg::index_select(m, 1, idx);
  };
  CHECK(fg::gradcheck(second, projected_gradient(indexed), a).ok);
  // Closed form: f(x) = sum(x[1:]^3), d2f/dx2 = diag(0, 6 x[1], 6 x[2]); three backward levels.
  td x = vec({0.5, 1.5, 2.5});
  const td g = fg::autograd::grad(fg::sum(fg::pow(x.slice(0, 1, 3), 3.0)), x, {.create_graph = true});
  const td h = fg::autograd::grad(fg::sum(g), x, {.create_graph = true});  // 6 x, 0 at x[0]
  CHECK(h.at({0}) == 0.0);
  CHECK(h.at({1}) == doctest::Approx(9.0));
  CHECK(h.at({2}) == doctest::Approx(15.0));
  const td t = fg::autograd::grad(fg::sum(h), x);  // third derivative: 6, 0 at x[0]
  CHECK(t.at({0}) == 0.0);
  CHECK(t.at({1}) == doctest::Approx(6.0));
  CHECK(t.at({2}) == doctest::Approx(6.0));
}

// Closed forms for the structured ops' second derivatives (the gradgradcheck above compares
// them with finite differences).
TEST_CASE("double backward: prod, cumsum, cumprod, gather and logdet against closed forms") {
  // prod: d²/dx_i dx_j Π x = Π_{k≠i,j} x_k (exact with a zero among the factors).
  {
    const std::vector<double> v{1.5, 0.0, -2.0, 0.5};
    td x = vec(v);
    const td g = fg::autograd::grad(fg::prod(x), x, {.create_graph = true});
    for (int j = 0; j < 4; ++j) {
      CAPTURE(j);
      const td row = fg::autograd::grad(g.select(0, j), x, {.retain_graph = true});
      for (int i = 0; i < 4; ++i) {
        double want = 0;
        if (i != j) {
          want = 1;
          for (int k = 0; k < 4; ++k)
            if (k != i && k != j) want *= v[static_cast<std::size_t>(k)];
        }
        CHECK(row.at({i}) == want);
      }
    }
  }
  // cumsum: sum(cumsum(x)²) = xᵀ Cᵀ C x, Hessian 2 CᵀC, (CᵀC)_ij = n - max(i, j).
  {
    td x = vec({0.3, -0.2, 1.1, 0.4});
    const td c = fg::cumsum(x, 0);
    const td g = fg::autograd::grad(fg::sum(c * c), x, {.create_graph = true});
    for (int j = 0; j < 4; ++j) {
      const td row = fg::autograd::grad(g.select(0, j), x, {.retain_graph = true});
      for (int i = 0; i < 4; ++i) CHECK(row.at({i}) == doctest::Approx(2.0 * (4 - std::max(i, j))));
    }
  }
  // cumprod: sum(cumprod(x)) = x0 + x0 x1 + x0 x1 x2; d²/dx0 dx1 = 1 + x2, d²/dx1 dx2 = x0,
  // d²/dx0 dx2 = x1, the diagonal 0; a zero factor (x1 = 0) keeps every term.
  {
    const std::vector<double> v{0.7, 0.0, -1.3};
    td x = vec(v);
    const td g = fg::autograd::grad(fg::sum(fg::cumprod(x, 0)), x, {.create_graph = true});
    const double want[3][3] = {{0, 1 + v[2], v[1]}, {1 + v[2], 0, v[0]}, {v[1], v[0], 0}};
    for (int j = 0; j < 3; ++j) {
      const td row = fg::autograd::grad(g.select(0, j), x, {.retain_graph = true});
      for (int i = 0; i < 3; ++i) CHECK(row.at({i}) == doctest::Approx(want[j][i]));
    }
  }
  // gather: sum(gather(x)²) has Hessian diag(2 · how often each element is gathered).
  {
    td x = vec({0.3, -0.2, 1.1, 0.4});
    const td idx = fg::from_vector<double>({3, 0, 3, 3, 1});
    const td gx = fg::gather(x, 0, idx);
    const td g = fg::autograd::grad(fg::sum(gx * gx), x, {.create_graph = true});
    const td hd = fg::autograd::grad(fg::sum(g), x);  // row sums of a diagonal Hessian
    const double want[4] = {2, 2, 0, 6};
    for (int i = 0; i < 4; ++i) CHECK(hd.at({i}) == doctest::Approx(want[i]));
  }
  // logdet: its second derivative in direction H is -tr(A⁻¹ H A⁻¹ H).
  {
    const td a0 = fg::from_vector<double>({3.0, 0.4, -0.2, 0.1, 2.5, 0.3, 0.6, -0.5, 4.0}, {3, 3});
    const td hdir = fg::from_vector<double>({0.2, -0.1, 0.5, 0.3, 0.7, -0.4, 0.1, 0.25, -0.6}, {3, 3});
    td a = a0.detach().requires_grad(true);
    const td g = fg::autograd::grad(fg::logdet(a), a, {.create_graph = true});
    const td d2 = fg::autograd::grad(fg::sum(g * hdir), a);
    const td ai = fg::inverse(a0);
    const double want = -fg::trace(fg::mm(fg::mm(fg::mm(ai, hdir), ai), hdir)).item();
    CHECK(fg::sum(d2 * hdir).item() == doctest::Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("double backward: the Hessian of Rosenbrock against its closed form") {
  const std::vector<double> p{-1.2, 1.0, 0.8, 1.3};
  // Written on scalars (slice's backward is not differentiable): one term per pair.
  auto rosen_terms = [](const std::vector<td>& x) {
    td s = x[0] * 0.0;
    for (std::size_t i = 0; i + 1 < x.size(); ++i)
      s = s + (x[i + 1] - x[i] * x[i]) * (x[i + 1] - x[i] * x[i]) * 100.0 + (1.0 - x[i]) * (1.0 - x[i]);
    return s;
  };
  std::vector<td> x;
  for (double v : p) x.push_back(fg::scalar_tensor<double>(v).requires_grad(true));
  const auto g = fg::autograd::grad({rosen_terms(x)}, x, {.create_graph = true});
  // Closed form of the Hessian of the 4-D Rosenbrock function.
  auto h = [&](std::size_t i, std::size_t j) {
    double r = 0;
    if (i == j) {
      if (i + 1 < 4) r += 1200 * p[i] * p[i] - 400 * p[i + 1] + 2;
      if (i > 0) r += 200;
    } else if (j == i + 1) {
      r = -400 * p[i];
    } else if (i == j + 1) {
      r = -400 * p[j];
    }
    return r;
  };
  for (std::size_t i = 0; i < 4; ++i) {
    const auto row = fg::autograd::grad({g[i]}, x, {.retain_graph = true, .allow_unused = true});
    for (std::size_t j = 0; j < 4; ++j) {
      const double got = row[j].defined() ? row[j].item() : 0.0;
      CHECK(got == doctest::Approx(h(i, j)).epsilon(1e-13));
    }
  }
}

TEST_CASE("double backward: backward(create_graph) leaves a .grad() with history (gradient penalty)") {
  // Critic D(x) = sum(tanh(w * x)); penalty (|dD/dx|² - 1)²; its gradient in w by hand:
  // dD/dx = w (1 - t²), t = tanh(w x); |.|² = sum(w² (1 - t²)²).
  td w = vec({0.7, -1.3, 0.4});
  td x = vec({0.2, 0.5, -0.9});
  const td d = fg::sum(fg::tanh(w * x));
  d.backward({}, {.create_graph = true});
  REQUIRE(x.grad().defined());
  REQUIRE(x.grad().requires_grad());
  const td gx = x.grad();
  const td n2 = fg::sum(gx * gx);
  const td penalty = (n2 - 1.0) * (n2 - 1.0);
  const td gw = fg::autograd::grad(penalty, w);
  // By hand: dn2/dw_i = 2 w (1-t²)² + w² * 2 (1-t²) * (-2 t) * (1 - t²) * x.
  std::vector<double> wv{0.7, -1.3, 0.4}, xv{0.2, 0.5, -0.9};
  double n2v = 0;
  for (int i = 0; i < 3; ++i) {
    const double t = std::tanh(wv[i] * xv[i]);
    n2v += wv[i] * wv[i] * (1 - t * t) * (1 - t * t);
  }
  for (int i = 0; i < 3; ++i) {
    const double t = std::tanh(wv[i] * xv[i]), s = 1 - t * t;
    const double dn2 = 2 * wv[i] * s * s + wv[i] * wv[i] * 2 * s * (-2 * t * s * xv[i]);
    CHECK(gw.at({i}) == doctest::Approx(2 * (n2v - 1) * dn2).epsilon(1e-12));
  }
}
