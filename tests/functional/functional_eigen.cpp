// Eigen vectors, arrays, matrices and Maps under the functional transforms
// (fusegrad/functional/eigen.hpp); built only when CMake finds Eigen (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <cmath>

#include <Eigen/Core>

#include <fusegrad/functional.hpp>
#include <fusegrad/functional/eigen.hpp>

namespace fg = fusegrad;

TEST_CASE("Eigen arguments: vectors, arrays, Maps, matrices; gradients as their plain types") {
  auto f = [](const auto& x, const auto& y) { return fg::sum(fg::cos(fg::cos(x)) * y); };
  Eigen::VectorXd x = Eigen::VectorXd::LinSpaced(13, -2.0, 2.0), y = Eigen::VectorXd::LinSpaced(13, 0.5, 1.5);
  const auto [v, g] = fg::value_and_grad(f, fg::argnums<0, 1>)(x, y);
  const auto& [gx, gy] = g;
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(gx)>, Eigen::VectorXd>);
  double ref = 0;
  for (int i = 0; i < 13; ++i) {
    ref += std::cos(std::cos(x[i])) * y[i];
    CHECK(gx[i] == doctest::Approx(y[i] * std::sin(std::cos(x[i])) * std::sin(x[i])).epsilon(1e-14));
    CHECK(gy[i] == doctest::Approx(std::cos(std::cos(x[i]))).epsilon(1e-14));
  }
  CHECK(v == doctest::Approx(ref).epsilon(1e-14));

  // a Map over a plain buffer, an Array, a fixed-size vector, written into with .into
  double buf[13];
  for (int i = 0; i < 13; ++i) buf[i] = x[i];
  Eigen::Map<const Eigen::VectorXd> m(buf, 13);
  Eigen::ArrayXd ya = y.array(), out(13);
  fg::grad(f).into(out)(m, ya);
  for (int i = 0; i < 13; ++i) CHECK(out[i] == gx[i]);
  Eigen::Vector4d p(0.5, -0.3, 1.2, 0.8);
  auto rosen = [](const auto& x) {
    const auto n = fg::size(x);
    const auto a = fg::slice(x, 0, n - 1), b = fg::slice(x, 1, n - 1);
    return fg::sum(100.0 * (b - a * a) * (b - a * a) + (1.0 - a) * (1.0 - a));
  };
  const Eigen::Vector4d gp = fg::grad(rosen)(p);
  CHECK(gp[0] == doctest::Approx(-400 * 0.5 * (-0.3 - 0.25) - 2 * 0.5).epsilon(1e-14));
  const auto h = fg::hessian(rosen)(p);  // a vector of 16, row-major
  CHECK(h[0] == doctest::Approx(1200 * 0.25 - 400 * -0.3 + 2).epsilon(1e-14));

  // a matrix is its elements in storage order; a block with gaps is refused
  Eigen::MatrixXd a = Eigen::MatrixXd::Constant(3, 4, 2.0);
  const Eigen::MatrixXd ga = fg::grad([](const auto& z) { return fg::sum(z * z); })(a);
  CHECK(ga.rows() == 3);
  CHECK(ga(2, 3) == 4.0);
  CHECK_THROWS_AS(fg::grad([](const auto& z) { return fg::sum(z); })(a.block(0, 0, 2, 2)), fg::error);
}
