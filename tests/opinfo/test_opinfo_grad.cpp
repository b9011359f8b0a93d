// Generated from the op registry (tests/opinfo/registry.hpp): gradcheck in double of every
// differentiable entry over every shape class (0-d, one element, vector, matrix, broadcast,
// empty, non-contiguous), away from the entry's kinks; the derivative at edge points against
// PyTorch's values; results of the entries without a derivative never require grad.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include "opinfo/harness.hpp"

namespace {
using namespace opinfo;
using td = fg::tensor<double>;

/// Tighter than gradcheck's defaults (rtol 1e-3): central differences with a step of 1e-6 are
/// good to about 1e-9 here, and a rule off by 0.1% must fail.
constexpr fg::gradcheck_options tight{.eps = 1e-6, .atol = 1e-6, .rtol = 1e-5};

template <class Info>
void check_gradcheck(const Info& e) {
  const auto f = fn_of<double>(e);
  for (const auto& ss : shape_classes<Info::arity>()) {
    const std::string shapes_ = str(ss);
    CAPTURE(shapes_);
    const auto x = smooth_inputs(e, ss, 11);
    const auto r = call([&](const auto&... xs) { return fg::gradcheck(tight, f, xs...); }, x);
    CHECK_MESSAGE(r.ok, r.message);
  }
  // Non-contiguous operands: the function reads every other element of each input.
  shapes<Info::arity> ss;
  ss.fill(fg::shape{3, 4});
  const auto x = smooth_inputs(e, ss, 12);
  tensors<double, Info::arity> wide;
  for (std::size_t k = 0; k < Info::arity; ++k) {  // [3, 8] holding x at even columns
    auto w = fg::zeros<double>({3, 8});
    auto xv = x[k].to_vector();
    std::vector<double> wv(24);
    for (std::size_t i = 0; i < 12; ++i) wv[i / 4 * 8 + i % 4 * 2] = xv[i];
    wide[k] = to_tensor<double>(wv, {3, 8});
  }
  auto strided = [f](const auto&... w) { return f(w.slice(1, 0, 8, 2)...); };
  const auto r = call([&](const auto&... xs) { return fg::gradcheck(tight, strided, xs...); }, wide);
  CHECK_MESSAGE(r.ok, "non-contiguous: " << r.message);
}

template <class Info>
void check_grad_specials(const Info& e) {
  const auto f = fn_of<double>(e);
  for (const auto& s : e.grad_specials) {
    tensors<double, Info::arity> x;
    for (std::size_t k = 0; k < Info::arity; ++k)
      x[k] = fg::scalar_tensor<double>(s.x[k]).requires_grad(!e.dom[k].mask);
    fg::sum(call(f, x)).backward();
    for (std::size_t k = 0; k < Info::arity; ++k) {
      if (e.dom[k].mask) continue;
      const double got = x[k].grad().defined() ? x[k].grad().item() : 0.0;
      if (!matches<double>(got, s.want[k], 1e-7)) {
        std::ostringstream os;
        os << "d/dx" << k << " at (" << s.x[0];
        for (std::size_t j = 1; j < Info::arity; ++j) os << ", " << s.x[j];
        os << "): got " << got << ", expected " << s.want[k];
        FAIL_CHECK(os.str());
      }
    }
  }
}
}  // namespace

TEST_CASE("opinfo: gradcheck (double) over every shape class") {
  for_each(registry(), [](const auto& e) {
    const std::string op(e.name);
    CAPTURE(op);
    if (e.derivative == "none") {  // no gradient: the result does not require grad
      shapes<std::remove_cvref_t<decltype(e)>::arity> ss;
      ss.fill(fg::shape{4});
      auto x = inputs<double>(e, ss, 3);
      for (auto& t : x) t.requires_grad(true);
      CHECK_FALSE(call(fn_of<double>(e), x).requires_grad());
      return;
    }
    check_gradcheck(e);
  });
}

TEST_CASE("opinfo: derivatives at edge points (PyTorch's values)") {
  for_each(registry(), [](const auto& e) {
    const std::string op(e.name);
    CAPTURE(op);
    check_grad_specials(e);
  });
}
