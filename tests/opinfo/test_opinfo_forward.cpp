// Generated from the op registry (tests/opinfo/registry.hpp): forward mode against backward.
// For every differentiable entry, at sample points and at mixed values, `fg::jvp` on scalars
// (tangents pushed through the entry's expression type: forward mode) gives the
// value eager computes and the derivative the eager tape's backward gives, operand by operand.
#include <doctest/doctest.h>

#include <cmath>
#include <tuple>

#include <fusegrad/fusegrad.hpp>
#include <fusegrad/functional.hpp>

#include "opinfo/harness.hpp"
#include "opinfo/registry.hpp"

namespace {
using namespace opinfo;

template <std::size_t N>
auto as_tuple(const std::array<double, N>& a) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) { return std::tuple{a[I]...}; }
  (std::make_index_sequence<N>{});
}

template <class Info>
void check_forward(const Info& e) {
  constexpr std::size_t N = Info::arity;
  const auto eager = fn_of<double>(e);
  std::vector<std::array<double, N>> points;
  {
    shapes<N> ss;
    ss.fill(fg::shape{12});
    const auto x = smooth_inputs(e, ss, 41);
    for (std::size_t i = 0; i < 12; ++i) {
      std::array<double, N> p{};
      for (std::size_t k = 0; k < N; ++k) p[k] = x[k].to_vector()[i];
      points.push_back(p);
    }
  }
  int compared = 0;
  for (const auto& p : points) {
    // The reference: the eager tape on 0-d tensors.
    tensors<double, N> x;
    for (std::size_t k = 0; k < N; ++k) x[k] = fg::scalar_tensor<double>(p[k]).requires_grad(!e.dom[k].mask);
    const fg::tensor<double> y = call(eager, x);
    if (y.requires_grad()) y.backward();
    for (std::size_t k = 0; k < N; ++k) {
      if (e.dom[k].mask) continue;
      std::array<double, N> t{};
      t[k] = 1.0;
      const auto [v, dv] = fg::jvp(e.f, as_tuple(p), as_tuple(t));
      const double want = x[k].grad().defined() ? x[k].grad().item() : 0.0;
      CAPTURE(k);
      CAPTURE(p[0]);
      CHECK(matches<double>(v, y.item(), e.tol_double));
      CHECK(matches<double>(dv, want, std::max(e.tol_double, 1e-12)));
      ++compared;
    }
  }
  CHECK(compared > 0);
}
}  // namespace

TEST_CASE("opinfo: forward mode (fg::jvp) equals the eager value and backward") {
  int entries = 0;
  for_each(registry(), [&](const auto& e) {
    if (e.derivative == "none") return;
    const std::string op(e.name);
    CAPTURE(op);
    check_forward(e);
    ++entries;
  });
  CHECK(entries > 50);
}
