// A user's own element-wise op (a struct with `name`, `value` and a derivative rule, applied
// with fg::apply_op) and a user's fg::function on the run-time paths: fg::jit traces them into
// its graph, fuses them into the loops around them and differentiates them with their own
// rules (an fg::function: its forward's ops, and its own backward); compiled autograd records
// them where a backward rule applies them; a compiled function holding a user op, called inside
// fg::jit, is traced into the surrounding graph. Every result is compared bit for bit with
// eager mode, gradients also against finite differences (gradcheck, double).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

namespace {

// softsign(x) = x / (1 + |x|), whose derivative is 1 / (1 + |x|)^2: written once for scalars,
// SIMD batches and, in its rule, any algebra of values.
struct softsign_op {
  static constexpr std::string_view name = "softsign", grad_fn = "SoftsignBackward";
  template <class V>
  V value(const V& x) const {
    using std::abs;
    using xsimd::abs;
    return x / (abs(x) + V(1));
  }
  template <class V>
  auto derivative(const V& x, const V&, const V& g) const {
    const auto d = fg::abs(x) + 1.0;
    return g / (d * d);
  }
};

// a + s * b, an op with state (one scalar of the element type, as the built-in scalar ops).
template <class T>
struct scaled_add_op {
  T s;
  static constexpr std::string_view name = "scaled_add", grad_fn = "ScaledAddBackward";
  static constexpr bool uses_input = false, uses_output = false;
  template <class V>
  V value(const V& a, const V& b) const {
    return a + V(s) * b;
  }
  template <class V>
  auto da(const V&, const V&, const V&, const V& g) const {
    return g;
  }
  template <class V>
  auto db(const V&, const V&, const V&, const V& g) const {
    return g * s;
  }
};

// cube(x) = x^3, whose rule applies another user op (softsign's derivative would do; here
// square_user), so that a traced backward meets a user op too.
struct square_user_op {
  static constexpr std::string_view name = "square_user", grad_fn = "SquareUserBackward";
  template <class V>
  V value(const V& x) const {
    return x * x;
  }
  template <class V>
  auto derivative(const V& x, const V&, const V& g) const {
    return g * x * 2.0;
  }
};
struct cube_op {
  static constexpr std::string_view name = "cube", grad_fn = "CubeBackward";
  template <class V>
  V value(const V& x) const {
    return x * x * x;
  }
  template <class V>
  auto derivative(const V& x, const V&, const V& g) const {
    return g * fg::apply_op(square_user_op{}, x) * 3.0;
  }
};

// An op whose state the IR cannot hold (two scalars): computed eagerly, a graph break.
struct affine_op {
  float a, b;
  static constexpr std::string_view name = "affine", grad_fn = "AffineBackward";
  template <class V>
  V value(const V& x) const {
    return V(a) * x + V(b);
  }
  template <class V>
  auto derivative(const V&, const V&, const V& g) const {
    return g * a;
  }
};

// A rule that makes a tensor of its own: a run-time graph cannot hold it.
struct own_tensor_op {
  static constexpr std::string_view name = "own_tensor", grad_fn = "OwnTensorBackward";
  template <class V>
  V value(const V& x) const {
    return x + x;
  }
  template <class V>
  auto derivative(const V& x, const V&, const V& g) const {
    return g * fg::ones_like(x) * 2.0;
  }
};

template <class T>
auto user_function(const fg::tensor<T>& x, const fg::tensor<T>& y) {
  return fg::apply_op(scaled_add_op<T>{T(0.5)}, fg::apply_op(softsign_op{}, x * x), fg::sin(y)) * y;
}

template <class T>
std::vector<T> grad_of(const fg::tensor<T>& x) {
  return x.grad().to_vector();
}

/// `jf` (a jitted `eager`) against `eager` on fresh leaves of shape `s`: values and gradients
/// bitwise equal.
template <class T, class J, class E>
void same_bits(J& jf, E eager, const fg::shape& s) {
  CAPTURE(fg::to_string(s));
  fg::tensor<T> x = fg::randn<T>(s, 1).requires_grad(true), y = fg::randn<T>(s, 2).requires_grad(true);
  const fg::tensor<T> want = eager(x, y);
  fg::sum(want * want).backward();
  const auto gx = grad_of(x), gy = grad_of(y);
  x.zero_grad();
  y.zero_grad();
  const fg::tensor<T> got = jf(x, y);
  fg::sum(got * got).backward();
  CHECK(got.to_vector() == want.to_vector());
  CHECK(grad_of(x) == gx);
  CHECK(grad_of(y) == gy);
}

std::uint64_t breaks() { return fg::counters().graph_breaks; }

}  // namespace

TEST_CASE_TEMPLATE("a user's element-wise op under fg::jit: traced, fused, differentiated by its rule", T, float,
                   double) {
  auto jf =
      fg::jit([](const fg::tensor<T>& x, const fg::tensor<T>& y) { return user_function(x, y); }, {.fullgraph = true});
  const std::uint64_t breaks_before = breaks();
  for (const fg::shape& s : {fg::shape{7}, fg::shape{1000}, fg::shape{33, 5}, fg::shape{9}})
    same_bits<T>(jf, user_function<T>, s);
  CHECK(breaks() == breaks_before);  // fullgraph would have thrown; no break either
  // The graph names the ops, and every node runs in a tile loop (no eager step).
  const auto entries = jf.entries();
  REQUIRE(!entries.empty());
  for (const fg::jit_entry_info& e : entries) {
    CHECK(e.graph.find("softsign(") != std::string::npos);
    CHECK(e.graph.find("scaled_add(") != std::string::npos);
    CHECK(e.graph.find(", 0.5)") != std::string::npos);  // the op's state, a constant of the graph
    CHECK(e.code.find("eager") == std::string::npos);
  }
}

TEST_CASE("a jitted function with user ops passes gradcheck") {
  auto jf = fg::jit([](const fg::tensor<double>& x, const fg::tensor<double>& y) { return user_function(x, y); });
  const auto r = fg::gradcheck([&](const auto& x, const auto& y) { return jf(x, y); }, fg::randn<double>({4, 3}, 5),
                               fg::randn<double>({4, 3}, 6));
  CHECK_MESSAGE(static_cast<bool>(r), r.message);
}

TEST_CASE("a compiled function holding a user op, called inside fg::jit, is traced into its graph") {
  auto cf = fg::compile([](auto x, auto y) { return fg::apply_op(softsign_op{}, x) * y; });
  auto jf = fg::jit([&](const fg::tensor<float>& x, const fg::tensor<float>& y) { return fg::cos(cf(x, y)); },
                    {.fullgraph = true});
  fg::tensor<float> x = fg::randn<float>({100}, 1).requires_grad(true),
                    y = fg::randn<float>({100}, 2).requires_grad(true);
  const fg::tensor<float> want = fg::cos(fg::apply_op(softsign_op{}, x) * y);
  fg::sum(want).backward();
  const auto gx = grad_of(x), gy = grad_of(y);
  x.zero_grad();
  y.zero_grad();
  const fg::tensor<float> got = jf(x, y);
  fg::sum(got).backward();
  CHECK(got.to_vector() == want.to_vector());
  CHECK(grad_of(x) == gx);
  CHECK(grad_of(y) == gy);
  const auto entries = jf.entries();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].graph.find("softsign(") != std::string::npos);
}

TEST_CASE("compiled autograd records a user op that a backward rule applies") {
  fg::tensor<double> x = fg::randn<double>({64}, 3).requires_grad(true);
  const fg::tensor<double> want = fg::apply_op(cube_op{}, fg::cos(x));
  fg::sum(want).backward();
  const auto gx = grad_of(x);
  const std::uint64_t breaks_before = breaks(), captures_before = fg::counters().compiled_autograd_captures;
  fg::compiled_autograd::enable scope(fg::backend::fused{/*fullgraph=*/true});
  for (int i = 0; i < 3; ++i) {
    x.zero_grad();
    fg::sum(fg::apply_op(cube_op{}, fg::cos(x))).backward();
    CHECK(grad_of(x) == gx);
  }
  CHECK(breaks() == breaks_before);
  CHECK(fg::counters().compiled_autograd_captures == captures_before + 1);
}

TEST_CASE("a user op's rule under fg::jit may apply user ops; one the IR cannot hold is a named graph break") {
  auto jf =
      fg::jit([](const fg::tensor<double>& x) { return fg::apply_op(cube_op{}, fg::cos(x)); }, {.fullgraph = true});
  fg::tensor<double> x = fg::randn<double>({10}, 4).requires_grad(true);
  const fg::tensor<double> want = fg::apply_op(cube_op{}, fg::cos(x));
  fg::sum(want).backward();
  const auto gx = grad_of(x);
  x.zero_grad();
  const fg::tensor<double> got = jf(x);
  fg::sum(got).backward();
  CHECK(got.to_vector() == want.to_vector());
  CHECK(grad_of(x) == gx);

  auto with_affine = fg::jit(
      [](const fg::tensor<float>& v) {
        return fg::apply_op(affine_op{2, 1}, fg::cos(v));
      },
      {.fullgraph = true});
  CHECK_THROWS_WITH_AS(with_affine(fg::ones<float>({3})),
                       doctest::Contains("the op 'affine' (not captured by the tracer)"), fg::error);
  auto split = fg::jit([](const fg::tensor<float>& v) { return fg::apply_op(affine_op{2, 1}, fg::cos(v)); });
  const auto v = fg::randn<float>({5}, 1);
  CHECK(split(v).to_vector() == fg::apply_op(affine_op{2, 1}, fg::cos(v)).to_vector());
}

TEST_CASE("a user op's rule that makes a tensor of its own is an error naming the op under fg::jit") {
  auto jf = fg::jit([](const fg::tensor<double>& x) { return fg::apply_op(own_tensor_op{}, x); });
  const fg::tensor<double> x = fg::randn<double>({6}, 4).requires_grad(true);
  CHECK_THROWS_WITH_AS(fg::sum(jf(x)).backward(), doctest::Contains("the derivative rule of the user op 'own_tensor'"),
                       fg::error);
  // Eagerly the rule runs on computed tensors, as ever.
  fg::sum(fg::apply_op(own_tensor_op{}, x)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>(6, 2.0));
}

namespace {
// softclip(x) = x / (1 + |x|) as an fg::function: its backward is its own (not derived).
struct Softclip {
  static constexpr std::string_view name = "SoftclipBackward";
  static auto forward(const auto& x) { return x / (fg::abs(x) + 1.0); }
  static auto backward(const auto& saved, const auto& grad) {
    const auto& [x] = saved;
    const auto d = fg::abs(x) + 1.0;
    return grad / (d * d);
  }
};
// Two inputs; saves its output and a value computed when saving (after the output).
struct Product {
  static constexpr std::string_view name = "ProductBackward";
  static inline int setups = 0;
  static auto forward(const auto& a, const auto& b) { return a * b; }
  static auto setup_context(const auto& a, const auto& b, const auto& out) {
    ++setups;
    return fg::save_for_backward(a, b, out, b * 2.0);
  }
  static auto backward(const auto& saved, const auto& g) {
    const auto& [a, b, out, twice_b] = saved;
    return std::tuple{g * twice_b * 0.5 + out * 0.0, g * a};
  }
};
// A backward that is not the forward's derivative (a straight-through estimator): only the
// function's own backward gives these gradients, so deriving the forward would be caught.
struct StraightRound {
  static constexpr std::string_view name = "StraightRoundBackward";
  static auto forward(const auto& x) { return fg::round(x); }
  static auto setup_context(const auto&, const auto&) { return fg::save_for_backward(); }
  static auto backward(const auto&, const auto& g) { return g; }
};
// The identity: its output is its input's node.
struct Same {
  static constexpr std::string_view name = "SameBackward";
  static auto forward(const auto& x) { return x; }
  static auto backward(const auto&, const auto& g) { return g * 3.0; }
};

template <class T>
fg::tensor<T> function_graph(const fg::tensor<T>& x, const fg::tensor<T>& y) {
  const fg::tensor<T> s = fg::function<Softclip>::apply(fg::cos(x));
  const fg::tensor<T> p = fg::function<Product>::apply(s, y);
  return fg::function<StraightRound>::apply(p * 3.0) + fg::function<Same>::apply(y) * x;
}

}  // namespace

TEST_CASE_TEMPLATE("a user's fg::function under fg::jit: its forward traced and fused, its own backward", T, float,
                   double) {
  auto jf =
      fg::jit([](const fg::tensor<T>& x, const fg::tensor<T>& y) { return function_graph(x, y); }, {.fullgraph = true});
  const std::uint64_t breaks_before = breaks();
  const int setups_before = Product::setups;
  for (const fg::shape& s : {fg::shape{7}, fg::shape{1000}, fg::shape{33, 5}, fg::shape{9}})
    same_bits<T>(jf, function_graph<T>, s);
  CHECK(breaks() == breaks_before);
  CHECK(Product::setups == setups_before + 8);  // once per call, eagerly and traced, as eager mode runs it
  const auto entries = jf.entries();
  REQUIRE(!entries.empty());
  for (const fg::jit_entry_info& e : entries) {
    CHECK(e.graph.find("function 'SoftclipBackward'") != std::string::npos);
    CHECK(e.graph.find("function 'ProductBackward'") != std::string::npos);
    CHECK(e.code.find("eager") == std::string::npos);
  }
  // Without grad, setup_context is not asked, as eagerly.
  const int setups = Product::setups;
  {
    fg::no_grad off;
    const auto x = fg::randn<T>({5}, 1), y = fg::randn<T>({5}, 2);
    CHECK(jf(x, y).to_vector() == function_graph(x, y).to_vector());
  }
  CHECK(Product::setups == setups);
}

// An fg::function whose output needs no grad (its input is detached) beside a value that does,
// in one jitted graph: the backward from `c - x` reaches the function's node, whose
// setup_context never ran; no gradient flows through it, as eagerly. (Found by the fuzzer:
// the function's backward ran on an empty list of saved tensors.)
TEST_CASE("regression: a jitted fg::function whose output needs no grad, read by a value that does") {
  auto program = [](const fg::tensor<double>& x) {
    const fg::tensor<double> c = fg::function<Softclip>::apply(x.detach());
    return std::vector<fg::tensor<double>>{c - x, c};
  };
  auto jf = fg::jit(program);
  for (int call = 0; call < 2; ++call) {
    const auto xe = fg::randn<double>({8}, 3).requires_grad(true), xj = xe.detach().requires_grad(true);
    const auto want = program(xe), got = jf(xj);
    CHECK(!got[1].requires_grad());
    CHECK(got[0].to_vector() == want[0].to_vector());
    CHECK(got[1].to_vector() == want[1].to_vector());
    fg::sum(want[0] * 2.0).backward();
    fg::sum(got[0] * 2.0).backward();
    CHECK(xj.grad().to_vector() == xe.grad().to_vector());
  }
}

TEST_CASE("a jitted fg::function runs node by node on the eager backend, with its tape node") {
  auto jf = fg::jit([](const fg::tensor<double>& x, const fg::tensor<double>& y) { return function_graph(x, y); },
                    {.backend = fg::jit_backend::eager});
  same_bits<double>(jf, function_graph<double>, fg::shape{6, 2});
}

TEST_CASE("a jitted function with fg::functions passes gradcheck") {
  auto jf = fg::jit([](const fg::tensor<double>& x, const fg::tensor<double>& y) {
    return fg::function<Product>::apply(fg::function<Softclip>::apply(fg::cos(x)), y);
  });
  const auto r = fg::gradcheck([&](const auto& x, const auto& y) { return jf(x, y); }, fg::randn<double>({4, 3}, 5),
                               fg::randn<double>({4, 3}, 6));
  CHECK_MESSAGE(static_cast<bool>(r), r.message);
}

TEST_CASE("compiled autograd over a jitted fg::function and an eager one: one capture, eager's gradients") {
  auto jf = fg::jit([](const fg::tensor<double>& x, const fg::tensor<double>& y) { return function_graph(x, y); });
  fg::tensor<double> x = fg::randn<double>({40}, 3).requires_grad(true),
                     y = fg::randn<double>({40}, 4).requires_grad(true);
  fg::sum(fg::function<Softclip>::apply(function_graph(x, y))).backward();
  const auto gx = grad_of(x), gy = grad_of(y);
  const std::uint64_t breaks_before = breaks(), captures_before = fg::counters().compiled_autograd_captures;
  fg::compiled_autograd::enable scope(fg::backend::fused{/*fullgraph=*/true});
  for (int i = 0; i < 3; ++i) {
    x.zero_grad();
    y.zero_grad();
    fg::sum(fg::function<Softclip>::apply(jf(x, y))).backward();
    CHECK(grad_of(x) == gx);
    CHECK(grad_of(y) == gy);
  }
  CHECK(breaks() == breaks_before);
  CHECK(fg::counters().compiled_autograd_captures == captures_before + 1);
}

TEST_CASE("gradcheck under compiled autograd: user ops and fg::functions in the captured backward") {
  fg::compiled_autograd::enable scope;
  const std::uint64_t captures_before = fg::counters().compiled_autograd_captures;
  const auto r = fg::gradcheck(
      [](const auto& x, const auto& y) {
        return fg::function<Product>::apply(fg::apply_op(cube_op{}, fg::function<Softclip>::apply(fg::cos(x))), y);
      },
      fg::randn<double>({3, 2}, 7), fg::randn<double>({3, 2}, 8));
  CHECK_MESSAGE(static_cast<bool>(r), r.message);
  CHECK(fg::counters().compiled_autograd_captures > captures_before);
}
