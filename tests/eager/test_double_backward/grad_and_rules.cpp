// test_double_backward: autograd::grad's contract; custom functions and rules that are not
// differentiable again; create_graph under compiled autograd.
#include "helpers.hpp"

TEST_CASE("autograd::grad: returns gradients, writes no .grad(), checks its arguments") {
  td x = vec({1.0, 2.0}), y = vec({3.0, 4.0}), unused = vec({5.0});
  const td out = fg::sum(x * y);
  const auto g = fg::autograd::grad({out}, {x, y}, {.retain_graph = true});
  CHECK(g[0].at({1}) == 4.0);
  CHECK(g[1].at({0}) == 1.0);
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(y.grad().defined());
  CHECK_FALSE(g[0].requires_grad());  // no create_graph: no history
  // An intermediate as the input: the gradient flowing into it.
  td m = x * 2.0;
  const auto gm = fg::autograd::grad(fg::sum(m * m), m);
  CHECK(gm.at({1}) == 8.0);
  // Hooks on the input run on the captured gradient.
  td z = vec({1.0});
  z.register_hook([](const td& gz) { return gz * 10.0; });
  CHECK(fg::autograd::grad(fg::sum(z * 3.0), z).item() == 30.0);
  CHECK_THROWS_WITH_AS(fg::autograd::grad(fg::sum(x * y), unused), doctest::Contains("not used to compute the outputs"),
                       fg::error);
  const auto maybe = fg::autograd::grad({fg::sum(x * y)}, {x, unused}, {.allow_unused = true});
  CHECK(maybe[0].defined());
  CHECK_FALSE(maybe[1].defined());
  CHECK_THROWS_WITH_AS(fg::autograd::grad(fg::sum(x * y), fg::from_vector<double>({1.0})),
                       doctest::Contains("does not require grad"), fg::error);
  CHECK_THROWS_WITH_AS(fg::autograd::grad({fg::sum(x * y)}, {x}, {fg::ones<double>({2}), fg::ones<double>({2})}),
                       doctest::Contains("grad_outputs"), fg::error);
  // The graph is freed without retain_graph: a second use is the usual clear error.
  const td o2 = fg::sum(fg::exp(x));
  (void)fg::autograd::grad(o2, x);
  CHECK_THROWS_WITH_AS(fg::autograd::grad(o2, x), doctest::Contains("second time"), fg::error);
}

namespace {
/// examples/custom_function.cpp's `Cosine`, written with fusegrad's ops: differentiable again.
struct cosine_fn {
  static constexpr std::string_view name = "CosineBackward";
  static auto forward(const auto& x) { return fg::cos(x); }
  static auto setup_context(const auto& x, const auto&) { return fg::save_for_backward(x); }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [x] = saved;
    return -fg::sin(x) * grad;
  }
};
/// The same op with a backward that reads raw values, declared so.
struct raw_cosine_fn {
  static constexpr std::string_view name = "RawCosineBackward";
  static constexpr bool once_differentiable = true;
  static auto forward(const auto& x) { return fg::cos(x); }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [x] = saved;
    std::vector<double> v = x.to_vector(), g = grad.to_vector();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = -std::sin(v[i]) * g[i];
    return fg::from_vector<double>(v, x.shape());
  }
};
}  // namespace

TEST_CASE("double backward: custom functions, differentiable again unless once_differentiable") {
  const auto f = [](const td& x) { return fg::function<cosine_fn>::apply(x) * x; };
  CHECK(fg::gradcheck(second, projected_gradient(f), fg::from_vector<double>({0.3, -1.2, 2.0, 0.7})).ok);
  // d²/dx² cos x = -cos x, d³/dx³ = sin x.
  td x = vec({0.5, 1.5, 2.5});
  const td g = fg::autograd::grad(fg::sum(fg::function<cosine_fn>::apply(x)), x, {.create_graph = true});
  const td h = fg::autograd::grad(fg::sum(g), x, {.create_graph = true});
  const td t = fg::autograd::grad(fg::sum(h), x);
  for (int i = 0; i < 3; ++i) {
    const double v = x.at({i});
    CHECK(h.at({i}) == doctest::Approx(-std::cos(v)).epsilon(1e-14));
    CHECK(t.at({i}) == doctest::Approx(std::sin(v)).epsilon(1e-14));
  }
}

TEST_CASE("double backward: rules that are not differentiable throw when reached, not before") {
  td x = vec({0.5, 1.5, 2.5});
  // A custom function whose backward reads raw values says so: its first derivative is fine...
  const td g = fg::autograd::grad(fg::sum(fg::function<raw_cosine_fn>::apply(x)), x, {.create_graph = true});
  CHECK(g.at({2}) == doctest::Approx(-std::sin(2.5)));
  // ... and differentiating it again names the op.
  CHECK_THROWS_WITH_AS((void)fg::autograd::grad(fg::sum(g * g), x),
                       doctest::Contains("double backward through RawCosineBackward"), fg::error);
  // A compiled function's backward is a fused kernel: the same clear error.
  auto f = fg::compile([](auto a) { return fg::sin(a) * a; });
  const td gc = fg::autograd::grad(fg::sum(f(x)), x, {.create_graph = true});
  CHECK(gc.at({1}) == doctest::Approx(std::sin(1.5) + 1.5 * std::cos(1.5)));
  CHECK_THROWS_WITH_AS((void)fg::autograd::grad(fg::sum(gc), x),
                       doctest::Contains("double backward through CompiledFunctionBackward"), fg::error);
}

TEST_CASE("double backward: create_graph runs the eager engine under compiled autograd") {
  fg::compiled_autograd::enable on;
  td x = vec({0.4, -0.8});
  const td g = fg::autograd::grad(fg::sum(fg::exp(x) * x), x, {.create_graph = true});
  const td gg = fg::autograd::grad(fg::sum(g), x);
  for (int i = 0; i < 2; ++i) {
    const double v = x.at({i});
    CHECK(gg.at({i}) == doctest::Approx(std::exp(v) * (2 + v)).epsilon(1e-13));
  }
}
