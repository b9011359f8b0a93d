// The compile-time budget case of fg::compile: a 40-node expression (pointwise ops with
// constants, shared subexpressions, a reduction) and its derived backward, through the
// default fused backend, in a translation unit of its own. docs/performance.md records how
// long this file takes to compile; the test checks values and gradients against eager and
// finite differences.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fusegrad/compile.hpp>  // fg::compile, with the eager tensors and gradcheck

namespace fg = fusegrad;

namespace {

// 40 op nodes over 3 inputs; a .. h are each used several times (counts per line).
auto forty = [](auto x, auto y, auto z) {
  auto a = fg::sin(x) * y + z;                         //  3
  auto b = fg::exp(-a * 0.5) + fg::cos(y);             //  5
  auto c = fg::tanh(a * b) - x / (fg::abs(z) + 1.0);   //  6
  auto d = fg::sigmoid(c) * fg::log(b + 2.0);          //  4
  auto e = fg::sqrt(fg::relu(d) + 1.0) * a;            //  4
  auto f = fg::maximum(e, c) + fg::pow(b, 2.0);        //  3
  auto g = fg::sin(f * y) + fg::cos(e - z);            //  5
  auto h = g * d + f / (b + 3.0);                      //  4
  return fg::sum((h * x + fg::tanh(g) * 0.25) / 2.0);  //  6
};

using analysis = decltype(fg::compile(forty))::analysis<double, 3>;
static_assert(analysis::MF == 43,
              "the forward graph has the 40 op nodes and the 3 inputs: each repeated "
              "subexpression (constants included) is one node");

static_assert(decltype(fg::compile(forty))::plans_differ<double, 3>() &&
                  !decltype(fg::compile(forty))::holds_both_plans<double, 3>(),
              "the two size classes plan differently, but each plan is estimated within 5% of the "
              "other in both classes: the function holds one plan, and its loops are compiled once");

template <class T>
std::vector<T> grads_of(const fg::tensor<T>& t) {
  return t.grad().to_vector();
}

}  // namespace

// Where nothing is broadcast the backward runs two loops (its sums to operands' shapes read as
// the identity: `unreduced`); a broadcast operand takes the general loops, ten of them. The
// function holds one plan, the one for values in cache.
using grads = fg::detail::compiled_graph_of<fg::backend::fused, fg::policy::cost_cached, analysis>;
static_assert(fg::detail::schedule_v<analysis, grads::backward, grads::grad_roots>.stages == 10 &&
                  fg::detail::schedule_v<fg::detail::unreduced<analysis>, grads::backward, grads::grad_roots>.stages ==
                      2 &&
                  fg::detail::unreduced_loops_pay<analysis, grads::backward, grads::grad_roots>(),
              "the backward is compiled both ways: two loops where nothing is broadcast, ten where "
              "something is");

TEST_CASE("a 40-node function: fused values and gradients equal eager, with and without a broadcast") {
  const auto f = fg::compile(forty);
  const fg::shape s{5, 13};
  for (const fg::shape& zs : {s, fg::shape{13}, fg::shape{5, 1}}) {
    const std::string z_shape = fg::to_string(zs);
    CAPTURE(z_shape);
    auto make = [&](const fg::shape& sh, std::uint64_t seed) {
      return fg::randn<double>(sh, seed).requires_grad(true);
    };
    auto xa = make(s, 1), ya = make(s, 2), za = make(zs, 3);
    auto xb = make(s, 1), yb = make(s, 2), zb = make(zs, 3);
    const fg::tensor<double> va = forty(xa, ya, za), vb = f(xb, yb, zb);
    va.backward();
    vb.backward();
    CHECK(vb.item() == doctest::Approx(va.item()).epsilon(1e-12));
    for (auto [p, q] : {std::pair{&xa, &xb}, std::pair{&ya, &yb}, std::pair{&za, &zb}}) {
      const auto u = grads_of(*p), v = grads_of(*q);
      REQUIRE(u.size() == v.size());
      for (std::size_t i = 0; i < u.size(); ++i) CHECK(v[i] == doctest::Approx(u[i]).epsilon(1e-12));
    }
  }
}

TEST_CASE("a 40-node function passes gradcheck through fg::compile") {
  const auto f = fg::compile(forty);
  const auto r = fg::gradcheck([&](auto... xs) { return f(xs...); }, fg::randn<double>({7}, 4),
                               fg::randn<double>({7}, 5), fg::randn<double>({7}, 6));
  CHECK_MESSAGE(r.ok, r.message);
}
