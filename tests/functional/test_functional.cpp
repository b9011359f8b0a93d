// The functional transforms (fg::grad, value_and_grad, vjp, jvp, hvp, hessian, jacobian) over
// every built-in element-wise op (tests/functional/functional_ops.hpp) and the composite functions of the
// suite, in double: against the eager engine and against finite differences; Hessians against
// closed forms.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <span>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "functional_ops.hpp"

namespace fg = fusegrad;
using fusegrad_test::binary_ops;
using fusegrad_test::unary_ops;

namespace {

constexpr double h = 1e-6;

using fusegrad_test::close;
using fusegrad_test::leaf;
using fusegrad_test::sample;
std::vector<double> grad_or_zero(const fg::tensor<double>& t, std::size_t n) {
  return t.grad().defined() ? t.grad().to_vector() : std::vector<double>(n, 0.0);
}

template <class C>
void check_unary(const C& c) {
  INFO(c.name);
  const auto f = c.f;
  const auto fs = [f](const auto& x) { return fg::sum(f(x)); };
  // the scalar form, at a few points
  for (double x : sample(c.lo, c.hi, 5, 0.3)) {
    INFO("x = " << x);
    const auto [v, g] = fg::value_and_grad(f)(x);
    auto t = leaf({x});
    auto y = fg::sum(f(t));
    CHECK(close(v, y.item()));
    if (y.requires_grad()) y.backward();
    CHECK(close(g, grad_or_zero(t, 1)[0]));
    const double fd = (fg::value_and_grad(f)(x + h).first - fg::value_and_grad(f)(x - h).first) / (2 * h);
    CHECK(std::abs(g - fd) <= 1e-6 * (1 + std::abs(g)));
    CHECK(close(fg::jvp(f, x, 1.0).second, g));
    const auto [yv, pb] = fg::vjp(f, x);
    CHECK(close(yv, v));
    CHECK(close(pb(2.0), 2 * g));
    // second order: forward over reverse, reverse over reverse, against differences of the gradient
    const double h2 = fg::hessian(f)(x), gg = fg::grad(fg::grad(f))(x), hv = fg::hvp(f)(x, 0.5);
    const double fd2 = (fg::grad(f)(x + h) - fg::grad(f)(x - h)) / (2 * h);
    CHECK(close(gg, h2, 1e-10));
    CHECK(close(hv, 0.5 * h2, 1e-10));
    CHECK(std::abs(h2 - fd2) <= 1e-5 * (1 + std::abs(h2)));
  }
  // the span form: 37 elements (a SIMD tail), against eager
  const auto xs = sample(c.lo, c.hi, 37), ys = sample(-1.0, 1.0, 37, 0.2), vs = sample(-1.0, 1.0, 37, 0.7);
  const auto [v, g] = fg::value_and_grad(fs)(xs);
  auto t = leaf(xs);
  auto y = fg::sum(f(t));
  CHECK(close(v, y.item()));
  if (y.requires_grad()) y.backward();
  const auto ge = grad_or_zero(t, xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(close(g[i], ge[i]));
  // vjp of the element-wise function with a cotangent, against eager backward(cotangent)
  const auto [yv, pb] = fg::vjp(f, std::span<const double>(xs));
  const auto gv = pb(std::span<const double>(ys));
  auto t2 = leaf(xs);
  auto y2 = f(t2);
  const auto y2v = y2.to_vector();
  if (y2.requires_grad()) y2.backward(fg::from_vector<double>(ys));
  const auto ge2 = grad_or_zero(t2, xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(close(yv[i], y2v[i]));
    CHECK(close(gv[i], ge2[i]));
  }
  // jvp of the element-wise function, and the Hessian-vector product of its sum
  const auto [jy, jt] = fg::jvp(f, std::span<const double>(xs), std::span<const double>(vs));
  const auto hv = fg::hvp(fs)(xs, vs);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(close(jy[i], y2v[i]));
    CHECK(close(jt[i], g[i] * vs[i], 1e-12));
    CHECK(close(hv[i], fg::hessian(f)(xs[i]) * vs[i], 1e-10));
  }
}

template <class C>
void check_binary(const C& c) {
  INFO(c.name);
  const auto f = c.f;
  const auto fs = [f](const auto& a, const auto& b) { return fg::sum(f(a, b)); };
  const auto as = sample(c.lo, c.hi, 5, 0.1), bs = sample(c.lo, c.hi, 5, 0.45);
  for (std::size_t k = 0; k < as.size(); ++k) {
    const double a = as[k], b = bs[k];
    INFO("a = " << a << ", b = " << b);
    const auto [v, g] = fg::value_and_grad(f, fg::argnums<0, 1>)(a, b);
    const auto [ga, gb] = g;
    auto ta = leaf({a}), tb = leaf({b});
    auto y = fg::sum(f(ta, tb));
    CHECK(close(v, y.item()));
    if (y.requires_grad()) y.backward();
    CHECK(close(ga, grad_or_zero(ta, 1)[0]));
    CHECK(close(gb, grad_or_zero(tb, 1)[0]));
    CHECK(close(fg::grad(f, fg::argnums<1>)(a, b), gb));
    auto val = [&](double x, double z) { return fg::value_and_grad(f)(x, z).first; };
    CHECK(std::abs(ga - (val(a + h, b) - val(a - h, b)) / (2 * h)) <= 1e-6 * (1 + std::abs(ga)));
    CHECK(std::abs(gb - (val(a, b + h) - val(a, b - h)) / (2 * h)) <= 1e-6 * (1 + std::abs(gb)));
    CHECK(close(fg::jvp(f, std::tuple{a, b}, std::tuple{0.3, -0.7}).second, 0.3 * ga - 0.7 * gb));
    // d2/da2 and d2/da db: forward over reverse against differences of the gradient
    const double haa = fg::hessian(f)(a, b);
    const double hab = fg::jvp(fg::grad(f), std::tuple{a, b}, std::tuple{0.0, 1.0}).second;
    CHECK(std::abs(haa - (fg::grad(f)(a + h, b) - fg::grad(f)(a - h, b)) / (2 * h)) <= 1e-5 * (1 + std::abs(haa)));
    CHECK(std::abs(hab - (fg::grad(f)(a, b + h) - fg::grad(f)(a, b - h)) / (2 * h)) <= 1e-5 * (1 + std::abs(hab)));
  }
  // spans, and a span with a scalar (broadcast: the scalar's gradient is a sum over elements)
  const auto xs = sample(c.lo, c.hi, 37), ys = sample(c.lo, c.hi, 37, 0.37);
  const auto [v, g] = fg::value_and_grad(fs, fg::argnums<0, 1>)(xs, ys);
  auto tx = leaf(xs), ty = leaf(ys);
  auto y = fg::sum(f(tx, ty));
  CHECK(close(v, y.item()));
  if (y.requires_grad()) y.backward();
  const auto gx = grad_or_zero(tx, xs.size()), gy = grad_or_zero(ty, ys.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(close(std::get<0>(g)[i], gx[i]));
    CHECK(close(std::get<1>(g)[i], gy[i]));
  }
  const double s = ys[3];
  const auto [v2, g2] = fg::value_and_grad(fs, fg::argnums<0, 1>)(xs, s);
  auto tx2 = leaf(xs), ts = fg::scalar_tensor<double>(s);
  ts.requires_grad(true);
  auto y2 = fg::sum(f(tx2, ts));
  CHECK(close(v2, y2.item()));
  if (y2.requires_grad()) y2.backward();
  CHECK(close(std::get<1>(g2), ts.grad().defined() ? ts.grad().item() : 0.0, 1e-12));
  const auto gx2 = grad_or_zero(tx2, xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(close(std::get<0>(g2)[i], gx2[i]));
}

}  // namespace

TEST_CASE("every element-wise op: grad, value_and_grad, vjp, jvp, hvp, hessian, grad of grad (scalars and spans)") {
  std::apply([](const auto&... c) { (check_unary(c), ...); }, unary_ops);
}

TEST_CASE("every binary op: both arguments, argnums, broadcasting a scalar over a span") {
  std::apply([](const auto&... c) { (check_binary(c), ...); }, binary_ops);
}

TEST_CASE("constant-evaluable gradients") {
  constexpr auto poly = [](auto x) { return x * x * x - 2.0 * x * x + 1.0; };
  static_assert(fg::grad(poly)(2.0) == 4.0);            // 3x^2 - 4x
  static_assert(fg::grad(fg::grad(poly))(2.0) == 8.0);  // 6x - 4
  static_assert(fg::grad(fg::grad(fg::grad(poly)))(2.0) == 6.0);
  static_assert(fg::hessian(poly)(2.0) == 8.0);
  static_assert(fg::grad([](auto x) { return x * x * x; })(2.0) == 12.0);
  constexpr auto g = fg::grad([](auto x, auto y) { return x * y * y; }, fg::argnums<0, 1>)(3.0, 2.0);
  static_assert(std::get<0>(g) == 4.0 && std::get<1>(g) == 12.0);
  CHECK(true);
}

TEST_CASE("comparison operators inside the transforms are masks, as on tensors") {
  // f(x) = x² where x > 0, else -x: the mask written with an operator, differentiated.
  auto f = [](const auto& x) { return x * x * (x > 0.0) - x * (0.0 >= x); };
  for (double x : {-1.5, 0.75, 2.0}) {
    INFO("x = " << x);
    CHECK(fg::grad(f)(x) == (x > 0 ? 2 * x : -1.0));
    auto t = fg::from_vector<double>({x}).requires_grad(true);
    fg::sum(f(t)).backward();
    CHECK(fg::grad(f)(x) == t.grad().to_vector()[0]);
  }
}
