// The element-wise op CONTRIBUTING.md walks through ("Add an element-wise op"), written as its
// header under include/fusegrad/ops/ would hold it, and run on every path: eager with the tape,
// fg::compile, fg::jit and the functional transforms, each against the closed form and under
// gradcheck. The op's entry in its header's list (which joins the op list, ops/list.hpp) and
// its line in the test registry are what a file outside the library cannot add; it runs the
// check the op list runs on each of its entries, and without the entry the op still runs
// everywhere, as a user's op does.
#include <cmath>
#include <cstdio>

#include <fusegrad/fusegrad.hpp>

namespace fusegrad {
// [new_op]
namespace ops {
struct cube_op {
  static constexpr std::string_view name = "cube", grad_fn = "CubeBackward0";
  static constexpr bool uses_output = false;  // the rule reads x, not the result
  static constexpr double cost = 0.6;         // in streamed loads per element (bench_op_costs)
  template <class V>
  static constexpr V value(const V& x) {
    return x * x * x;
  }
  static constexpr auto derivative(const auto& x, const auto&, const auto& g) { return g * (x * x * 3.0); }
};
}  // namespace ops
template <OperandOrNumber X>
constexpr auto cube(const X& x) {
  return apply_op(ops::cube_op{}, x);
}
// [new_op]
// [op_list_entry]
/// This header's ops in the op list (ops/list.hpp): a new op of the header adds its entry here.
#define FUSEGRAD_OPS_IN_CUBE(X) X(U, plain, cube_op)
// [op_list_entry]
// What ops/all.hpp checks of every entry of the op list: that it declares its cost.
FUSEGRAD_OPS_IN_CUBE(FUSEGRAD_OP_CHECK)
}  // namespace fusegrad

namespace fg = fusegrad;

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) std::printf("FAILED: %s\n", what);
    failures += ok ? 0 : 1;
  };
  auto f = [](auto x) { return fg::sum(fg::cube(x)); };

  // Eager: the value and the gradient against the closed forms, 3x^2.
  auto x = fg::randn<double>({9}, 1).requires_grad(true);
  const fg::tensor<double> y = f(x);
  y.backward();
  const auto xs = x.to_vector(), gx = x.grad().to_vector();
  double sum = 0;
  bool grads_ok = true;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    sum += xs[i] * xs[i] * xs[i];
    grads_ok = grads_ok && std::abs(gx[i] - 3 * xs[i] * xs[i]) <= 1e-12 * (1 + std::abs(gx[i]));
  }
  expect(std::abs(y.item() - sum) <= 1e-12 * (1 + std::abs(sum)), "eager value");
  expect(grads_ok, "eager gradient");

  // Every path under gradcheck (double, finite differences).
  const auto compiled = fg::compile(f);
  const auto jitted = fg::jit(f);
  expect(fg::gradcheck(f, fg::randn<double>({7}, 2)).ok, "gradcheck, eager");
  expect(fg::gradcheck([&](auto t) { return compiled(t); }, fg::randn<double>({7}, 3)).ok, "gradcheck, fg::compile");
  expect(fg::gradcheck([&](auto t) { return jitted(t); }, fg::randn<double>({7}, 4)).ok, "gradcheck, fg::jit");

  // The functional transforms on plain numbers: d/dx x^3 at 2 is 12.
  const double d = fg::grad([](auto v) { return fg::cube(v); })(2.0);
  expect(d == 12.0, "fg::grad on a double");

  std::printf("cube: %s\n", failures == 0 ? "every path agrees" : "mismatch");
  return failures == 0 ? 0 : 1;
}
