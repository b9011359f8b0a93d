// The new ops' errors (each a fusegrad::error naming the op and what was expected), and the
// linear algebra's defining properties: A solve(A, B) = B, L Lᵀ = A, det and logdet of
// known matrices, A inverse(A) = I; arange and linspace against hand-written values.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include <cmath>
#include <limits>
#include <vector>

namespace fg = fusegrad;
using td = fg::tensor<double>;

TEST_CASE("bad arguments of the new ops are errors that say what was expected") {
  const td x = fg::randn<double>({3, 4}, 1);
  CHECK_THROWS_WITH_AS((void)fg::polygamma(-1, x), doctest::Contains("polygamma: n = -1; expected 0 <= n <= 1000"),
                       fg::error);
  CHECK_THROWS_WITH_AS((void)fg::norm(x, 3.0), doctest::Contains("norm: p = 3; expected 1, 2 or inf"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::arange<double>(0, 1, 0),
                       doctest::Contains("expected finite bounds and a nonzero step"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::linspace<double>(0, 1, -1), doctest::Contains("steps = -1; expected steps >= 0"),
                       fg::error);
  CHECK_THROWS_WITH_AS((void)fg::narrow(x, 1, 2, 3), doctest::Contains("expected 0 <= start <= start + length <= 4"),
                       fg::error);
  CHECK_THROWS_WITH_AS((void)fg::index_select(x, 1, {0, 4}), doctest::Contains("index 4 for dim 1 of size 4"),
                       fg::error);
  CHECK_THROWS_WITH_AS((void)fg::gather(x, 1, fg::from_vector<double>({0, 5, 1}, {3, 1})),
                       doctest::Contains("gather: index 5 out of range; expected an integer in [0, 4)"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::gather(x, 1, fg::from_vector<double>({0.5, 1, 1}, {3, 1})),
                       doctest::Contains("index 0.5"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::split(x, 0, 1), doctest::Contains("expected a size > 0"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::chunk(x, 0), doctest::Contains("expected chunks > 0"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::stack(std::vector<td>{x, x.t()}), doctest::Contains("expected equal shapes"),
                       fg::error);
  CHECK_THROWS_WITH_AS((void)fg::repeat(x, {2}), doctest::Contains("expected at least one per dim"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::argmax(fg::zeros<double>({2, 0}), 1), doctest::Contains("cannot reduce an empty dim"),
                       fg::error);
  CHECK_THROWS_WITH_AS((void)fg::tril(fg::zeros<double>({3})), doctest::Contains("expected at least 2 dims"),
                       fg::error);
  CHECK_THROWS_WITH_AS((void)fg::solve(x, x), doctest::Contains("expected a square matrix [n, n]"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::solve(fg::zeros<double>({2, 2}), fg::ones<double>({2})),
                       doctest::Contains("is singular"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::solve(fg::eye<double>(2), fg::ones<double>({3})),
                       doctest::Contains("expected [2] or [2, k]"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::cholesky(fg::from_vector<double>({1, 2, 2, 1}, {2, 2})),
                       doctest::Contains("expected a symmetric positive-definite matrix"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::dot(x, x), doctest::Contains("expected two vectors of one length"), fg::error);
}

TEST_CASE("linear algebra: defining properties and known values") {
  const td a = fg::randn<double>({5, 5}, 2) + fg::eye<double>(5) * 4.0, b = fg::randn<double>({5, 3}, 3);
  const td x = fg::solve(a, b);
  CHECK(fg::max(fg::abs(fg::matmul(a, x) - b)).item() < 1e-13);
  CHECK(fg::max(fg::abs(fg::matmul(a, fg::inverse(a)) - fg::eye<double>(5))).item() < 1e-14);
  const td spd = fg::matmul(a, a.t());
  const td l = fg::cholesky(spd);
  CHECK(fg::max(fg::abs(fg::matmul(l, l.t()) - spd)).item() < 1e-12);
  CHECK(fg::max(fg::abs(fg::triu(l, 1))).item() == 0);
  // det of a triangular matrix is the product of its diagonal; of a permutation, its sign.
  const td tri = fg::from_vector<double>({2, 7, 1, 0, 3, 5, 0, 0, -4}, {3, 3});
  CHECK(fg::det(tri).item() == doctest::Approx(-24.0).epsilon(1e-15));
  CHECK(std::isnan(fg::logdet(tri).item()));  // negative determinant: NaN, as PyTorch
  CHECK(fg::det(fg::from_vector<double>({0, 1, 1, 0}, {2, 2})).item() == -1.0);
  CHECK(fg::det(fg::zeros<double>({2, 2})).item() == 0.0);
  CHECK(fg::logdet(fg::zeros<double>({2, 2})).item() == -std::numeric_limits<double>::infinity());
  CHECK(fg::logdet(spd).item() == doctest::Approx(2 * std::log(std::abs(fg::det(a).item()))).epsilon(1e-13));
  CHECK(fg::trace(tri).item() == 1.0);
  CHECK(fg::diag(tri).to_vector() == std::vector<double>{2, 3, -4});
}

TEST_CASE("arange and linspace") {
  CHECK(fg::arange<double>(1, 2, 0.25).to_vector() == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(fg::arange<double>(3, 0, -1).to_vector() == std::vector<double>{3, 2, 1});
  CHECK(fg::arange<float>(0, 0).numel() == 0);
  const auto ls = fg::linspace<double>(-1, 1, 5).to_vector();
  CHECK(ls == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  const auto l3 = fg::linspace<double>(0, 0.3, 4).to_vector();
  CHECK(l3.front() == 0.0);
  CHECK(l3.back() == 0.3);  // both ends exact (PyTorch's two-sided formula)
  CHECK(fg::linspace<double>(2, 5, 1).to_vector() == std::vector<double>{2});
}

TEST_CASE("optimizers check their arguments and parameters as PyTorch's do") {
  td w = fg::randn<double>({3, 2}, 1).requires_grad(true);
  td b = fg::randn<double>({2}, 2).requires_grad(true);
  CHECK_THROWS_WITH_AS(
      fg::nn::adam<double>({w}, {.weight_decay = -0.1}),
      doctest::Contains("nn::adam: lr = 0.001, betas = (0.9, 0.999), eps = 1e-08, weight_decay = -0.1; expected"),
      fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::adam<double>({w}, {.lr = NAN}), doctest::Contains("nn::adam: lr = nan"), fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::adam<double>({w}, {.beta1 = 1.0}), doctest::Contains("0 <= betas < 1"), fg::error);
  const td nonleaf = w * 2.0;
  CHECK_THROWS_WITH_AS(
      fg::nn::adam<double>({w, nonleaf}),
      doctest::Contains("nn::adam: parameter 1 of shape [3, 2] is not a leaf (it has a grad_fn MulBackward1)"),
      fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::sgd<double>({nonleaf}, 0.1), doctest::Contains("nn::sgd: parameter 0"), fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::rmsprop<double>({b, b}), doctest::Contains("parameters 0 and 1 are the same tensor"),
                       fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::sgd<double>({w.detach().t()}, 0.1), doctest::Contains("is a non-contiguous view"),
                       fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::sgd<double>({td{}}, 0.1), doctest::Contains("parameter 0 is an undefined tensor"),
                       fg::error);
  // A leaf that does not require grad is accepted and never updated (a frozen parameter).
  td frozen = fg::ones<double>({2});
  fg::nn::sgd<double> opt({w, frozen}, 0.1);
  opt.step();
  CHECK(frozen.to_vector() == std::vector<double>{1.0, 1.0});
}
