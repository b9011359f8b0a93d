// test_autograd: custom functions (forward, saved tensors, backward) and gradcheck of one.
#include "helpers.hpp"

// =======================================================================================
// Custom functions
// =======================================================================================

namespace {

/// examples/custom_function.cpp's `Cosine`: forward cos, saves x, backward -sin(x) * grad.
struct Cosine {
  static constexpr std::string_view name = "CosineBackward";
  static inline int saved_count = 0;
  static inline int backward_calls = 0;
  static auto forward(const auto& x) { return fg::cos(x); }
  static auto setup_context(const auto& x, const auto& /*out*/) {
    auto s = fg::save_for_backward(x);
    saved_count += static_cast<int>(std::tuple_size_v<decltype(s)>);
    return s;
  }
  static auto backward(const auto& saved, const auto& grad) {
    ++backward_calls;
    const auto& [x] = saved;
    return -fg::sin(x) * grad;
  }
};

/// Two inputs, gradients returned as a tuple: f(a, b) = a * b + a.
struct MulAdd {
  static constexpr std::string_view name = "MulAddBackward";
  static auto forward(const auto& a, const auto& b) { return a * b + a; }
  static auto setup_context(const auto& a, const auto& b, const auto& /*out*/) { return fg::save_for_backward(a, b); }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [a, b] = saved;
    return std::tuple{grad * (b + 1.0), grad * a};
  }
};

/// No setup_context: every input is saved. f(x) = x^2.
struct Square {
  static constexpr std::string_view name = "SquareBackward";
  static auto forward(const auto& x) { return x * x; }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [x] = saved;
    return grad * x * 2.0;
  }
};

/// Two inputs, no setup_context (both saved); no gradient for the second input.
struct ScaleBy {
  static constexpr std::string_view name = "ScaleByBackward";
  static auto forward(const auto& x, const auto& s) { return x * s; }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [x, s] = saved;
    using tensor_t = std::remove_cvref_t<decltype(grad)>;
    return std::tuple{tensor_t(grad * s), tensor_t{}};
  }
};

/// Saves its output: f(x) = exp(x), f' = f.
struct MyExp {
  static constexpr std::string_view name = "MyExpBackward";
  static auto forward(const auto& x) { return fg::exp(x); }
  static auto setup_context(const auto& /*x*/, const auto& out) { return fg::save_for_backward(out); }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [y] = saved;
    return grad * y;
  }
};

/// A deliberately wrong backward (sign flipped) to show gradcheck catches it.
struct WrongCosine {
  static constexpr std::string_view name = "WrongCosineBackward";
  static auto forward(const auto& x) { return fg::cos(x); }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [x] = saved;
    return fg::sin(x) * grad;
  }
};

}  // namespace

TEST_CASE("custom function: Cosine forward, saved tensors and backward") {
  Cosine::saved_count = 0;
  Cosine::backward_calls = 0;
  const std::vector<float> xv{0.0f, 0.5f, 1.0f, 2.0f};
  auto x = fg::from_vector<float>(xv).requires_grad(true);

  const auto y = fg::function<Cosine>::apply(x);
  CHECK(Cosine::saved_count == 1);
  CHECK(y.grad_fn_name() == "CosineBackward");
  CHECK_FALSE(y.is_leaf());
  CHECK(y.requires_grad());
  for (std::size_t i = 0; i < xv.size(); ++i) CHECK(y.to_vector()[i] == doctest::Approx(std::cos(xv[i])));

  // The node saved exactly x (sharing its storage) and points at x's AccumulateGrad.
  const auto saved = y.grad_fn()->saved_tensors();
  REQUIRE(saved.size() == 1);
  CHECK(saved[0].data() == x.data());
  REQUIRE(y.grad_fn()->next_edges().size() == 1);
  CHECK(y.grad_fn()->next_edges()[0].fn == fg::detail::grad_accumulator(x));

  fg::sum(y).backward();
  CHECK(Cosine::backward_calls == 1);
  std::vector<float> expect;
  for (float v : xv) expect.push_back(-std::sin(v));
  check_values(x.grad(), expect);
  CHECK(y.grad_fn()->saved_tensors().empty());  // freed after backward
}

TEST_CASE("custom function: two chained Cosine calls") {
  Cosine::saved_count = 0;
  Cosine::backward_calls = 0;
  const std::vector<double> xv{0.2, 1.1, -0.7};
  auto x = fg::from_vector<double>(xv).requires_grad(true);

  const auto y = fg::function<Cosine>::apply(fg::function<Cosine>::apply(x));
  CHECK(Cosine::saved_count == 2);  // each call saved one tensor
  CHECK(y.grad_fn_name() == "CosineBackward");
  CHECK(y.grad_fn()->next_edges()[0].fn->name() == "CosineBackward");
  CHECK(y.grad_fn()->saved_tensors().size() == 1);
  CHECK(y.grad_fn()->next_edges()[0].fn->saved_tensors().size() == 1);

  fg::sum(y).backward();
  CHECK(Cosine::backward_calls == 2);
  // d/dx cos(cos x) = sin(cos x) * sin x
  std::vector<double> expect;
  for (double v : xv) expect.push_back(std::sin(std::cos(v)) * std::sin(v));
  check_values(x.grad(), expect, 1e-12);

  // Same gradient as the built-in ops give.
  auto x2 = fg::from_vector<double>(xv).requires_grad(true);
  fg::sum(fg::cos(fg::cos(x2))).backward();
  check_values(x2.grad(), x.grad().to_vector(), 1e-12);

  // Under no_grad, nothing is saved or recorded.
  {
    fg::no_grad guard;
    const auto z = fg::function<Cosine>::apply(x);
    CHECK(z.grad_fn() == nullptr);
    CHECK_FALSE(z.requires_grad());
  }
  CHECK(Cosine::saved_count == 2);

  // An input that doesn't require grad: no node, no saving.
  const auto w = fg::function<Cosine>::apply(fg::ones<double>({2}));
  CHECK(w.grad_fn() == nullptr);
  CHECK(Cosine::saved_count == 2);
}

TEST_CASE("custom function: forward's inner ops are not recorded") {
  auto x = fg::from_vector<float>({1, 2}).requires_grad(true);
  const auto y = fg::function<MulAdd>::apply(x, x);  // x^2 + x, d/dx = 2x + 1
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn_name() == "MulAddBackward");
  // Its only edges go straight to x's AccumulateGrad (one per input).
  REQUIRE(y.grad_fn()->next_edges().size() == 2);
  CHECK(y.grad_fn()->next_edges()[0].fn->name() == "AccumulateGrad");
  CHECK(y.grad_fn()->next_edges()[1].fn->name() == "AccumulateGrad");
  fg::sum(y).backward();
  check_values(x.grad(), {3, 5});
}

TEST_CASE("custom function: two inputs, backward returns a std::tuple") {
  auto a = fg::from_vector<double>({1, 2, 3}).requires_grad(true);
  auto b = fg::from_vector<double>({4, 5, 6}).requires_grad(true);
  const auto y = fg::function<MulAdd>::apply(a, b);
  check_values(y, {1 * 4 + 1, 2 * 5 + 2, 3 * 6 + 3});
  CHECK(y.grad_fn()->saved_tensors().size() == 2);
  y.backward(fg::from_vector<double>({1, 10, 100}));
  check_values(a.grad(), {1 * (4 + 1), 10 * (5 + 1), 100 * (6 + 1)});  // g (b + 1)
  check_values(b.grad(), {1 * 1, 10 * 2, 100 * 3});                    // g a

  // Only one input requires grad: the other gets nothing.
  auto c = fg::from_vector<double>({2, 3}).requires_grad(true);
  const auto d = fg::from_vector<double>({7, 8});
  fg::sum(fg::function<MulAdd>::apply(d, c)).backward();
  check_values(c.grad(), {7, 8});
  CHECK_FALSE(d.grad().defined());

  // A custom op may also return "no gradient" (an undefined tensor) for an input.
  auto p = fg::from_vector<float>({1, 2}).requires_grad(true);
  auto s = fg::from_vector<float>({3, 4}).requires_grad(true);
  fg::sum(fg::function<ScaleBy>::apply(p, s)).backward();
  check_values(p.grad(), {3, 4});
  // Regression: the undefined ("no gradient") entry used to become a zero tensor in the engine
  // (run_backward fills every missing input gradient with zeros before calling a node), so
  // s's AccumulateGrad stores zeros: s.grad() is defined ([0, 0]) instead of staying
  // undefined as documented in function.hpp and as in PyTorch (s.grad is None).
  CHECK_FALSE(s.grad().defined());
  if (s.grad().defined()) check_values(s.grad(), {0, 0});  // what the regression held
}

TEST_CASE("custom function without setup_context saves all inputs") {
  auto x = fg::from_vector<float>({1, -2, 3}).requires_grad(true);
  const auto y = fg::function<Square>::apply(x);
  CHECK(y.grad_fn_name() == "SquareBackward");
  const auto saved = y.grad_fn()->saved_tensors();
  REQUIRE(saved.size() == 1);
  CHECK(saved[0].data() == x.data());
  check_values(saved[0], {1, -2, 3});
  fg::sum(y).backward();
  check_values(x.grad(), {2, -4, 6});

  auto a = fg::from_vector<float>({1}).requires_grad(true);
  auto b = fg::from_vector<float>({2}).requires_grad(true);
  const auto z = fg::function<ScaleBy>::apply(a, b);
  CHECK(z.grad_fn()->saved_tensors().size() == 2);

  // Saving the output works too (no reference cycle: saved as a detached alias).
  auto e = fg::from_vector<float>({0, 1}).requires_grad(true);
  const auto ey = fg::function<MyExp>::apply(e);
  REQUIRE(ey.grad_fn()->saved_tensors().size() == 1);
  CHECK(ey.grad_fn()->saved_tensors()[0].data() == ey.data());
  fg::sum(ey).backward();
  check_values(e.grad(), {1.0f, std::exp(1.0f)});
}

TEST_CASE("gradcheck a custom op in double") {
  const auto x = fg::from_vector<double>({0.3, -1.2, 2.0, 0.9}, {2, 2});
  const auto r = fg::gradcheck([](const auto& t) { return fg::function<Cosine>::apply(t); }, x);
  INFO(r.message);
  CHECK(static_cast<bool>(r));
  CHECK(r.ok);
  CHECK(r.max_abs_error < 1e-6);
  CHECK(r.message.find("passed") != std::string::npos);

  const auto a = fg::from_vector<double>({1.5, -0.5, 2.0});
  const auto b = fg::from_vector<double>({0.7, 3.0, -1.0});
  const auto r2 = fg::gradcheck([](const auto& p, const auto& q) { return fg::function<MulAdd>::apply(p, q); }, a, b);
  INFO(r2.message);
  CHECK(r2);

  const auto r3 = fg::gradcheck([](const auto& t) { return fg::function<Square>::apply(t); }, a);
  CHECK(r3);

  // The entry reported is the one closest to its tolerance: of cos on a 2 x 2 input a diagonal
  // entry, not one of the Jacobian's exact zeros (whose tolerance, atol alone, is the
  // smallest).
  CHECK(r.output_element == r.input_element);
  CHECK(r.analytic == doctest::Approx(-std::sin(x.to_vector()[static_cast<std::size_t>(r.input_element)])));

  // Chained custom ops reduced to a scalar.
  const auto r4 = fg::gradcheck(
      [](const auto& t) { return fg::sum(fg::function<Cosine>::apply(fg::function<Square>::apply(t))); }, a);
  CHECK(r4);

  // A wrong backward is caught, and the message says where.
  const auto bad = fg::gradcheck([](const auto& t) { return fg::function<WrongCosine>::apply(t); }, a);
  CHECK_FALSE(bad);
  CHECK(bad.message.find("FAILED") != std::string::npos);
  // The analytic value is sin(x) where the true derivative is -sin(x).
  CHECK(bad.analytic == doctest::Approx(-bad.numeric).epsilon(1e-4));
}
