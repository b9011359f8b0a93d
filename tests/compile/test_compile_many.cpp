// Many compiled functions in one program: graphs that share
// subexpressions, sizes and pass masks must not share anything else. Under GCC 12 the
// schedules of the fused backend were keyed on the passes' masks as class-type template
// arguments (std::array<bool, M> values), which GCC mangles without the positions of their
// zero elements and identifies by that name: two different masks of one length were one
// template argument, so one graph's pass ran with another's schedule ("the tensor is
// undefined", or reads of values never computed). Every function here is checked against
// eager mode with every backend and policy, and its fused gradient against finite differences.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_rel;

namespace {

using D = fg::tensor<double>;

// Functions of x [2, 3] and y [3] with a lot in common: the product x * y, its size, the
// number of canonical nodes, several small graphs of one length.
auto f_exp = [](auto x, auto y) { return x * y + fg::exp(y); };
auto f_square = [](auto x, auto y) { return x * y + y * y; };
auto f_mul = [](auto x, auto y) { return x * y; };
auto f_sin = [](auto x, auto y) { return x * y + fg::sin(x * y); };
auto f_expmul = [](auto x, auto y) { return fg::exp(x * y) * (x * y); };
auto f_sum = [](auto x, auto y) { return fg::sum(x * y) * y; };
auto f_tanh = [](auto x, auto y) { return fg::tanh(x * y + y) - x; };
auto f_sigmoid = [](auto x, auto y) { return (x * y) / (fg::exp(-(x * y)) + 1.0); };
auto f_rowsum = [](auto x, auto y) { return fg::sum(x * y, -1, true) * x; };
auto f_rowmax = [](auto x, auto y) { return fg::max(x * y, -1, true) + x * 0.5; };
auto f_means = [](auto x, auto y) { return fg::mean(fg::exp(x * y)) + fg::sum(y * y); };
auto f_relu = [](auto x, auto y) { return fg::relu(x * y - 0.1) * y; };
auto f_consts = [](auto x, auto y) { return x * 2.0 + y * 2.0; };
auto f_second = [](auto, auto y) { return y; };  // ignores x; returns an input
auto f_first = [](auto x, auto) { return x; };
// One input.
auto f_identity = [](auto a) { return a; };
auto f_neg = [](auto a) { return -a; };
auto f_cos = [](auto a) { return fg::cos(a) * a; };

template <class B, class P, class F, class... X>
void same_as_eager(F fn, const X&... xs) {
  std::vector<D> a{xs.detach().clone().requires_grad(true)...};
  std::vector<D> b{xs.detach().clone().requires_grad(true)...};
  auto compiled = fg::compile<B, P>(fn);
  auto call = [&](auto& f, auto& v) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return D(f(v[I]...)); }
    (std::index_sequence_for<X...>{});
  };
  const D ya = call(fn, a), yb = call(compiled, b);
  CHECK(max_rel(ya, yb) < 1e-12);
  const D w = fg::randn<double>(ya.shape(), 99);
  fg::sum(ya * w).backward();
  fg::sum(yb * w).backward();
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    REQUIRE(a[i].grad().defined() == b[i].grad().defined());
    if (a[i].grad().defined()) CHECK(max_rel(a[i].grad(), b[i].grad()) < 1e-12);
  }
}

/// `fn` against eager with every backend and policy, and its fused gradient by gradcheck.
template <class F, class... X>
void check_function(const char* name, F fn, const X&... xs) {
  const std::string n = name;
  CAPTURE(n);
  same_as_eager<fg::backend::fused, fg::policy::min_cut>(fn, xs...);
  same_as_eager<fg::backend::fused, fg::policy::save_all>(fn, xs...);
  same_as_eager<fg::backend::fused, fg::policy::recompute_all>(fn, xs...);
  same_as_eager<fg::backend::aot_eager, fg::policy::min_cut>(fn, xs...);
  auto compiled = fg::compile(fn);
  const auto r = fg::gradcheck([&](auto... v) { return compiled(v...); }, xs...);
  CAPTURE(r.message);
  CHECK(r.ok);
}

}  // namespace

TEST_CASE("many compiled functions with shared subexpressions in one program") {
  const D x = fg::randn<double>({2, 3}, 1), y = fg::randn<double>({3}, 2), a = fg::randn<double>({4}, 3);
  // The first case that failed: f after h, in one program.
  check_function("exp", f_exp, x, y);
  check_function("square", f_square, x, y);
  check_function("mul", f_mul, x, y);
  check_function("sin", f_sin, x, y);
  check_function("expmul", f_expmul, x, y);
  check_function("sum", f_sum, x, y);
  check_function("tanh", f_tanh, x, y);
  check_function("sigmoid", f_sigmoid, x, y);
  check_function("rowsum", f_rowsum, x, y);
  check_function("rowmax", f_rowmax, x, y);
  check_function("means", f_means, x, y);
  check_function("relu", f_relu, x, y);
  check_function("consts", f_consts, x, y);
  check_function("second", f_second, x, y);
  check_function("first", f_first, x, y);
  check_function("identity", f_identity, a);
  check_function("neg", f_neg, a);
  check_function("cos", f_cos, a);
}

TEST_CASE("the same functions on other shapes, in reverse order") {
  const D x = fg::randn<double>({4, 1, 5}, 4), y = fg::randn<double>({3, 5}, 5), a = fg::randn<double>({2, 2}, 6);
  check_function("cos", f_cos, a);
  check_function("neg", f_neg, a);
  check_function("identity", f_identity, a);
  check_function("first", f_first, x, y);
  check_function("second", f_second, x, y);
  check_function("consts", f_consts, x, y);
  check_function("relu", f_relu, x, y);
  check_function("means", f_means, x, y);
  check_function("rowmax", f_rowmax, x, y);
  check_function("rowsum", f_rowsum, x, y);
  check_function("sigmoid", f_sigmoid, x, y);
  check_function("tanh", f_tanh, x, y);
  check_function("sum", f_sum, x, y);
  check_function("expmul", f_expmul, x, y);
  check_function("sin", f_sin, x, y);
  check_function("mul", f_mul, x, y);
  check_function("square", f_square, x, y);
  check_function("exp", f_exp, x, y);
}

TEST_CASE("the masks of a compiled function's passes are template arguments by reference") {
  // What the bug needed: two passes of one length whose masks differ only in where their
  // true elements are (GCC 12 mangles both {true, false, false} and {false, false, true} as
  // {true}). Identity: forward keeps node 0, backward keeps node 2 (the gradient).
  using A = decltype(fg::compile(f_identity))::analysis<double, 1>;
  using G = fg::detail::compiled_graph_of<fg::backend::fused, fg::policy::min_cut, A>;
  static_assert(A::M == 3);
  static_assert(G::keep[0] && !G::keep[2] && G::grad_roots[2] && !G::grad_roots[0]);
  // Each pass's schedule is its own: the forward's input 0 is read, the backward never reads it.
  constexpr auto& fwd = fg::detail::schedule_v<A, G::forward, G::keep>;
  constexpr auto& bwd = fg::detail::schedule_v<A, G::backward, G::grad_roots>;
  CHECK(fwd.roles[0] == fg::detail::role::leaf);
  CHECK(bwd.roles[0] == fg::detail::role::none);
}
