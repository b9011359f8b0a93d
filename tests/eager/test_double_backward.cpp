// Double backward on the eager tape: `fg::autograd::grad` and `backward({.create_graph = true})`
// return gradients that are on the tape themselves.
//  - every differentiable op of the registry: gradgradcheck, i.e. gradcheck of the function
//    x -> <grad f(x), w>, whose analytic derivative is the double backward;
//  - second derivatives against closed forms;
//  - the structure ops' and matmul's backward rules differentiated again;
//  - rules that are not differentiable give a clear error when a second backward reaches them;
//  - autograd::grad's own contract (no .grad() written, unused inputs, hooks, errors).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "opinfo/harness.hpp"
#include "opinfo/references.hpp"
#include "opinfo/registry.hpp"
#include "opinfo/structured.hpp"

namespace {
using namespace opinfo;
using td = fg::tensor<double>;

/// Fixed weights of a shape (the direction the gradient is projected on).
td weights(const fg::shape& s, double seed) {
  std::vector<double> v(static_cast<std::size_t>(count(s)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5 + 0.37 * std::sin(seed + 1.3 * static_cast<double>(i));
  return fg::from_vector<double>(v, s);
}

/// x -> sum_k <d sum(f(x)) / d x_k, w_k>: its gradient is the Hessian of sum(f) times w.
template <class F>
auto projected_gradient(F f) {
  return [f](const auto&... xs) {
    fg::enable_grad on;  // gradcheck's finite differences run under no_grad: this needs the first gradient
    std::vector<td> in{xs...};
    const td y = fg::sum(f(xs...));
    const auto g = fg::autograd::grad({y}, in, {.create_graph = true, .allow_unused = true});
    td s = y * 0.0;
    for (std::size_t k = 0; k < in.size(); ++k)
      if (g[k].defined()) s = s + fg::sum(g[k] * weights(in[k].shape(), static_cast<double>(k)));
    return s;
  };
}

template <std::size_t N>
std::vector<shapes<N>> small_shape_classes() {
  auto same = [](fg::shape s) {
    shapes<N> r;
    r.fill(s);
    return r;
  };
  std::vector<shapes<N>> r = {same({}), same({1}), same({7}), same({3, 4}), same({0})};
  if constexpr (N == 2) {
    r.push_back({fg::shape{3, 1}, fg::shape{1, 4}});
    r.push_back({fg::shape{4}, fg::shape{}});
  } else if constexpr (N == 3) {
    r.push_back({fg::shape{3, 1}, fg::shape{1, 4}, fg::shape{}});
  }
  return r;
}

constexpr fg::gradcheck_options second{.eps = 1e-6, .atol = 1e-5, .rtol = 1e-4};

td vec(std::vector<double> v) { return fg::from_vector<double>(std::move(v)).requires_grad(true); }
}  // namespace

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

namespace {
/// A second directional derivative in closed form: d²/dt² Σ w ⊙ f(x + t h) at t = 0, from the
/// values of x, h and w (closed forms evaluated with plain, unrecorded tensors and loops).
template <std::size_t N>
using second_form = std::function<double(const std::array<td, N>& x, const std::array<td, N>& h, const td& w)>;

std::vector<double> vals(const td& t) { return t.detach().contiguous().to_vector(); }
/// Row-wise along the last dim: f(row of x, row of h) summed with the weights of each row.
double by_rows(const td& x, const td& h, const td& w,
               const std::function<double(const std::vector<double>&, const std::vector<double>&, std::size_t row,
                                          const std::vector<double>& w)>& f) {
  const auto xv = vals(x), hv = vals(h), wv = vals(w);
  const std::size_t c = x.dim() ? static_cast<std::size_t>(x.shape().back()) : 1, rows = xv.size() / c;
  double q = 0;
  for (std::size_t r = 0; r < rows; ++r)
    q += f(std::vector<double>(xv.begin() + static_cast<std::ptrdiff_t>(r * c),
                               xv.begin() + static_cast<std::ptrdiff_t>((r + 1) * c)),
           std::vector<double>(hv.begin() + static_cast<std::ptrdiff_t>(r * c),
                               hv.begin() + static_cast<std::ptrdiff_t>((r + 1) * c)),
           r, wv);
  return q;
}
double dotv(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
/// Σ_{i≠j} h_i h_j Π_{k≠i,j, k<n} x_k: the second directional derivative of a product of n factors.
double prod_second(const std::vector<double>& x, const std::vector<double>& h, std::size_t n) {
  double q = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      double p = h[i] * h[j];
      for (std::size_t k = 0; k < n; ++k)
        if (k != i && k != j) p *= x[k];
      q += p;
    }
  return q;
}
double total(const td& t) { return fg::sum(t.detach()).item(); }
td shifted(const td& a) { return a.detach() + fg::eye<double>(a.shape()[0]) * 3.0; }

/// The structured registry's ops: linear ones (their second derivative is that of sin over
/// them, -sin(f(x)) f(h)², f(h) exact by linearity) and the others' closed forms.
const std::map<std::string, second_form<1>>& unary_seconds() {
  using A = std::array<td, 1>;
  static const std::map<std::string, second_form<1>> m = {
      {"logsumexp",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto& xr, const auto& hr, std::size_t r, const auto& wv) {
           const td p = fg::softmax(fg::from_vector<double>(xr), 0);
           const auto pv = vals(p);
           const double m1 = dotv(pv, hr);
           double m2 = 0;
           for (std::size_t i = 0; i < hr.size(); ++i) m2 += pv[i] * hr[i] * hr[i];
           return wv[r] * (m2 - m1 * m1);  // Σ p h² - (Σ p h)²
         });
       }},
      {"softmax",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           const auto sv = vals(fg::softmax(fg::from_vector<double>(xr), 0));
           const double m1 = dotv(sv, hr);
           double v = 0;
           for (std::size_t j = 0; j < hr.size(); ++j) v += sv[j] * (hr[j] - m1) * hr[j];
           double q = 0;
           for (std::size_t i = 0; i < hr.size(); ++i) q += wv[r * c + i] * sv[i] * ((hr[i] - m1) * (hr[i] - m1) - v);
           return q;  // d²s_i = s_i ((h_i - m)² - Σ s_j (h_j - m) h_j)
         });
       }},
      {"log_softmax",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           const auto pv = vals(fg::softmax(fg::from_vector<double>(xr), 0));
           const double m1 = dotv(pv, hr);
           double m2 = 0, ws = 0;
           for (std::size_t i = 0; i < hr.size(); ++i) {
             m2 += pv[i] * hr[i] * hr[i];
             ws += wv[r * c + i];
           }
           return -ws * (m2 - m1 * m1);
         });
       }},
      {"layer_norm",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           // y_i = d_i v^(-1/2), d = x - mean x, v = mean d² + eps; along h, d moves by e = h - mean h.
           const double n = static_cast<double>(xr.size());
           double xb = 0, hb = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) xb += xr[i] / n, hb += hr[i] / n;
           double v = 1e-5, dv = 0, d2v = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) {
             const double d = xr[i] - xb, e = hr[i] - hb;
             v += d * d / n, dv += 2 * d * e / n, d2v += 2 * e * e / n;
           }
           const double ds = -0.5 * std::pow(v, -1.5) * dv,
                        d2s = 0.75 * std::pow(v, -2.5) * dv * dv - 0.5 * std::pow(v, -1.5) * d2v;
           double q = 0;
           for (std::size_t i = 0; i < xr.size(); ++i)
             q += wv[r * c + i] * (2 * (hr[i] - hb) * ds + (xr[i] - xb) * d2s);
           return q;
         });
       }},
      {"rms_norm",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           // y_i = x_i q^(-1/2), q = mean x² + eps.
           const double n = static_cast<double>(xr.size());
           double q = 1e-6, dq = 0, d2q = 0;
           for (std::size_t i = 0; i < xr.size(); ++i)
             q += xr[i] * xr[i] / n, dq += 2 * xr[i] * hr[i] / n, d2q += 2 * hr[i] * hr[i] / n;
           const double ds = -0.5 * std::pow(q, -1.5) * dq,
                        d2s = 0.75 * std::pow(q, -2.5) * dq * dq - 0.5 * std::pow(q, -1.5) * d2q;
           double t = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) t += wv[r * c + i] * (2 * hr[i] * ds + xr[i] * d2s);
           return t;
         });
       }},
      {"min", [](const A&, const A&, const td&) { return 0.0; }},
      {"amax", [](const A&, const A&, const td&) { return 0.0; }},
      {"amin_all", [](const A&, const A&, const td&) { return 0.0; }},
      {"norm1", [](const A&, const A&, const td&) { return 0.0; }},
      {"norm_inf", [](const A&, const A&, const td&) { return 0.0; }},
      {"var",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto&, const auto& hr, std::size_t r, const auto& wv) {
           const double n = static_cast<double>(hr.size());
           double hb = 0, q = 0;
           for (double v : hr) hb += v / n;
           for (double v : hr) q += (v - hb) * (v - hb);
           return wv[r] * 2 * q / (n - 1);
         });
       }},
      {"stddev",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto& xr, const auto& hr, std::size_t r, const auto& wv) {
           const double n = static_cast<double>(hr.size());
           double xb = 0, hb = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) {
             xb += xr[i] / n;
             hb += hr[i] / n;
           }
           double v = 0, dv = 0, d2v = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) {
             v += (xr[i] - xb) * (xr[i] - xb) / n;
             dv += 2 * (xr[i] - xb) * (hr[i] - hb) / n;
             d2v += 2 * (hr[i] - hb) * (hr[i] - hb) / n;
           }
           const double sd = std::sqrt(v);
           return wv[r] * (d2v / (2 * sd) - dv * dv / (4 * sd * sd * sd));
         });
       }},
      {"norm2",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto& xr, const auto& hr, std::size_t r, const auto& wv) {
           const double nr = std::sqrt(dotv(xr, xr)), xh = dotv(xr, hr);
           return wv[r] * (dotv(hr, hr) - xh * xh / (nr * nr)) / nr;
         });
       }},
      {"prod",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto& xr, const auto& hr, std::size_t r, const auto& wv) {
           return wv[r] * prod_second(xr, hr, xr.size());
         });
       }},
      {"cumprod",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           double q = 0;
           for (std::size_t k = 0; k < c; ++k) q += wv[r * c + k] * prod_second(xr, hr, k + 1);
           return q;
         });
       }},
      {"inverse",
       [](const A& x, const A& h, const td& w) {  // d²Y = 2 Y H Y H Y
         const td y = fg::inverse(shifted(x[0])), hh = h[0].detach();
         return 2 * total(fg::mm(fg::mm(fg::mm(fg::mm(y, hh), y), hh), y) * w);
       }},
      {"det",
       [](const A& x, const A& h, const td& w) {  // det ((tr YH)² - tr(YHYH))
         const td a = shifted(x[0]), y = fg::inverse(a), yh = fg::mm(y, h[0].detach());
         const double t = fg::trace(yh).item();
         return w.item() * fg::det(a).item() * (t * t - fg::trace(fg::mm(yh, yh)).item());
       }},
      {"logdet",
       [](const A& x, const A& h, const td& w) {  // -tr(YHYH)
         const td yh = fg::mm(fg::inverse(shifted(x[0])), h[0].detach());
         return -w.item() * fg::trace(fg::mm(yh, yh)).item();
       }},
      {"cholesky",
       [](const A& x, const A& h, const td& w) {
         // A = X Xᵀ + I: A' = H Xᵀ + X Hᵀ, A'' = 2 H Hᵀ. L' = L Φ(M), M = L⁻¹ A' L⁻ᵀ;
         // L'' = L' Φ(M) + L Φ(M'), M' = -L⁻¹ L' M - M L'ᵀ L⁻ᵀ + L⁻¹ A'' L⁻ᵀ (Φ: lower
         // triangle, diagonal halved).
         const td xx = x[0].detach(), hh = h[0].detach();
         const index_t n = xx.shape()[0];
         const auto phi = [n](const td& m) { return fg::tril(m) - fg::where(fg::eye<double>(n), m, 0.0) * 0.5; };
         const td a1 = fg::mm(hh, xx.t()) + fg::mm(xx, hh.t()), a2 = fg::mm(hh, hh.t()) * 2.0;
         const td l = fg::cholesky(fg::mm(xx, xx.t()) + fg::eye<double>(n)), li = fg::inverse(l);
         const td m = fg::mm(fg::mm(li, a1), li.t());
         const td l1 = fg::mm(l, phi(m));
         const td m1 = -fg::mm(fg::mm(li, l1), m) - fg::mm(fg::mm(m, l1.t()), li.t()) + fg::mm(fg::mm(li, a2), li.t());
         return total((fg::mm(l1, phi(m)) + fg::mm(l, phi(m1))) * w);
       }},
  };
  return m;
}
const std::map<std::string, second_form<2>>& binary_seconds() {
  using A = std::array<td, 2>;
  static const std::map<std::string, second_form<2>> m = {
      {"dot", [](const A&, const A& h, const td& w) { return 2 * w.item() * total(h[0] * h[1]); }},
      {"outer",
       [](const A&, const A& h, const td& w) { return 2 * total(fg::outer(h[0].detach(), h[1].detach()) * w); }},
      {"solve",
       [](const A& x, const A& h, const td& w) {  // X' = Y (H_B - H_A X), X'' = -2 Y H_A X'
         const td y = fg::inverse(shifted(x[0]));
         const td hb = h[1].dim() == 1 ? h[1].detach().unsqueeze(1) : h[1].detach();
         const td xs = fg::mm(y, x[1].dim() == 1 ? x[1].detach().unsqueeze(1) : x[1].detach());
         const td x1 = fg::mm(y, hb - fg::mm(h[0].detach(), xs));
         const td x2 = fg::mm(fg::mm(y, h[0].detach()), x1) * -2.0;
         return total(x2.reshape(w.shape()) * w);
       }},
  };
  return m;
}
const std::vector<std::string> linear_ops = {"cumsum",      "flip",  "narrow", "split",        "chunk",
                                             "cat",         "stack", "repeat", "index_select", "gather",
                                             "scatter_add", "tril",  "triu",   "trace",        "diag"};
}  // namespace

TEST_CASE(
    "double backward: every differentiable op of the structured registry against closed-form second derivatives") {
  int checked = 0;
  for_each(structured(), [&](const auto& e) {
    if (!e.differentiable) return;
    using info = std::remove_cvref_t<decltype(e)>;
    constexpr std::size_t N = info::arity;
    const std::string op(e.name);
    CAPTURE(op);
    const bool linear = std::find(linear_ops.begin(), linear_ops.end(), op) != linear_ops.end();
    second_form<N> form;
    if constexpr (N == 1) {
      if (const auto it = unary_seconds().find(op); it != unary_seconds().end()) form = it->second;
    } else {
      if (const auto it = binary_seconds().find(op); it != binary_seconds().end()) form = it->second;
    }
    if (!linear && !form) {
      FAIL_CHECK("no closed-form second derivative for " << op);
      return;
    }
    const auto f = fn_of<double>(e);
    for (const auto& ss : e.shapes) {
      const std::string shapes_ = str(ss);
      CAPTURE(shapes_);
      std::array<td, N> x, h;
      std::vector<td> in;
      for (std::size_t k = 0; k < N; ++k) {
        x[k] = to_tensor<double>(sample_values(e.dom[k], ss[k], 21 + 13 * k), ss[k]).requires_grad(true);
        h[k] = weights(ss[k], 4.0 + static_cast<double>(k)) - 0.5;
        in.push_back(x[k]);
      }
      const td fx = call(f, x);
      const td w = weights(fx.shape(), 9.0);
      const td big_f = fg::sum(w * (linear ? fg::sin(fx) : fx));
      const auto g = fg::autograd::grad({big_f}, in, {.create_graph = true});
      td s = fg::sum(g[0] * h[0]);
      for (std::size_t k = 1; k < N; ++k) s = s + fg::sum(g[k] * h[k]);
      double got = 0;  // a piecewise-linear op's gradient has no history: its second derivative is 0
      if (s.requires_grad()) {
        const auto d = fg::autograd::grad({s}, in, {.allow_unused = true});
        for (std::size_t k = 0; k < N; ++k)
          if (d[k].defined()) got += total(d[k] * h[k]);
      }
      double want;
      if (linear) {
        std::array<td, N> hd;
        for (std::size_t k = 0; k < N; ++k) hd[k] = h[k].detach();
        const td fh = call(f, hd);  // the op's directional derivative, exact: it is linear
        want = -total(w * fg::sin(fx.detach()) * fh * fh);
      } else {
        want = form(x, h, w);
      }
      CHECK(got == doctest::Approx(want).epsilon(1e-10).scale(1.0));
    }
    ++checked;
  });
  CHECK(checked >= 35);
}

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
