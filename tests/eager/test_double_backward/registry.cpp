// test_double_backward: every differentiable op of the registry (and gradgradcheck of the
// structured registry's): gradgradcheck, and second derivatives against closed forms.
#include "helpers.hpp"

TEST_CASE("double backward: gradgradcheck of every differentiable op of the registry") {
  int checked = 0;
  for_each(registry(), [&](const auto& e) {
    if (e.derivative == "none") return;
    const std::string op(e.name);
    CAPTURE(op);
    const auto h = projected_gradient(fn_of<double>(e));
    for (const auto& ss : small_shape_classes<std::remove_cvref_t<decltype(e)>::arity>()) {
      const std::string shapes_ = str(ss);
      CAPTURE(shapes_);
      const auto x = smooth_inputs(e, ss, 21);
      const auto r = call([&](const auto&... xs) { return fg::gradcheck(second, h, xs...); }, x);
      CHECK_MESSAGE(r.ok, r.message);
    }
    ++checked;
  });
  CHECK(checked > 50);
}

// The second table (reductions, the softmax family, scans, structure ops, linear algebra):
// every differentiable entry's backward is differentiable again (failed on every op whose
// rule was a kernel: "double backward through CumsumBackward0 is not implemented").
TEST_CASE("double backward: gradgradcheck of every differentiable op of the structured registry") {
  int checked = 0;
  for_each(structured(), [&](const auto& e) {
    if (!e.differentiable) return;
    const std::string op(e.name);
    CAPTURE(op);
    using info = std::remove_cvref_t<decltype(e)>;
    // sin of the op: the gradient reaching the op's backward has a history of its own, so a
    // linear op's (cumsum, gather) backward is differentiated too.
    const auto h = projected_gradient([f = fn_of<double>(e)](const auto&... xs) { return fg::sin(f(xs...)); });
    for (const auto& ss : e.shapes) {
      const std::string shapes_ = str(ss);
      CAPTURE(shapes_);
      tensors<double, info::arity> x;
      for (std::size_t k = 0; k < info::arity; ++k)
        x[k] = to_tensor<double>(sample_values(e.dom[k], ss[k], 21 + 13 * k), ss[k]);
      try {
        const auto r = call([&](const auto&... xs) { return fg::gradcheck(second, h, xs...); }, x);
        CHECK_MESSAGE(r.ok, r.message);
      } catch (const fg::error& err) { FAIL_CHECK(std::string(err.what())); }
    }
    ++checked;
  });
  CHECK(checked >= 30);
}

namespace {
/// The Hessian of one element of an element-wise op in its operands (row-major, arity²).
using hessian_form = std::vector<long double> (*)(const long double* v);
using L = long double;
constexpr L sqrt_pi = 1.772453850905516027298167483341145182L, ln2l = 0.693147180559945309417232121458176568L;
L sigm(L x) { return 1 / (1 + std::exp(-x)); }
std::vector<L> zero1(const L*) { return {0}; }
std::vector<L> zero2(const L*) { return {0, 0, 0, 0}; }
std::vector<L> zero3(const L*) { return std::vector<L>(9, 0); }

/// Every differentiable op of the registry: its second derivatives in closed form.
const std::map<std::string, hessian_form>& closed_hessians() {
  static const std::map<std::string, hessian_form> m = {
      {"neg", zero1},
      {"add", zero2},
      {"sub", zero2},
      {"add_scalar", zero1},
      {"rsub_scalar", zero1},
      {"mul_scalar", zero1},
      {"div_scalar", zero1},
      {"pow_scalar_0", zero1},
      {"abs", zero1},
      {"relu", zero1},
      {"floor", zero1},
      {"ceil", zero1},
      {"round", zero1},
      {"trunc", zero1},
      {"clamp", zero1},
      {"clamp_reversed", zero1},
      {"clamp_min", zero1},
      {"clamp_max", zero1},
      {"fmod_scalar", zero1},
      {"maximum", zero2},
      {"minimum", zero2},
      {"fmod", zero2},
      {"lerp_scalar", zero2},
      {"lerp_scalar_high", zero2},
      {"where_scalar_b", zero2},
      {"where_scalar_a", zero2},
      {"masked_fill", zero2},
      {"where", zero3},
      {"mul",
       [](const L*) -> std::vector<L> {
         return {0, 1, 1, 0};
       }},
      // a (1 - b²) and a b (1 - b): tanh's and sigmoid's gradients from their outputs
      {"tanh_backward",
       [](const L* v) -> std::vector<L> {
         const L a = v[0], b = v[1];
         return {0, -2 * b, -2 * b, -2 * a};
       }},
      {"sigmoid_backward",
       [](const L* v) -> std::vector<L> {
         const L a = v[0], b = v[1];
         return {0, 1 - 2 * b, 1 - 2 * b, -2 * a};
       }},
      {"div",
       [](const L* v) -> std::vector<L> {
         const L a = v[0], b = v[1];
         return {0, -1 / (b * b), -1 / (b * b), 2 * a / (b * b * b)};
       }},
      {"pow",
       [](const L* v) -> std::vector<L> {
         const L a = v[0], b = v[1], la = std::log(a);
         const L ab = std::pow(a, b - 1) * (1 + b * la);
         return {b * (b - 1) * std::pow(a, b - 2), ab, ab, std::pow(a, b) * la * la};
       }},
      {"atan2",
       [](const L* v) -> std::vector<L> {
         const L a = v[0], b = v[1], r = a * a + b * b;
         return {-2 * a * b / (r * r), (a * a - b * b) / (r * r), (a * a - b * b) / (r * r), 2 * a * b / (r * r)};
       }},
      {"hypot",
       [](const L* v) -> std::vector<L> {
         const L a = v[0], b = v[1], y3 = std::pow(a * a + b * b, 1.5L);
         return {b * b / y3, -a * b / y3, -a * b / y3, a * a / y3};
       }},
      // lerp(a, b, w) with the weight first among the operands: f = a + w (b - a).
      {"lerp", [](const L*) -> std::vector<L> { return {0, -1, 1, -1, 0, 0, 1, 0, 0}; }},
      {"rdiv_scalar", [](const L* v) -> std::vector<L> { return {5 / (v[0] * v[0] * v[0])}; }},
      {"square", [](const L*) -> std::vector<L> { return {2}; }},
      {"pow_scalar_2", [](const L*) -> std::vector<L> { return {2}; }},
      {"reciprocal", [](const L* v) -> std::vector<L> { return {2 / (v[0] * v[0] * v[0])}; }},
      {"sqrt", [](const L* v) -> std::vector<L> { return {-0.25L * std::pow(v[0], -1.5L)}; }},
      {"pow_scalar_half", [](const L* v) -> std::vector<L> { return {-0.25L * std::pow(v[0], -1.5L)}; }},
      {"rsqrt", [](const L* v) -> std::vector<L> { return {0.75L * std::pow(v[0], -2.5L)}; }},
      {"exp", [](const L* v) -> std::vector<L> { return {std::exp(v[0])}; }},
      {"expm1", [](const L* v) -> std::vector<L> { return {std::exp(v[0])}; }},
      {"exp2", [](const L* v) -> std::vector<L> { return {std::exp2(v[0]) * ln2l * ln2l}; }},
      {"log", [](const L* v) -> std::vector<L> { return {-1 / (v[0] * v[0])}; }},
      {"log1p", [](const L* v) -> std::vector<L> { return {-1 / ((1 + v[0]) * (1 + v[0]))}; }},
      {"log2", [](const L* v) -> std::vector<L> { return {-1 / (v[0] * v[0] * ln2l)}; }},
      {"sin", [](const L* v) -> std::vector<L> { return {-std::sin(v[0])}; }},
      {"cos", [](const L* v) -> std::vector<L> { return {-std::cos(v[0])}; }},
      {"tan",
       [](const L* v) -> std::vector<L> {
         const L t = std::tan(v[0]);
         return {2 * t * (1 + t * t)};
       }},
      {"asin", [](const L* v) -> std::vector<L> { return {v[0] / std::pow(1 - v[0] * v[0], 1.5L)}; }},
      {"acos", [](const L* v) -> std::vector<L> { return {-v[0] / std::pow(1 - v[0] * v[0], 1.5L)}; }},
      {"atan", [](const L* v) -> std::vector<L> { return {-2 * v[0] / ((1 + v[0] * v[0]) * (1 + v[0] * v[0]))}; }},
      {"tanh",
       [](const L* v) -> std::vector<L> {
         const L t = std::tanh(v[0]);
         return {-2 * t * (1 - t * t)};
       }},
      {"sinh", [](const L* v) -> std::vector<L> { return {std::sinh(v[0])}; }},
      {"cosh", [](const L* v) -> std::vector<L> { return {std::cosh(v[0])}; }},
      {"asinh", [](const L* v) -> std::vector<L> { return {-v[0] / std::pow(v[0] * v[0] + 1, 1.5L)}; }},
      {"acosh", [](const L* v) -> std::vector<L> { return {-v[0] / std::pow(v[0] * v[0] - 1, 1.5L)}; }},
      {"atanh", [](const L* v) -> std::vector<L> { return {2 * v[0] / ((1 - v[0] * v[0]) * (1 - v[0] * v[0]))}; }},
      {"erf", [](const L* v) -> std::vector<L> { return {-4 * v[0] / sqrt_pi * std::exp(-v[0] * v[0])}; }},
      {"erfc", [](const L* v) -> std::vector<L> { return {4 * v[0] / sqrt_pi * std::exp(-v[0] * v[0])}; }},
      {"lgamma", [](const L* v) -> std::vector<L> { return {opinfo::ref::polygamma(1, v[0])}; }},
      {"digamma", [](const L* v) -> std::vector<L> { return {opinfo::ref::polygamma(2, v[0])}; }},
      {"polygamma_1", [](const L* v) -> std::vector<L> { return {opinfo::ref::polygamma(3, v[0])}; }},
      {"polygamma_2", [](const L* v) -> std::vector<L> { return {opinfo::ref::polygamma(4, v[0])}; }},
      {"sigmoid",
       [](const L* v) -> std::
                          vector<L> {
                            const L s = sigm(v[0]);
                            return {s * (1 - s) * (1 - 2 * s)};
                          }},
      {"softplus",
       [](const L* v) -> std::
                          vector<L> {
                            const L s = sigm(v[0]);
                            return {v[0] > 20 ? 0 : s * (1 - s)};
                          }},
      {"silu",
       [](const L* v) -> std::
                          vector<L> {
                            const L s = sigm(v[0]);
                            return {s * (1 - s) * (2 + v[0] * (1 - 2 * s))};
                          }},
      {"gelu",
       [](const L* v) -> std::
                          vector<L> {
                            const L phi = std::exp(-v[0] * v[0] / 2) / (std::sqrt(2.0L) * sqrt_pi);
                            return {phi * (2 - v[0] * v[0])};
                          }},
  };
  return m;
}
}  // namespace

TEST_CASE("double backward: every differentiable op of the registry against its closed-form second derivatives") {
  // The reference's own check: ψ'' by the general series equals the dedicated one.
  for (L x : {0.6L, 1.7L, 3.9L})
    CHECK(static_cast<double>(opinfo::ref::polygamma(2, x)) ==
          doctest::Approx(static_cast<double>(opinfo::ref::tetragamma(x))).epsilon(1e-14));
  int checked = 0;
  for_each(registry(), [&](const auto& e) {
    if (e.derivative == "none") return;
    constexpr std::size_t N = std::remove_cvref_t<decltype(e)>::arity;
    const std::string op(e.name);
    CAPTURE(op);
    const auto it = closed_hessians().find(op);
    if (it == closed_hessians().end()) {
      FAIL_CHECK("no closed-form second derivative for " << op << " (add one to closed_hessians)");
      return;
    }
    shapes<N> ss;
    ss.fill(fg::shape{9});
    auto x = smooth_inputs(e, ss, 5);
    std::vector<td> in;
    for (auto& t : x) in.push_back(t.requires_grad(true));
    const td y = fg::sum(call(fn_of<double>(e), x));
    const auto g = fg::autograd::grad({y}, in, {.create_graph = true, .allow_unused = true});
    std::array<std::vector<td>, N> h;  // h[k][l]: d(sum g_k)/dx_l, element-wise the Hessian's (k, l) entry
    for (std::size_t k = 0; k < N; ++k)
      if (g[k].defined() && g[k].requires_grad())
        h[k] = fg::autograd::grad({fg::sum(g[k])}, in, {.retain_graph = true, .allow_unused = true});
    for (index_t i = 0; i < 9; ++i) {
      L v[N];
      for (std::size_t k = 0; k < N; ++k) v[k] = x[k].at({i});
      const std::vector<L> want = it->second(v);
      REQUIRE(want.size() == N * N);
      for (std::size_t k = 0; k < N; ++k)
        for (std::size_t l = 0; l < N; ++l) {
          const double got = h[k].empty() || !h[k][l].defined() ? 0.0 : h[k][l].at({i});
          const double w = static_cast<double>(want[k * N + l]);
          CHECK_MESSAGE(std::abs(got - w) <= 1e-9 * std::max(1.0, std::abs(w)),
                        "element " << i << " (x = " << static_cast<double>(v[0]) << "), entry (" << k << ", " << l
                                   << "): got " << got << ", expected " << w);
        }
    }
    ++checked;
  });
  CHECK(checked > 60);
}
