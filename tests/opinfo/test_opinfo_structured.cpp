// Generated from the registry's second table (tests/opinfo/structured.hpp): reductions, the
// softmax family, scans, structure ops and linear algebra. Values against a reference per row
// and edge rows (extreme inputs for the stable forms) in float and double, gradcheck in
// double, and fg::jit, compiled autograd and (where the entry compiles) fg::compile against
// eager, bit for bit.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include "opinfo/harness.hpp"
#include "opinfo/structured.hpp"

namespace {
using namespace opinfo;

template <class E, class Info>
auto sfn(const Info& e) {
  if constexpr (Info::arity == 1) return static_cast<fg::tensor<E> (*)(const fg::tensor<E>&)>(e.f);
  else return static_cast<fg::tensor<E> (*)(const fg::tensor<E>&, const fg::tensor<E>&)>(e.f);
}

template <class E, class Info>
tensors<E, Info::arity> sinputs(const Info& e, const std::array<fg::shape, Info::arity>& ss, std::uint64_t seed) {
  tensors<E, Info::arity> x;
  for (std::size_t k = 0; k < Info::arity; ++k)
    x[k] = to_tensor<E>(sample_values(e.dom[k], ss[k], seed + 13 * k), ss[k]);
  return x;
}

template <class E, class Info>
void check_reference(const Info& e) {
  if constexpr (Info::arity == 1) {
    if (!e.ref) return;
    const double tol = std::is_same_v<E, float> ? 2e-6 : 1e-13;
    const auto f = sfn<E>(e);
    for (const auto& ss : e.shapes) {
      const std::string shape_ = str(ss[0]);
      CAPTURE(shape_);
      const auto x = sinputs<E>(e, ss, 3);
      const auto xv = x[0].to_vector();
      const auto yv = call(f, x).to_vector();
      const index_t c = ss[0].empty() ? 1 : ss[0].back(), rows = count(ss[0]) / std::max<index_t>(c, 1);
      std::vector<long double> want;
      for (index_t r = 0; r < rows; ++r) {
        const auto o = e.ref(std::vector<long double>(xv.begin() + r * c, xv.begin() + (r + 1) * c));
        want.insert(want.end(), o.begin(), o.end());
      }
      REQUIRE(yv.size() == want.size());
      for (std::size_t i = 0; i < yv.size(); ++i)
        if (!matches<E>(yv[i], want[i], tol)) {
          FAIL_CHECK("element " << i << ": got " << yv[i] << ", expected " << static_cast<double>(want[i]));
          break;
        }
    }
    for (const auto& er : e.edges) {
      const auto y = call(f, tensors<E, 1>{to_tensor<E>(er.row, {static_cast<index_t>(er.row.size())})}).to_vector();
      REQUIRE(y.size() == er.want.size());
      for (std::size_t i = 0; i < y.size(); ++i)
        CHECK_MESSAGE(matches<E>(y[i], er.want[i], tol), "edge row " << er.row[0] << ", ...: element " << i << " is "
                                                                     << y[i] << ", expected " << er.want[i]);
    }
  }
}

template <class Info>
void check_grad(const Info& e) {
  const auto f = sfn<double>(e);
  for (const auto& ss : e.shapes) {
    const std::string shapes_ = str(ss);
    CAPTURE(shapes_);
    auto x = sinputs<double>(e, ss, 21);
    if (!e.differentiable) {
      for (auto& t : x) t.requires_grad(true);
      CHECK_FALSE(call(f, x).requires_grad());
      continue;
    }
    const auto r =
        call([&](const auto&... xs) { return fg::gradcheck({.eps = 1e-6, .atol = 1e-6, .rtol = 1e-5}, f, xs...); }, x);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

template <class E, std::size_t N>
struct result {
  fg::tensor<E> y;
  std::array<fg::tensor<E>, N> g;
};
template <class E, std::size_t N, class Fn>
result<E, N> run(const tensors<E, N>& x0, bool grad, Fn&& fn) {
  tensors<E, N> x;
  for (std::size_t k = 0; k < N; ++k) x[k] = x0[k].detach().clone().requires_grad(grad);
  result<E, N> r{fg::tensor<E>(call(fn, x)), {}};
  if (grad) fg::sum(r.y * fg::rand<E>(r.y.shape(), 4, E(0.5), E(1.5))).backward();
  for (std::size_t k = 0; k < N; ++k) r.g[k] = x[k].grad();
  return r;
}
/// Values the same bits; gradients too, except through fg::compile (`sums_differ`): its
/// backward adds the contributions of a value's several uses (x feeds both the max and the
/// difference of a softmax) in its canonical order, the tape in the order it runs them.
template <class E, std::size_t N>
void same(const std::string& path, const result<E, N>& a, const result<E, N>& b, bool sums_differ = false) {
  CAPTURE(path);
  CHECK_MESSAGE(first_bit_diff(a.y.to_vector(), b.y.to_vector()).empty(),
                "values: " << first_bit_diff(a.y.to_vector(), b.y.to_vector()));
  for (std::size_t k = 0; k < N; ++k) {
    REQUIRE(a.g[k].defined() == b.g[k].defined());
    if (!a.g[k].defined()) continue;
    const auto u = a.g[k].to_vector(), v = b.g[k].to_vector();
    if (sums_differ)
      CHECK_MESSAGE(normwise(u, v) <= (std::is_same_v<E, float> ? 1e-5 : 1e-14),
                    "gradient " << k << ": " << first_bit_diff(u, v));
    else CHECK_MESSAGE(first_bit_diff(u, v).empty(), "gradient " << k << ": " << first_bit_diff(u, v));
  }
}

template <class E, class Info>
void check_paths(const Info& e) {
  constexpr std::size_t N = Info::arity;
  const auto f = sfn<E>(e);
  for (const auto& ss : e.shapes) {
    const std::string shapes_ = str(ss);
    CAPTURE(shapes_);
    const auto x = sinputs<E>(e, ss, 8);
    const auto eager = run<E, N>(x, e.differentiable, f);
    auto jf = fg::jit(f);
    same("fg::jit", eager, run<E, N>(x, e.differentiable, jf));
    same("fg::jit (cache hit)", eager, run<E, N>(x, e.differentiable, jf));
    {
      fg::compiled_autograd::enable on;
      same("compiled autograd", eager, run<E, N>(x, e.differentiable, f));
      same("fg::jit with compiled autograd", eager, run<E, N>(x, e.differentiable, jf));
    }
    if constexpr (Info::compiles) {
      auto cf = fg::compile(e.f);
      same("fg::compile", eager, run<E, N>(x, e.differentiable, cf), true);
    }
  }
}

template <class E>
void all() {
  for_each(structured(), [](const auto& e) {
    const std::string op(e.name);
    CAPTURE(op);
    check_reference<E>(e);
    check_paths<E>(e);
  });
}
}  // namespace

TEST_CASE("opinfo structured: values, edge rows and every path (double)") { all<double>(); }
TEST_CASE("opinfo structured: values, edge rows and every path (float)") { all<float>(); }
TEST_CASE("opinfo structured: gradcheck (double)") {
  for_each(structured(), [](const auto& e) {
    const std::string op(e.name);
    CAPTURE(op);
    check_grad(e);
  });
}
