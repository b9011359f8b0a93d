// test_autograd: the backward engine (implicit and given gradients, accumulation,
// retain_graph, multi-root backward, retain_grad, detach, grad mode) and tensor hooks.
#include "helpers.hpp"

// =======================================================================================
// backward
// =======================================================================================

TEST_CASE("backward: implicit gradient 1 for one-element outputs") {
  SUBCASE("0-d result of sum") {
    auto x = fg::from_vector<float>({1, 2, 3}).requires_grad(true);
    const auto y = fg::sum(x * x);  // d/dx = 2x
    CHECK(y.dim() == 0);
    y.backward();
    check_values(x.grad(), {2, 4, 6});
  }
  SUBCASE("shape {1}") {
    auto x = fg::from_vector<float>({3}).requires_grad(true);
    const auto y = x * x * x;  // d/dx = 3x^2 = 27
    CHECK(y.shape() == shp({1}));
    y.backward();
    check_values(x.grad(), {27});
  }
  SUBCASE("shape {1, 1}") {
    auto x = fg::full<float>({1, 1}, 2.0f).requires_grad(true);
    (fg::exp(x) * 1.0f).backward();  // d/dx = e^2
    check_values(x.grad(), {std::exp(2.0f)});
  }
  SUBCASE("0-d leaf") {
    auto x = fg::scalar_tensor<float>(-1.5f).requires_grad(true);
    (x * x).backward();  // 2x
    CHECK(x.grad().dim() == 0);
    CHECK(x.grad().item() == doctest::Approx(-3.0));
  }
  SUBCASE("backward on the leaf itself") {
    auto x = fg::scalar_tensor<float>(2.0f).requires_grad(true);
    x.backward();
    CHECK(x.grad().item() == 1.0f);
  }
}

TEST_CASE("backward(gradient) for non-scalar outputs") {
  auto x = fg::from_vector<float>({1, 2, 3, 4}, {2, 2}).requires_grad(true);
  const auto y = x * x;  // dy/dx = 2x (element-wise)
  y.backward(fg::from_vector<float>({1, 10, 100, 1000}, {2, 2}));
  check_values(x.grad(), {2, 40, 600, 8000});
  CHECK(x.grad().shape() == shp({2, 2}));

  // A vector-Jacobian product through a reduction over dim 1.
  auto a = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad(true);
  const auto s = fg::sum(a, 1);  // [6, 15]
  CHECK(s.shape() == shp({2}));
  check_values(s, {6, 15});
  s.backward(fg::from_vector<float>({2, -1}));
  check_values(a.grad(), {2, 2, 2, -1, -1, -1});
}

TEST_CASE("gradients of common ops match hand-derived values") {
  const std::vector<double> xv{0.3, 1.2, 2.5};
  auto x = fg::from_vector<double>(xv).requires_grad(true);
  auto g = [&](auto f) {
    x.zero_grad();
    fg::sum(f(x)).backward();
    return x.grad().to_vector();
  };
  auto each = [&](auto d) {
    std::vector<double> r;
    for (double v : xv) r.push_back(d(v));
    return r;
  };
  auto near = [](const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-12));
  };
  near(g([](const auto& t) { return fg::sin(t); }), each([](double v) { return std::cos(v); }));
  near(g([](const auto& t) { return fg::cos(t); }), each([](double v) { return -std::sin(v); }));
  near(g([](const auto& t) { return fg::exp(t); }), each([](double v) { return std::exp(v); }));
  near(g([](const auto& t) { return fg::log(t); }), each([](double v) { return 1 / v; }));
  near(g([](const auto& t) { return fg::sqrt(t); }), each([](double v) { return 0.5 / std::sqrt(v); }));
  near(g([](const auto& t) { return fg::tanh(t); }), each([](double v) { return 1 - std::tanh(v) * std::tanh(v); }));
  near(g([](const auto& t) { return fg::sigmoid(t); }), each([](double v) {
         const double s = 1 / (1 + std::exp(-v));
         return s * (1 - s);
       }));
  near(g([](const auto& t) { return fg::pow(t, 3); }), each([](double v) { return 3 * v * v; }));
  near(g([](const auto& t) { return 1.0 / t; }), each([](double v) { return -1 / (v * v); }));
  near(g([](const auto& t) { return 2.0 - t; }), each([](double) { return -1.0; }));
  near(g([](const auto& t) { return t / 4.0; }), each([](double) { return 0.25; }));
  near(g([](const auto& t) { return -t; }), each([](double) { return -1.0; }));
  near(g([](const auto& t) { return fg::mean(t); }), each([](double) { return 1.0 / 3; }));
  near(g([](const auto& t) { return t / (t + 1.0); }), each([](double v) { return 1 / ((v + 1) * (v + 1)); }));

  // relu and abs, including PyTorch's convention at 0 (gradient 0).
  auto r = fg::from_vector<float>({-2, 0, 3}).requires_grad(true);
  fg::sum(fg::relu(r)).backward();
  check_values(r.grad(), {0, 0, 1});
  r.zero_grad();
  fg::sum(fg::abs(r)).backward();
  check_values(r.grad(), {-1, 0, 1});

  // Reducing a non-empty dim of a tensor with another empty dim is not an empty reduction:
  // each of the zero results reduces 3 values. PyTorch returns an empty tensor of shape [0].
  // Regression: fg::max used to throw "cannot reduce ... over an empty dim" here although
  // dim 0 has size 3 (the check `x.numel() == 0` fires before the reduced count is looked at).
  CHECK_NOTHROW((void)fg::max(fg::zeros<float>({3, 0}), 0));

  // max splits the gradient between ties; maximum splits ties evenly too.
  auto m = fg::from_vector<float>({1, 3, 3, 2}).requires_grad(true);
  fg::max(m).backward();
  check_values(m.grad(), {0, 0.5f, 0.5f, 0});
  auto mm2 = fg::from_vector<float>({1, 5, 3, 2}, {2, 2}).requires_grad(true);
  fg::sum(fg::max(mm2, 1)).backward();  // row maxima: 5 (col 1) and 3 (col 0)
  check_values(mm2.grad(), {0, 1, 1, 0});
  auto p = fg::from_vector<float>({1, 2, 3}).requires_grad(true);
  auto q = fg::from_vector<float>({3, 2, 1}).requires_grad(true);
  fg::sum(fg::maximum(p, q)).backward();
  check_values(p.grad(), {0, 0.5f, 1});
  check_values(q.grad(), {1, 0.5f, 0});

  // pow with a tensor exponent: d/da a^b = b a^(b-1), d/db a^b = a^b ln a.
  auto a = fg::from_vector<double>({2.0, 3.0}).requires_grad(true);
  auto b = fg::from_vector<double>({3.0, 0.5}).requires_grad(true);
  fg::sum(fg::pow(a, b)).backward();
  check_values(a.grad(), {3.0 * 4.0, 0.5 / std::sqrt(3.0)});
  check_values(b.grad(), {8.0 * std::log(2.0), std::sqrt(3.0) * std::log(3.0)});

  // Division by a tensor: d/da (a/b) = 1/b, d/db (a/b) = -a/b^2.
  a.zero_grad();
  b.zero_grad();
  fg::sum(a / b).backward();
  check_values(a.grad(), {1 / 3.0, 1 / 0.5});
  check_values(b.grad(), {-2.0 / 9.0, -3.0 / 0.25});
}

TEST_CASE("gradients of matmul and layout ops") {
  // y = sum(A B), A [2, 3], B [3, 2]: dA[i][k] = sum_j B[k][j], dB[k][j] = sum_i A[i][k].
  auto A = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad(true);
  auto B = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad(true);
  const auto C = fg::matmul(A, B);
  CHECK(C.shape() == shp({2, 2}));
  check_values(C, {22, 28, 49, 64});
  fg::sum(C).backward();
  check_values(A.grad(), {3, 7, 11, 3, 7, 11});
  check_values(B.grad(), {5, 5, 7, 7, 9, 9});

  // Weighted sum over a transposed view: grad of x is W transposed back.
  auto x = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad(true);
  const auto W = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  fg::sum(x.t() * W).backward();
  check_values(x.grad(), {1, 3, 5, 2, 4, 6});

  // select / slice: gradient lands in the selected positions only.
  x.zero_grad();
  fg::sum(x.select(1, 2) * 10.0f).backward();
  check_values(x.grad(), {0, 0, 10, 0, 0, 10});
  x.zero_grad();
  fg::sum(x.slice(1, 0, 3, 2)).backward();  // columns 0 and 2
  check_values(x.grad(), {1, 0, 1, 1, 0, 1});

  // permute / reshape / unsqueeze / squeeze keep the identity Jacobian.
  x.zero_grad();
  const auto w2 = fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 1, 2});
  fg::sum(x.permute({1, 0}).unsqueeze(1) * w2).backward();
  // x.permute({1,0})[j][i] = x[i][j] multiplies w2[j][0][i]
  check_values(x.grad(), {1, 3, 5, 2, 4, 6});
  x.zero_grad();
  fg::sum(x.reshape({3, 2}).squeeze(0) * fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2})).backward();
  check_values(x.grad(), {1, 2, 3, 4, 5, 6});

  // expand: the gradient sums over the expanded dims.
  auto v = fg::from_vector<float>({1, 2}, {2, 1}).requires_grad(true);
  const auto e = v.expand({4, 2, 3});
  CHECK(e.shape() == shp({4, 2, 3}));
  fg::sum(e).backward();
  check_values(v.grad(), {12, 12});

  // cat: each input gets its slice of the gradient.
  auto c1 = fg::ones<float>({1, 2}).requires_grad(true);
  auto c2 = fg::ones<float>({2, 2}).requires_grad(true);
  const auto cc = fg::cat(std::vector{c1, c2}, 0);
  CHECK(cc.shape() == shp({3, 2}));
  cc.backward(fg::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  check_values(c1.grad(), {1, 2});
  check_values(c2.grad(), {3, 4, 5, 6});

  // Batched matmul with broadcast batch dims: [2, 1, 2] x [2, 1] -> [2, 1, 1].
  auto P = fg::from_vector<float>({1, 2, 3, 4}, {2, 1, 2}).requires_grad(true);
  auto Q = fg::from_vector<float>({5, 6}, {2, 1}).requires_grad(true);
  const auto R = fg::matmul(P, Q);
  CHECK(R.shape() == shp({2, 1, 1}));
  check_values(R, {17, 39});
  fg::sum(R).backward();
  check_values(P.grad(), {5, 6, 5, 6});
  check_values(Q.grad(), {4, 6});
}

TEST_CASE("gradients accumulate over backward calls and can be reset") {
  auto x = fg::from_vector<float>({1, 2}).requires_grad(true);
  CHECK_FALSE(x.grad().defined());  // no gradient before any backward

  fg::sum(x * 3.0f).backward();
  check_values(x.grad(), {3, 3});
  fg::sum(x * x).backward();  // adds 2x
  check_values(x.grad(), {5, 7});

  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  fg::sum(x * 3.0f).backward();
  check_values(x.grad(), {3, 3});

  x.set_grad({});
  CHECK_FALSE(x.grad().defined());
  fg::sum(x * x).backward();
  check_values(x.grad(), {2, 4});

  // set_grad to a value: later backwards accumulate on top of it.
  x.set_grad(fg::from_vector<float>({100, 200}));
  fg::sum(x).backward();
  check_values(x.grad(), {101, 201});

  fg::sum(x).backward();
  check_values(x.grad(), {102, 202});
}

TEST_CASE("retain_graph allows a second backward") {
  auto x = fg::from_vector<float>({1, 2, 3}).requires_grad(true);
  const auto y = fg::sum(x * x * x);  // d/dx = 3x^2, saves tensors
  y.backward({}, {.retain_graph = true});
  check_values(x.grad(), {3, 12, 27});
  y.backward({.retain_graph = true});  // the options-only overload
  check_values(x.grad(), {6, 24, 54});
  y.backward();  // last one may free the graph
  check_values(x.grad(), {9, 36, 81});

  // Saved tensors are freed after a backward without retain_graph.
  auto a = fg::from_vector<float>({1, 2}).requires_grad(true);
  const auto b = a * a;
  CHECK(b.grad_fn()->saved_tensors().size() >= 1);
  fg::sum(b).backward();
  CHECK(b.grad_fn()->saved_tensors().empty());

  // A graph that saves nothing may be run again (as in PyTorch).
  auto c = fg::from_vector<float>({1, 2}).requires_grad(true);
  const auto d = fg::sum(c + c);
  d.backward();
  d.backward();
  check_values(c.grad(), {4, 4});
}

TEST_CASE("a tensor used twice gets the sum of its gradients") {
  auto x = fg::from_vector<float>({1, -2, 3}).requires_grad(true);
  fg::sum(x * x).backward();  // 2x
  check_values(x.grad(), {2, -4, 6});

  x.zero_grad();
  fg::sum(x + x).backward();  // 2
  check_values(x.grad(), {2, 2, 2});

  x.zero_grad();
  fg::sum(x * x * x - x).backward();  // 3x^2 - 1
  check_values(x.grad(), {2, 11, 26});
}

TEST_CASE("diamond graph") {
  // a = 2x; b = 3a; c = a + 1; d = b * c = 6x (2x + 1) = 12x^2 + 6x -> dd/dx = 24x + 6.
  auto x = fg::from_vector<double>({0.5, -1.0, 2.0}).requires_grad(true);
  const auto a = x * 2.0;
  const auto b = a * 3.0;
  const auto c = a + 1.0;
  const auto d = b * c;
  fg::sum(d).backward();
  check_values(x.grad(), {24 * 0.5 + 6, 24 * -1.0 + 6, 24 * 2.0 + 6});

  // Deeper diamond sharing two intermediates: e = sin(x) * cos(x) + sin(x)
  // de/dx = cos^2 - sin^2 + cos.
  auto y = fg::from_vector<double>({0.1, 0.7}).requires_grad(true);
  const auto s = fg::sin(y), co = fg::cos(y);
  fg::sum(s * co + s).backward();
  std::vector<double> expect;
  for (double v : {0.1, 0.7}) expect.push_back(std::cos(v) * std::cos(v) - std::sin(v) * std::sin(v) + std::cos(v));
  check_values(y.grad(), expect, 1e-12);
}

/// True when `fg::backward({a, b})` (a braced list of tensors) compiles.
template <class T>
concept braced_multi_root_backward = requires(fg::tensor<T> a) {
  fg::backward({a, a});
};

TEST_CASE("multi-root backward") {
  auto x = fg::from_vector<float>({1, 2, 3}).requires_grad(true);
  const auto y1 = fg::sum(x * 2.0f);  // d/dx = 2
  const auto y2 = fg::sum(x * x);     // d/dx = 2x
  fg::backward(std::vector{y1, y2});
  check_values(x.grad(), {4, 6, 8});

  // The template argument spelled out lets a braced list through.
  x.zero_grad();
  const auto z1 = fg::sum(x * 2.0f), z2 = fg::sum(x * x);
  fg::backward<float>({z1, z2});
  check_values(x.grad(), {4, 6, 8});

  // Regression: `fg::backward({y1, y2})` (the spelling of torch.autograd.backward) used not to compile:
  // T cannot be deduced from a braced list for `const std::vector<tensor<T>>&`.
  CHECK(braced_multi_root_backward<float>);

  // With explicit gradients, one per root (non-scalar roots).
  x.zero_grad();
  const auto v1 = x * 3.0f;
  const auto v2 = x * x;
  fg::backward(std::vector{v1, v2}, std::vector{fg::from_vector<float>({1, 0, 2}), fg::ones<float>({3})});
  check_values(x.grad(), {3 * 1 + 2, 3 * 0 + 4, 3 * 2 + 6});

  // One root is an ancestor of the other: r2 = 3 r1, so x receives 2 + 3*2 = 8.
  auto w = fg::from_vector<float>({1, 1}).requires_grad(true);
  const auto r1 = fg::sum(w * 2.0f);
  const auto r2 = r1 * 3.0f;
  fg::backward(std::vector{r1, r2});
  check_values(w.grad(), {8, 8});

  // Two different leaves, two roots.
  auto p = fg::from_vector<float>({2}).requires_grad(true);
  auto q = fg::from_vector<float>({5}).requires_grad(true);
  fg::backward(std::vector{p * q, p + q});
  check_values(p.grad(), {5 + 1});
  check_values(q.grad(), {2 + 1});
}

TEST_CASE("retain_grad keeps a non-leaf's gradient") {
  auto x = fg::from_vector<float>({1, 2}).requires_grad(true);
  auto y = x * 3.0f;
  const auto z = y * y;  // dz/dy = 2y = 6x
  y.retain_grad();
  fg::sum(z).backward();
  REQUIRE(y.grad().defined());
  check_values(y.grad(), {6, 12});
  check_values(x.grad(), {18, 36});  // 18x

  // Without retain_grad a non-leaf keeps no gradient.
  auto y2 = x * 3.0f;
  fg::sum(y2 * y2).backward();
  CHECK_FALSE(y2.grad().defined());

  // retain_grad on a leaf is harmless (leaves keep their gradient anyway).
  auto l = fg::from_vector<float>({1}).requires_grad(true);
  l.retain_grad();
  (l * 4.0f).backward();
  check_values(l.grad(), {4});

  // Retained gradients accumulate like leaf gradients, across retain_graph backwards.
  auto a = fg::from_vector<float>({1, 2}).requires_grad(true);
  auto b = a * 2.0f;
  b.retain_grad();
  const auto s = fg::sum(b * b);  // ds/db = 2b = 4a
  s.backward({.retain_graph = true});
  s.backward();
  check_values(b.grad(), {8, 16});
}

TEST_CASE("detach stops gradients and shares storage") {
  auto x = fg::from_vector<float>({1, 2, 3}).requires_grad(true);
  auto d = x.detach();
  CHECK(d.is_leaf());
  CHECK_FALSE(d.requires_grad());
  CHECK_FALSE(d.is_same(x));
  CHECK(d.data() == x.data());  // same storage
  d.data()[0] = 10.0f;
  CHECK(x.at({0}) == 10.0f);
  d.data()[0] = 1.0f;

  // y = x * detach(x): only the first factor carries a gradient, d/dx = x (not 2x).
  fg::sum(x * x.detach()).backward();
  check_values(x.grad(), {1, 2, 3});

  // Detaching a non-leaf cuts the graph there.
  x.zero_grad();
  const auto h = (x * 5.0f).detach();
  CHECK(h.grad_fn() == nullptr);
  CHECK_FALSE(h.requires_grad());
  fg::sum(x * 2.0f + h).backward();
  check_values(x.grad(), {2, 2, 2});

  // A detached tensor can become a new leaf of its own.
  auto leaf = (x * 5.0f).detach();
  leaf.requires_grad(true);
  fg::sum(leaf * leaf).backward();
  check_values(leaf.grad(), {10, 20, 30});  // 2 * (5x)
}

TEST_CASE("no_grad and enable_grad scopes") {
  auto x = fg::from_vector<float>({1, 2}).requires_grad(true);
  CHECK(fg::is_grad_enabled());
  {
    fg::no_grad guard;
    CHECK_FALSE(fg::is_grad_enabled());
    const auto y = x * 2.0f;
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    const auto s = fg::sum(x);
    CHECK(s.grad_fn() == nullptr);
    const auto v = x.reshape({2, 1}).expand({2, 3});
    CHECK(v.grad_fn() == nullptr);
    CHECK_FALSE(v.requires_grad());
    const auto m = fg::mm(x.unsqueeze(0), x.unsqueeze(1));
    CHECK_FALSE(m.requires_grad());
    check_values(y, {2, 4});  // values are still computed

    {
      fg::enable_grad on;
      CHECK(fg::is_grad_enabled());
      const auto z = x * 2.0f;
      CHECK(z.grad_fn_name() == "MulBackward1");
      CHECK(z.requires_grad());
      fg::sum(z).backward();
      check_values(x.grad(), {2, 2});
      {
        fg::no_grad nested;
        CHECK_FALSE(fg::is_grad_enabled());
      }
      CHECK(fg::is_grad_enabled());
    }
    CHECK_FALSE(fg::is_grad_enabled());  // back to no_grad after enable_grad ends
  }
  CHECK(fg::is_grad_enabled());  // restored after the scope

  // The backward pass itself runs without recording and restores grad mode afterwards.
  auto w = fg::from_vector<float>({1}).requires_grad(true);
  bool enabled_in_hook = true;
  w.register_hook([&](const fg::tensor<float>&) { enabled_in_hook = fg::is_grad_enabled(); });
  (w * w).backward();
  CHECK_FALSE(enabled_in_hook);
  CHECK(fg::is_grad_enabled());
}

// =======================================================================================
// Hooks
// =======================================================================================

TEST_CASE("a leaf hook replaces the gradient before accumulation") {
  auto x = fg::from_vector<float>({1, 2, 3}).requires_grad(true);
  x.register_hook([](const fg::tensor<float>& g) { return g + 10.0f; });
  fg::sum(x * 2.0f).backward();
  check_values(x.grad(), {12, 12, 12});  // 2 + 10 per element

  // The hook runs again on the next backward, and accumulation adds the replaced values.
  fg::sum(x * x).backward();  // 2x + 10 added
  check_values(x.grad(), {12 + 12, 12 + 14, 12 + 16});
}

TEST_CASE("a hook on a leaf used twice runs once on the summed gradient") {
  auto x = fg::from_vector<float>({1, 2}).requires_grad(true);
  int calls = 0;
  std::vector<float> seen;
  x.register_hook([&](const fg::tensor<float>& g) {
    ++calls;
    seen = g.to_vector();
    return g * 2.0f;
  });
  fg::sum(x * x).backward();  // incoming gradient 2x, doubled by the hook
  CHECK(calls == 1);
  CHECK(seen == std::vector<float>{2, 4});
  check_values(x.grad(), {4, 8});
  fg::sum(x + x).backward();
  CHECK(calls == 2);  // once per backward
}

TEST_CASE("a hook on a non-leaf changes the gradient flowing further down") {
  auto x = fg::from_vector<float>({1, 2}).requires_grad(true);
  auto y = x * 3.0f;
  y.register_hook([](const fg::tensor<float>& g) { return g * 2.0f; });
  fg::sum(y * y).backward();  // dL/dy = 2y = 6x, doubled to 12x; dL/dx = 3 * 12x = 36x
  check_values(x.grad(), {36, 72});

  // Hooks chain in registration order: (g + 1) * 10.
  auto a = fg::from_vector<float>({1, 1}).requires_grad(true);
  auto b = a * 1.0f;
  b.register_hook([](const fg::tensor<float>& g) { return g + 1.0f; });
  b.register_hook([](const fg::tensor<float>& g) { return g * 10.0f; });
  fg::sum(b).backward();
  check_values(a.grad(), {20, 20});

  // A hook on a root sees the seed gradient.
  auto r = fg::from_vector<float>({2}).requires_grad(true);
  auto root = r * 3.0f;
  float seed = 0;
  root.register_hook([&](const fg::tensor<float>& g) { seed = g.item(); });
  root.backward();
  CHECK(seed == 1.0f);
  check_values(r.grad(), {3});
}

TEST_CASE("an observing (void) hook counts calls without changing gradients") {
  auto x = fg::from_vector<float>({1, 2, 3}).requires_grad(true);
  auto y = x * x;
  int leaf_calls = 0, mid_calls = 0;
  x.register_hook([&](const fg::tensor<float>&) { ++leaf_calls; });
  y.register_hook([&](const fg::tensor<float>& g) {
    ++mid_calls;
    CHECK(g.shape() == shp({3}));
  });
  const auto L = fg::sum(y);
  L.backward({.retain_graph = true});
  CHECK(leaf_calls == 1);
  CHECK(mid_calls == 1);
  check_values(x.grad(), {2, 4, 6});
  L.backward();
  CHECK(leaf_calls == 2);
  CHECK(mid_calls == 2);
  check_values(x.grad(), {4, 8, 12});
}

TEST_CASE("remove_hook") {
  auto x = fg::from_vector<float>({1, 2}).requires_grad(true);
  int calls = 0;
  const auto id = x.register_hook([&](const fg::tensor<float>& g) {
    ++calls;
    return g * 100.0f;
  });
  fg::sum(x).backward();
  CHECK(calls == 1);
  check_values(x.grad(), {100, 100});

  CHECK(x.remove_hook(id));
  CHECK_FALSE(x.remove_hook(id));  // already gone
  x.zero_grad();
  fg::sum(x).backward();
  CHECK(calls == 1);  // not called any more
  check_values(x.grad(), {1, 1});

  // Removing one hook of a non-leaf keeps the others.
  auto y = x * 1.0f;
  const auto h1 = y.register_hook([](const fg::tensor<float>& g) { return g * 3.0f; });
  y.register_hook([](const fg::tensor<float>& g) { return g + 1.0f; });
  CHECK(y.remove_hook(h1));
  x.zero_grad();
  fg::sum(y).backward();
  check_values(x.grad(), {2, 2});
  CHECK_FALSE(y.remove_hook(123456789));
}
