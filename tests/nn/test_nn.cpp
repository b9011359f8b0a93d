// nn: losses against hand-computed values and gradcheck; cross_entropy's checks; optimizers
// against PyTorch's update rules written out by hand in double; clip_grad_norm; sequential's
// parameter walk. The state-dict file is tested in test_state_dict.cpp.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace fg = fusegrad;
using td = fg::tensor<double>;
using fg::index_t;

namespace {
constexpr fg::gradcheck_options tight{.eps = 1e-6, .atol = 1e-6, .rtol = 1e-5};
}

TEST_CASE("losses: values by hand and gradcheck") {
  const td a = fg::randn<double>({4, 3}, 1), b = fg::randn<double>({4, 3}, 2) * 2.0;
  const auto av = a.to_vector(), bv = b.to_vector();
  double l1 = 0, hub = 0, bce = 0;
  const auto y = fg::rand<double>({4, 3}, 3).to_vector();
  for (std::size_t i = 0; i < av.size(); ++i) {
    const double d = av[i] - bv[i];
    l1 += std::abs(d);
    hub += std::abs(d) < 1 ? 0.5 * d * d : std::abs(d) - 0.5;
    bce += -(y[i] * std::log(1 / (1 + std::exp(-av[i]))) + (1 - y[i]) * std::log(1 - 1 / (1 + std::exp(-av[i]))));
  }
  const td yt = fg::from_vector<double>(y, {4, 3});
  CHECK(fg::nn::l1_loss(a, b).item() == doctest::Approx(l1 / 12).epsilon(1e-14));
  CHECK(fg::nn::huber_loss(a, b).item() == doctest::Approx(hub / 12).epsilon(1e-14));
  CHECK(fg::nn::binary_cross_entropy_with_logits(a, yt).item() == doctest::Approx(bce / 12).epsilon(1e-12));
  CHECK(fg::gradcheck(
            tight, [](const td& x, const td& z) { return fg::nn::l1_loss(x, z); }, a, b)
            .ok);
  CHECK(fg::gradcheck(
            tight, [](const td& x, const td& z) { return fg::nn::huber_loss(x, z, 0.7); }, a, b)
            .ok);
  CHECK(fg::gradcheck(
            tight, [yt](const td& x) { return fg::nn::binary_cross_entropy_with_logits(x, yt); }, a)
            .ok);
  // Extreme logits stay finite (the stable form).
  CHECK(std::isfinite(fg::nn::binary_cross_entropy_with_logits(a * 1e4, yt).item()));
}

TEST_CASE("cross_entropy and nll_loss: values, gradients, extreme logits and errors") {
  const td logits = fg::randn<double>({5, 4}, 4);
  const std::vector<index_t> t = {0, 3, 1, 1, 2};
  const auto lv = logits.to_vector();
  double want = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    double m = -INFINITY, s = 0;
    for (std::size_t c = 0; c < 4; ++c) m = std::max(m, lv[i * 4 + c]);
    for (std::size_t c = 0; c < 4; ++c) s += std::exp(lv[i * 4 + c] - m);
    want += -(lv[i * 4 + static_cast<std::size_t>(t[i])] - m - std::log(s));
  }
  CHECK(fg::nn::cross_entropy(logits, t).item() == doctest::Approx(want / 5).epsilon(1e-14));
  CHECK(fg::gradcheck(
            tight, [t](const td& x) { return fg::nn::cross_entropy(x, t); }, logits)
            .ok);
  // Logits of ±1000 (exp overflows naively): the loss is exact.
  const td big = fg::from_vector<double>({1000, -1000, -1000, 1000}, {2, 2});
  CHECK(fg::nn::cross_entropy(big, {0, 0}).item() == doctest::Approx(1000.0));
  CHECK_THROWS_WITH_AS((void)fg::nn::cross_entropy(logits, {0, 4, 1, 1, 2}),
                       doctest::Contains("target 4 at row 1; expected a class index in [0, 4)"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::nn::cross_entropy(logits, {0, 1}), doctest::Contains("got 2 targets for a batch of 5"),
                       fg::error);
  CHECK_THROWS_AS((void)fg::nn::cross_entropy(fg::randn<double>({5}, 1), t), fg::error);
}

TEST_CASE("optimizers follow PyTorch's update rules") {
  // Three steps on f(p) = Σ p², gradient 2p, against the rules written out in double.
  auto run = [](auto make, auto rule) {
    td p = fg::from_vector<double>({1.0, -2.0, 0.5}).requires_grad(true);
    auto opt = make(p);
    std::vector<double> q = {1.0, -2.0, 0.5}, s1(3), s2(3);
    for (int step = 1; step <= 3; ++step) {
      opt.zero_grad();
      fg::sum(p * p).backward();
      opt.step();
      for (std::size_t i = 0; i < 3; ++i) rule(q[i], 2 * q[i], s1[i], s2[i], step);
    }
    const auto pv = p.to_vector();
    for (std::size_t i = 0; i < 3; ++i) CHECK(pv[i] == doctest::Approx(q[i]).epsilon(1e-14));
  };
  SUBCASE("adam") {
    run([](td& p) { return fg::nn::adam<double>({p}, {.lr = 0.1, .weight_decay = 0.01}); },
        [](double& q, double g, double& m, double& v, int t) {
          g += 0.01 * q;
          m = 0.9 * m + 0.1 * g;
          v = 0.999 * v + 0.001 * g * g;
          q -= 0.1 / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
        });
  }
  SUBCASE("adam with the learning rate first, as PyTorch's Adam(params, lr)") {
    run([](td& p) { return fg::nn::adam<double>({p}, 0.1, {.weight_decay = 0.01}); },
        [](double& q, double g, double& m, double& v, int t) {
          g += 0.01 * q;
          m = 0.9 * m + 0.1 * g;
          v = 0.999 * v + 0.001 * g * g;
          q -= 0.1 / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
        });
  }
  SUBCASE("adamw") {
    run([](td& p) { return fg::nn::adam<double>({p}, {.lr = 0.1, .weight_decay = 0.01, .decoupled = true}); },
        [](double& q, double g, double& m, double& v, int t) {
          q *= 1 - 0.1 * 0.01;
          m = 0.9 * m + 0.1 * g;
          v = 0.999 * v + 0.001 * g * g;
          q -= 0.1 / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
        });
  }
  SUBCASE("rmsprop") {
    run([](td& p) { return fg::nn::rmsprop<double>({p}, 0.01, 0.9, 1e-8, 0.1); },
        [](double& q, double g, double& v, double&, int) {
          g += 0.1 * q;
          v = 0.9 * v + 0.1 * g * g;
          q -= 0.01 * g / (std::sqrt(v) + 1e-8);
        });
  }
  SUBCASE("sgd with momentum and weight decay") {
    run([](td& p) { return fg::nn::sgd<double>({p}, 0.1, 0.9, 0.01); },
        [](double& q, double g, double& b, double&, int t) {
          g += 0.01 * q;
          b = t == 1 ? g : 0.9 * b + g;
          q -= 0.1 * b;
        });
  }
  CHECK_THROWS_AS(fg::nn::adam<double>({}, {.beta1 = 1.0}), fg::error);
  CHECK_THROWS_WITH_AS(fg::nn::adam<double>({}, -0.5), doctest::Contains("lr = -0.5"), fg::error);
  // Deduced from the parameters, as `sgd`'s and `rmsprop`'s are.
  std::vector<fg::tensor<float>> ps{fg::zeros<float>({2}).requires_grad(true)};
  static_assert(std::is_same_v<decltype(fg::nn::adam(ps, 0.01)), fg::nn::adam<float>>);
}

TEST_CASE("clip_grad_norm scales the joint gradient norm") {
  td a = fg::from_vector<double>({3.0}).requires_grad(true), b = fg::from_vector<double>({4.0}).requires_grad(true);
  fg::sum(a * a * 0.5 + b * b * 0.5).backward();  // gradients 3 and 4: norm 5
  CHECK(fg::nn::clip_grad_norm<double>({a, b}, 1.0) == doctest::Approx(5.0));
  CHECK(a.grad().item() == doctest::Approx(3.0 / (5 + 1e-6)));
  CHECK(b.grad().item() == doctest::Approx(4.0 / (5 + 1e-6)));
  CHECK(fg::nn::clip_grad_norm<double>({a, b}, 10.0) == doctest::Approx(1.0).epsilon(1e-6));  // below: unchanged
  CHECK(a.grad().item() == doctest::Approx(3.0 / (5 + 1e-6)));
}

TEST_CASE("sequential applies its layers in order and walks their parameters") {
  fg::nn::linear<double> l1(3, 4, true, 1), l2(4, 2, true, 2);
  auto model = fg::nn::sequential(
      l1, [](const td& x) { return fg::tanh(x); }, l2);
  const td x = fg::randn<double>({5, 3}, 3);
  const auto y = model(x), want = l2(fg::tanh(l1(x)));
  CHECK(y.to_vector() == want.to_vector());
  const auto ps = model.parameters();
  REQUIRE(ps.size() == 4);
  CHECK(ps[0].impl() == l1.weight.impl());
  CHECK(ps[1].impl() == l1.bias.impl());
  CHECK(ps[3].impl() == l2.bias.impl());
}

TEST_CASE("named parameters, state_dict and load_state_dict, as PyTorch names them") {
  const fg::nn::linear<double> lin(3, 2, true, 1), no_bias(3, 2, false, 1);
  const auto names = [](const auto& v) {
    std::vector<std::string> r;
    for (const auto& [n, t] : v) r.push_back(n);
    return r;
  };
  CHECK(names(lin.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(names(no_bias.named_parameters()) == std::vector<std::string>{"weight"});
  auto make = [](std::uint64_t seed) {
    return fg::nn::sequential(
        fg::nn::linear<double>(2, 4, true, seed), [](const auto& x) { return fg::tanh(x); },
        fg::nn::linear<double>(4, 1, true, seed + 7));
  };
  const auto net = make(1);
  CHECK(names(net.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  // The state dict holds the parameters themselves: an optimizer step shows in it.
  const auto sd = net.state_dict();
  CHECK(sd[0].second.data() == std::get<0>(net.layers()).weight.data());

  // Loading copies the values: the two networks then compute the same bits, and their
  // parameters stay their own tensors.
  const auto other = make(5);
  const td x = fg::randn<double>({6, 2}, 3);
  REQUIRE(other(x).to_vector() != net(x).to_vector());
  other.load_state_dict(net.state_dict());
  CHECK(other(x).to_vector() == net(x).to_vector());
  CHECK(std::get<0>(other.layers()).weight.data() != std::get<0>(net.layers()).weight.data());
  CHECK(std::get<0>(other.layers()).weight.requires_grad());

  // Wrong names or shapes: an error that says which, and nothing is written.
  const auto fresh = make(9);
  const auto before = fresh(x).to_vector();
  CHECK_THROWS_WITH_AS(
      fresh.load_state_dict(lin.state_dict()),
      doctest::Contains(
          "missing keys ['0.weight', '0.bias', '2.weight', '2.bias'], unexpected keys ['weight', 'bias']"),
      fg::error);
  auto bad = net.state_dict();
  bad[3].second = fg::zeros<double>({2});
  CHECK_THROWS_WITH_AS(fresh.load_state_dict(bad), doctest::Contains("'2.bias' has shape [2]; expected [1]"),
                       fg::error);
  bad = net.state_dict();
  bad.push_back(bad[0]);
  CHECK_THROWS_WITH_AS(fresh.load_state_dict(bad), doctest::Contains("'0.weight' appears twice"), fg::error);
  CHECK(fresh(x).to_vector() == before);
  // Order does not matter (a state dict is a mapping), values do.
  auto reversed = net.state_dict();
  std::reverse(reversed.begin(), reversed.end());
  fresh.load_state_dict(reversed);
  CHECK(fresh(x).to_vector() == net(x).to_vector());
}
