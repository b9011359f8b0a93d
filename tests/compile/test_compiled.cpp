// fg::compile against the eager path: composite graphs through every backend (values and
// gradients), gradcheck of the fused path, the plan as compile-time facts, custom ops inside
// compile, gradients through differently broadcast paths, and composition with the tape.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_rel;

namespace {

// Runs `fn` eagerly and through backend B on clones of `xs`; compares outputs and gradients.
template <class B, class F, class... X>
void same_as_eager(F fn, const X&... xs) {
  std::vector<fg::tensor<double>> a{xs.detach().clone().requires_grad(true)...};
  std::vector<fg::tensor<double>> b{xs.detach().clone().requires_grad(true)...};
  auto compiled = fg::compile<B>(fn);
  auto call = [&](auto& f, auto& v) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return fg::tensor<double>(f(v[I]...)); }
    (std::index_sequence_for<X...>{});
  };
  const fg::tensor<double> ya = call(fn, a), yb = call(compiled, b);
  const auto w = fg::randn<double>(ya.shape(), 99);
  fg::sum(ya * w).backward();
  fg::sum(yb * w).backward();
  CHECK(max_rel(ya, yb) < 1e-12);
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    REQUIRE(a[i].grad().defined() == b[i].grad().defined());
    if (a[i].grad().defined()) CHECK(max_rel(a[i].grad(), b[i].grad()) < 1e-12);
  }
}

auto coscos_mul = [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; };
auto cos_cos_sum4 = [](auto a, auto b, auto c, auto d) { return fg::cos(fg::cos(a + b + c + d)); };
auto softmax = [](auto x) {
  auto e = fg::exp(x - fg::max(x, -1, true));
  return e / fg::sum(e, -1, true);
};
auto logsumexp = [](auto x) {
  auto m = fg::max(x, -1, true);
  return fg::log(fg::sum(fg::exp(x - m), -1)) + fg::max(x, -1);
};
auto mlp = [](auto x, auto w1, auto b1, auto w2, auto b2) {
  return fg::linear(fg::tanh(fg::linear(x, w1, b1)), w2, b2);
};
auto mixed_broadcast = [](auto x, auto y) { return fg::sum(x) * y + x; };
auto reductions = [](auto x) { return fg::mean(x * x) + fg::sum(fg::sin(x)) + fg::mean(fg::exp(x), -1, true); };

struct Cosine {
  static constexpr std::string_view name = "CosineBackward";
  static auto forward(const auto& x) { return fg::cos(x); }
  static auto setup_context(const auto& x, const auto&) { return fg::save_for_backward(x); }
  static auto backward(const auto& saved, const auto& g) {
    const auto& [x] = saved;
    return -fg::sin(x) * g;
  }
};
struct ScaledMul {  // a custom rule that differs from the math of forward: a's gradient is doubled
  static constexpr std::string_view name = "ScaledMulBackward";
  static auto forward(const auto& a, const auto& b) { return a * b; }
  static auto backward(const auto& saved, const auto& g) {
    const auto& [a, b] = saved;
    return std::tuple{g * b * 2.0, g * a};
  }
};
auto custom = [](auto x, auto y) {
  return fg::function<ScaledMul>::apply(fg::function<Cosine>::apply(fg::function<Cosine>::apply(x)), y);
};

// The plan, as compile-time facts.
using plan_coscos = decltype(fg::compile([](auto x) { return fg::cos(fg::cos(x)); }))::analysis<float, 1>;
static_assert(plan_coscos::plan<fg::policy::min_cut>.saved_count == 1, "min-cut saves one tensor for cos(cos(x))");
static_assert(plan_coscos::cg.kind[plan_coscos::plan<fg::policy::min_cut>.saved_nodes[0]] == fg::detail::gkind::input,
              "and it is the input");
static_assert(plan_coscos::plan<fg::policy::save_all>.saved_count == 2, "save_all keeps x and cos(x)");
static_assert(plan_coscos::plan<fg::policy::recompute_all>.saved_count == 1, "recompute_all keeps the input only");
using plan_sum4 = decltype(fg::compile(cos_cos_sum4))::analysis<float, 4>;
static_assert(plan_sum4::plan<fg::policy::min_cut>.saved_count == 1, "min-cut saves a+b+c+d only");
static_assert(plan_sum4::cg.kind[plan_sum4::plan<fg::policy::min_cut>.saved_nodes[0]] == fg::detail::gkind::pointwise,
              "the saved tensor is the sum, not an input");
static_assert(plan_sum4::plan<fg::policy::recompute_all>.saved_count == 4, "recompute_all saves the four inputs");
static_assert(plan_sum4::plan<fg::policy::memory_budget<1>>.saved_count == 1, "a budget of one picks min-cut");
// The cost-based plans: a cos costs more than saving its result, in cache or not, but cos(x)
// is recomputed beside the backward's sin(x) for the price of a select (siblings: one
// reduction gives both); an exp (2 streamed loads) costs more than an L2 store and load, less
// than a streamed pair.
static_assert(plan_coscos::plan<fg::policy::cost_cached>.saved_count == 1 &&
                  plan_coscos::plan<fg::policy::cost_cached>.recompute[1],
              "in cache, cos(x) is recomputed beside its sibling");
static_assert(plan_coscos::plan<fg::policy::cost_streamed>.saved_count == 1, "streaming too");
auto expexp_mul = [](auto x, auto y) { return fg::exp(fg::exp(x)) * y; };
using plan_expexp = decltype(fg::compile(expexp_mul))::analysis<float, 2>;
static_assert(plan_expexp::plan<fg::policy::cost_cached>.saved_count == 3,
              "in cache, exp(x) and exp(exp(x)) are saved (with y)");
static_assert(plan_expexp::plan<fg::policy::cost_streamed>.saved_count == 2, "streaming, only x and y are saved");
static_assert(decltype(fg::compile(expexp_mul))::plans_differ<float, 2>(), "so the two size classes plan differently");
static_assert(decltype(fg::compile(expexp_mul))::holds_both_plans<float, 2>(),
              "and each plan is estimated 9-18% faster in its own size class: the function holds both");

}  // namespace

TEST_CASE_TEMPLATE("compiled composite graphs equal eager", B, fg::backend::aot_eager, fg::backend::fused) {
  const auto x = fg::randn<double>({4, 37}, 1), y = fg::randn<double>({4, 37}, 2), v = fg::randn<double>({37}, 3);
  const auto s = fg::randn<double>({}, 4);
  SUBCASE("cos(cos(x)) * y") { same_as_eager<B>(coscos_mul, x, y); }
  SUBCASE("broadcast and 0-d") {
    same_as_eager<B>(coscos_mul, v, x);
    same_as_eager<B>(coscos_mul, s, v);
  }
  SUBCASE("cos(cos(a+b+c+d))") { same_as_eager<B>(cos_cos_sum4, x, v, y, s); }
  SUBCASE("softmax") { same_as_eager<B>(softmax, x); }
  SUBCASE("logsumexp") { same_as_eager<B>(logsumexp, fg::randn<double>({2, 3, 13}, 5)); }
  SUBCASE("two-layer MLP") {
    same_as_eager<B>(mlp, fg::randn<double>({6, 5}, 6), fg::randn<double>({7, 5}, 7), fg::randn<double>({7}, 8),
                     fg::randn<double>({3, 7}, 9), fg::randn<double>({3}, 10));
  }
  SUBCASE("gradients through differently broadcast paths") { same_as_eager<B>(mixed_broadcast, v, x); }
  SUBCASE("reductions") { same_as_eager<B>(reductions, x); }
  SUBCASE("custom ops with their own backward") { same_as_eager<B>(custom, x, y); }
}

TEST_CASE("fused loops: short rows, tails, stores that ride along, stages with several spaces") {
  using B = fg::backend::fused;
  // Rows shorter than one SIMD batch (every element goes through the padded tail), and a
  // row length that leaves a tail after full batches.
  same_as_eager<B>(coscos_mul, fg::randn<double>({5, 3}, 1), fg::randn<double>({3}, 2));
  same_as_eager<B>(coscos_mul, fg::randn<double>({3, 11}, 3), fg::randn<double>({3, 1}, 4));
  // An outer product: both operands broadcast, their gradients reduce over different dims.
  same_as_eager<B>([](auto a, auto b) { return fg::exp(a * b) + a; }, fg::randn<double>({6, 1}, 5),
                   fg::randn<double>({1, 9}, 6));
  // Reductions over values of different shapes in one stage: run node by node.
  same_as_eager<B>([](auto a, auto b) { return fg::sum(fg::sin(a)) * fg::mean(b * b) + fg::max(a); },
                   fg::randn<double>({3, 4}, 7), fg::randn<double>({5}, 8));
  same_as_eager<B>([](auto a, auto b) { return fg::sum(a * 2.0, -1, true) + fg::sum(b, -1, true); },
                   fg::randn<double>({3, 4}, 9), fg::randn<double>({3, 7}, 10));
}

TEST_CASE("fused loops: stages over the same rows run block by block, with the stage-by-stage loops' bits") {
  // Consecutive stages whose values line up row by row (the softmax family, a normalisation)
  // walk blocks of rows through every stage before the next block. The results must not
  // depend on where blocks end: one row per block, a partial last block, rows shorter than a
  // batch, a leading dim; and a sum over everything read by a later stage ends the group.
  using B = fg::backend::fused;
  const auto softmax_loss = [](auto x, auto g) { return fg::sum(fg::softmax(x, -1) * g); };
  const auto log_softmax_g = [](auto x, auto g) { return fg::log_softmax(x, -1) * g; };
  const auto logsumexp_g = [](auto x, auto g) { return fg::logsumexp(x, -1, true) * g; };
  const auto layer_norm = [](auto x, auto g) {
    const auto d = x - fg::mean(x, -1, true);
    return d / fg::sqrt(fg::mean(d * d, -1, true) + 1e-5) * g;
  };
  const auto total_read_later = [](auto x, auto g) { return g * fg::sum(fg::softmax(x, -1)) + fg::softmax(x, -1); };
  // Gradients relative to their largest element (a normalisation's cancel, and the two paths
  // add a row's gradient terms in different orders).
  const auto near_eager = [](auto fn, const fg::tensor<double>& x0, const fg::tensor<double>& g, double tol = 1e-12) {
    const auto a = x0.detach().clone().requires_grad(true), b = x0.detach().clone().requires_grad(true);
    const fg::tensor<double> ya = fn(a, g), yb = fg::compile<B>(fn)(b, g);
    CHECK(max_rel(ya, yb) < 1e-12);
    fg::sum(ya * ya).backward();
    fg::sum(yb * yb).backward();
    const auto ga = a.grad().to_vector(), gb = b.grad().to_vector();
    double top = 0, err = 0;
    for (std::size_t i = 0; i < ga.size(); ++i)
      top = std::max(top, std::abs(ga[i])), err = std::max(err, std::abs(ga[i] - gb[i]));
    CHECK(err <= tol * top);
  };
  for (const fg::shape& s : {fg::shape{3, 5000}, fg::shape{37, 300}, fg::shape{300, 3}, fg::shape{2, 3, 129}}) {
    CAPTURE(fg::to_string(s));
    const auto x = fg::randn<double>(s, 1) * 3.0, g = fg::randn<double>(s, 2);
    near_eager(softmax_loss, x, g);
    near_eager(log_softmax_g, x, g);
    near_eager(logsumexp_g, x, g);
    near_eager(layer_norm, x, g);
    near_eager(total_read_later, x, g, 1e-10);  // Σ softmax is constant: its gradient is cancellation noise
    // In float, bit for bit: the forward values, and softmax's gradient (its terms are summed
    // in eager's order).
    const auto xf = (fg::randn<float>(s, 3) * 3.0f), gf = fg::randn<float>(s, 4);
    const auto ea = xf.detach().clone().requires_grad(true), ca = xf.detach().clone().requires_grad(true);
    const fg::tensor<float> le = softmax_loss(ea, gf), lc = fg::compile(softmax_loss)(ca, gf);
    le.backward();
    lc.backward();
    CHECK(le.item() == lc.item());
    CHECK(ea.grad().to_vector() == ca.grad().to_vector());
    CHECK(fg::tensor<float>(log_softmax_g(xf, gf)).to_vector() == fg::compile(log_softmax_g)(xf, gf).to_vector());
    CHECK(fg::tensor<float>(logsumexp_g(xf, gf)).to_vector() == fg::compile(logsumexp_g)(xf, gf).to_vector());
    CHECK(fg::tensor<float>(layer_norm(xf, gf)).to_vector() == fg::compile(layer_norm)(xf, gf).to_vector());
    CHECK(fg::tensor<float>(total_read_later(xf, gf)).to_vector() == fg::compile(total_read_later)(xf, gf).to_vector());
  }
  // Regression: a row's sum read as it is, not broadcast back along its row: [n, n] * sum(x, -1)
  // broadcasts the [n] sums along the columns, so every row reads every row's sum and the
  // stages cannot go block by block (they did, and read sums not yet made).
  const auto by_columns = [](auto x) { return x * fg::sum(x, -1) + fg::exp(x - fg::max(x, -1, true)); };
  for (const long n : {100L, 300L}) {
    CAPTURE(n);
    const auto x = fg::randn<float>({n, n}, 5);
    CHECK(fg::tensor<float>(by_columns(x)).to_vector() == fg::compile(by_columns)(x).to_vector());
    same_as_eager<B>(by_columns, fg::randn<double>({n, n}, 6));
  }
}

TEST_CASE("fused float results agree with eager within 1e-5") {
  const auto x = fg::randn<float>({3, 41}, 1), y = fg::randn<float>({3, 41}, 2);
  auto xa = x.detach().clone().requires_grad(true), xb = x.detach().clone().requires_grad(true);
  const fg::tensor<float> ya = softmax(xa) * y, yb = fg::compile([](auto a, auto c) {
                                                  auto e = fg::exp(a - fg::max(a, -1, true));
                                                  return e / fg::sum(e, -1, true) * c;
                                                })(xb, y);
  fg::sum(ya).backward();
  fg::sum(yb).backward();
  // Values elementwise; gradients relative to the gradient's largest element, because softmax's
  // gradient (g - sum(g * s)) * s cancels, and cancelled float elements carry absolute, not
  // relative, rounding error in either path (torch.testing's atol + rtol in one number).
  const auto u = yb.to_vector(), v = ya.to_vector(), gu = xb.grad().to_vector(), gv = xa.grad().to_vector();
  float gmax = 0;
  for (const float g : gv) gmax = std::max(gmax, std::abs(g));
  REQUIRE(gmax > 0.1f);
  for (std::size_t i = 0; i < u.size(); ++i) {
    CAPTURE(i);
    CHECK(u[i] == doctest::Approx(v[i]).epsilon(1e-5));
    CHECK(std::abs(gu[i] - gv[i]) <= 1e-5f * gmax);
  }
}

TEST_CASE("regression: the exp family of doubles at NaN, infinities and huge values: C's values, eager's bits") {
  // xsimd builds exp's 2^k from k = round(x / ln 2) converted to int64 lane by lane (no
  // instruction does it below AVX-512), undefined for NaN and |k| >= 2^63; sinh, cosh, tanh,
  // sigmoid, softplus and silu go through exp or expm1. 11 elements: full batches and a tail at
  // every width (AVX2: 4 doubles, AVX-512: 8).
  auto f = [](auto x) {
    return std::tuple{fg::exp(x),  fg::expm1(x),   fg::exp2(x),     fg::sinh(x), fg::cosh(x),
                      fg::tanh(x), fg::sigmoid(x), fg::softplus(x), fg::silu(x)};
  };
  constexpr double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v = {nan, inf, -inf, 1e300, -1e300, 1e19, -1e19, 5e3, -5e3, -nan, 0.5};
  // C's values there (PyTorch's), from the ops' formulas on scalars.
  const std::vector<double (*)(double)> ref = {[](double x) { return std::exp(x); },
                                               [](double x) { return std::expm1(x); },
                                               [](double x) { return std::exp2(x); },
                                               [](double x) { return std::sinh(x); },
                                               [](double x) { return std::cosh(x); },
                                               [](double x) { return std::tanh(x); },
                                               [](double x) { return 1 / (1 + std::exp(-x)); },
                                               [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); },
                                               [](double x) { return x / (1 + std::exp(-x)); }};
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; };
  const auto x = fg::from_vector<double>(v, {static_cast<fg::index_t>(v.size())});
  const auto eager = f(x);
  const auto fused = fg::compile<fg::backend::fused>(f)(x);
  auto check = [&](int op, const fg::tensor<double>& e, const fg::tensor<double>& c) {
    CAPTURE(op);
    const auto ev = e.to_vector(), cv = c.to_vector();
    for (std::size_t i = 0; i < v.size(); ++i) {
      CAPTURE(v[i]);
      CHECK(same(cv[i], ev[i]));
      if (i + 1 < v.size()) CHECK(same(cv[i], ref[static_cast<std::size_t>(op)](v[i])));  // 0.5: xsimd's rounding
    }
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (check(static_cast<int>(I), fg::tensor<double>(std::get<I>(eager)), fg::tensor<double>(std::get<I>(fused))), ...);
  }
  (std::make_index_sequence<9>{});
}

TEST_CASE("the cost-based plan of each size class equals eager; a call picks its class by size") {
  const auto x = fg::randn<double>({4, 37}, 1), y = fg::randn<double>({4, 37}, 2);
  using F = decltype(fg::compile(expexp_mul));
  const std::vector<fg::tensor<double>> small{x, y};
  CHECK(F::size_class_for<double, 2>(small) == fg::partition::size_class::cached);
  const std::vector<fg::tensor<double>> big{fg::zeros<double>({1 << 20}), fg::zeros<double>({1 << 20})};
  CHECK(F::size_class_for<double, 2>(big) == fg::partition::size_class::streamed);
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}}) {  // the queried cache; a cache of 1 byte
    fg::set_cache_bytes(bytes);
    CAPTURE(bytes);
    CHECK(F::size_class_for<double, 2>(small) ==
          (bytes == 1 ? fg::partition::size_class::streamed : fg::partition::size_class::cached));
    same_as_eager<fg::backend::fused>(expexp_mul, x, y);
    same_as_eager<fg::backend::aot_eager>(expexp_mul, x, y);
    same_as_eager<fg::backend::fused>(coscos_mul, x, y);
    same_as_eager<fg::backend::fused>(softmax, x);
    const auto f = fg::compile(expexp_mul);
    const auto r = fg::gradcheck([&](auto... xs) { return f(xs...); }, fg::randn<double>({3, 1}, 3) * 0.3,
                                 fg::randn<double>({4}, 4));
    CHECK_MESSAGE(r, r.message);
  }
  fg::set_cache_bytes(0);
}

TEST_CASE("FUSEGRAD_LOGS=output_code names the plan a compiled function runs, per size class") {
  std::vector<std::string> lines;
  fg::logs::set("output_code");
  fg::logs::set_sink([&](fg::logs::channel, std::string_view s) { lines.emplace_back(s); });
  auto f = fg::compile([](auto x, auto y) { return fg::exp(fg::exp(x)) * y + 1.0; });  // its own plans
  const auto x = fg::randn<double>({5}, 1).requires_grad(true), y = fg::randn<double>({5}, 2);
  (void)f(x, y);
  fg::set_cache_bytes(1);
  (void)f(x, y);
  (void)f(x, y);  // logged once per plan
  fg::set_cache_bytes(0);
  fg::logs::set("");
  fg::logs::set_sink({});
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("values that fit in cache): saves 3 of") != std::string::npos);
  CHECK(lines[1].find("values that stream from memory): saves 2 of") != std::string::npos);
}

// A weight used by every layer: its gradient is a sum of one term per layer, each summed to
// the weight's shape (`sumto`). Where nothing was broadcast those sums are the identity and
// the fused backward adds the terms in the same loop (`unreduced`); a broadcast weight takes
// the general loops, which store each term and add them in a second loop.
auto tanh4 = [](auto x, auto w) { return fg::tanh(fg::tanh(fg::tanh(fg::tanh(x * w) * w) * w) * w); };
using tanh4_a = decltype(fg::compile(tanh4))::analysis<double, 2>;
using tanh4_g = fg::detail::compiled_graph_of<fg::backend::fused, fg::policy::cost_streamed, tanh4_a>;
static_assert(fg::detail::schedule_v<tanh4_a, tanh4_g::backward, tanh4_g::grad_roots>.stages == 2,
              "with its sums to shapes, the backward of the tanh chain needs a second loop");
static_assert(fg::detail::schedule_v<fg::detail::unreduced<tanh4_a>, tanh4_g::backward, tanh4_g::grad_roots>.stages ==
                  1,
              "with those sums the identity, one loop");
static_assert(fg::detail::unreduced_loops_pay<tanh4_a, tanh4_g::backward, tanh4_g::grad_roots>(),
              "so the fused backend compiles both");
static_assert(!fg::detail::unreduced_loops_pay<tanh4_a, tanh4_g::forward, tanh4_g::keep>(),
              "and the forward, which has no sum, once");
static_assert(fg::detail::stage_batches<tanh4_a, tanh4_g::forward, tanh4_g::keep, 0, double>::clusters == 4,
              "the forward's chain of four tanh runs in four clusters, one tanh in each");
using coscos_a = decltype(fg::compile(coscos_mul))::analysis<float, 2>;
using coscos_g = fg::detail::compiled_graph_of<fg::backend::fused, fg::policy::cost_cached, coscos_a>;
static_assert(fg::detail::stage_batches<coscos_a, coscos_g::forward, coscos_g::keep, 0, float>::clusters == 2,
              "cos(cos(x)) * y's forward: the two cos in two clusters, not one batch waiting on both");

TEST_CASE("a weight's gradient summed over layers: one loop unbroadcast, two broadcast, both eager's values") {
  const auto eq = [](const fg::tensor<double>& a, const fg::tensor<double>& b) {
    return a.shape() == b.shape() && a.to_vector() == b.to_vector();
  };
  // (x, w) of one shape (the one-loop backward), then w broadcast along x's rows, then x
  // broadcast along w's (the general loops); 67 elements per row leave a SIMD tail.
  const std::vector<std::pair<fg::tensor<double>, fg::tensor<double>>> cases{
      {fg::randn<double>({3, 67}, 1), fg::randn<double>({3, 67}, 2)},
      {fg::randn<double>({3, 67}, 3), fg::randn<double>({67}, 4)},
      {fg::randn<double>({67}, 5), fg::randn<double>({3, 67}, 6)}};
  for (std::size_t k = 0; k < cases.size(); ++k) {
    CAPTURE(k);
    const auto& [x, w] = cases[k];
    same_as_eager<fg::backend::fused>(tanh4, x, w);
    // Bit for bit the node-by-node backend's values (the same nodes, rounded the same way).
    std::vector<fg::tensor<double>> grads[2];
    fg::tensor<double> ys[2];
    const auto fused = fg::compile<fg::backend::fused>(tanh4);
    const auto nodes = fg::compile<fg::backend::aot_eager>(tanh4);
    for (int p = 0; p < 2; ++p) {
      auto xa = x.detach().clone().requires_grad(true), wa = w.detach().clone().requires_grad(true);
      ys[p] = p == 0 ? fused(xa, wa) : nodes(xa, wa);
      ys[p].backward(fg::randn<double>(ys[p].shape(), 7));
      grads[p] = {xa.grad(), wa.grad()};
    }
    CHECK(eq(ys[0], ys[1]));
    CHECK(eq(grads[0][0], grads[1][0]));
    CHECK(eq(grads[0][1], grads[1][1]));
    const auto r = fg::gradcheck([&](auto a, auto b) { return fused(a, b); }, x * 0.5, w);
    CHECK_MESSAGE(r, r.message);
  }
}

TEST_CASE("gradcheck of fused compiled functions") {
  const auto f = fg::compile(coscos_mul);
  auto r = fg::gradcheck([&](auto... xs) { return f(xs...); }, fg::randn<double>({3, 1}, 3), fg::randn<double>({4}, 4));
  CHECK_MESSAGE(r, r.message);
  const auto g = fg::compile(logsumexp);
  r = fg::gradcheck([&](auto... xs) { return g(xs...); }, fg::randn<double>({2, 5}, 1));
  CHECK_MESSAGE(r, r.message);
  const auto h = fg::compile(mlp);
  r = fg::gradcheck([&](auto... xs) { return h(xs...); }, fg::randn<double>({3, 4}, 1), fg::randn<double>({5, 4}, 2),
                    fg::randn<double>({5}, 3), fg::randn<double>({2, 5}, 4), fg::randn<double>({2}, 5));
  CHECK_MESSAGE(r, r.message);
}

TEST_CASE("compiled functions compose with the tape") {
  const auto f = fg::compile(coscos_mul);
  auto x = fg::randn<double>({8}, 1).requires_grad(true);
  const auto y = fg::randn<double>({8}, 2);  // does not require grad: gets none
  int hook_calls = 0;
  x.register_hook([&](const fg::tensor<double>&) { ++hook_calls; });
  const fg::tensor<double> out = f(f(x, y), y) * 3.0;
  CHECK(f(x, y).grad_fn_name() == "CompiledFunctionBackward");
  fg::sum(out).backward();
  CHECK(hook_calls == 1);
  CHECK_FALSE(y.grad().defined());
  auto x2 = x.detach().clone().requires_grad(true);
  fg::sum(coscos_mul(coscos_mul(x2, y), y) * 3.0).backward();
  CHECK(max_rel(x.grad(), x2.grad()) < 1e-12);
  {
    fg::no_grad guard;
    CHECK_FALSE(f(x, y).requires_grad());
  }
  // Shapes are run-time: one compiled object serves every size.
  for (fg::index_t n : {1, 7, 64}) CHECK(f(fg::ones<double>({n}), fg::ones<double>({n})).numel() == n);
}

TEST_CASE("outputs that are one value twice, or an input, are each their own tensor") {
  // The outputs are taken out of the call's values: the second output of one node is a copy of
  // the first, never the value left behind; an input given back is a copy of it.
  const auto f = fg::compile([](auto x, auto y) { return std::tuple{x * y, x * y, x}; });
  const auto x0 = fg::randn<double>({6}, 21), y0 = fg::randn<double>({6}, 22);
  for (bool grad : {false, true}) {
    CAPTURE(grad);
    auto x = x0.detach().requires_grad(grad), y = y0.detach().requires_grad(grad);
    const auto [a, b, c] = f(x, y);
    const fg::tensor<double> p = x0 * y0;
    CHECK(a.to_vector() == p.to_vector());
    CHECK(b.to_vector() == p.to_vector());
    CHECK(c.to_vector() == x0.to_vector());
    CHECK(a.data_ptr() != b.data_ptr());
    CHECK(c.data_ptr() != x.data_ptr());
    if (!grad) continue;
    fg::sum(a * 2.0 + b * 3.0 + c).backward();
    auto x2 = x0.detach().requires_grad(true), y2 = y0.detach().requires_grad(true);
    fg::sum(x2 * y2 * 2.0 + x2 * y2 * 3.0 + x2).backward();
    CHECK(max_rel(x.grad(), x2.grad()) < 1e-14);
    CHECK(max_rel(y.grad(), y2.grad()) < 1e-14);
  }
}

TEST_CASE("compiled functions read strided inputs and strided output gradients as eager does") {
  // Inputs that are views (a transpose, a column slice, an expanded row) and a transposed
  // gradient of the output: a compiled call copies what is not contiguous, and its values and
  // gradients are eager's, bit for bit; contiguous inputs are read as they are.
  const auto f = fg::compile(coscos_mul);
  const auto base = fg::randn<double>({5, 4}, 11), wide = fg::randn<double>({4, 10}, 12),
             row = fg::randn<double>({1, 5}, 13);
  const std::vector<std::pair<fg::tensor<double>, fg::tensor<double>>> cases{{base.t(), fg::slice(wide, 1, 0, 10, 2)},
                                                                             {row.expand({4, 5}), base.t()},
                                                                             {fg::randn<double>({4, 5}, 14), base.t()}};
  for (std::size_t k = 0; k < cases.size(); ++k) {
    CAPTURE(k);
    const auto& [xv, yv] = cases[k];
    auto x1 = xv.detach().requires_grad(true), y1 = yv.detach().requires_grad(true);
    auto x2 = xv.detach().requires_grad(true), y2 = yv.detach().requires_grad(true);
    const fg::tensor<double> a = f(x1, y1), b = coscos_mul(x2, y2);
    CHECK(a.to_vector() == b.to_vector());
    const auto g = fg::randn<double>({5, 4}, 15).t();  // [4, 5], not contiguous
    a.backward(g);
    b.backward(g);
    CHECK(x1.grad().to_vector() == x2.grad().to_vector());
    CHECK(y1.grad().to_vector() == y2.grad().to_vector());
  }
}

TEST_CASE("a compiled function remembers the shapes of its calls: changing shapes, eager's values, errors") {
  // One compiled object called on ten sets of shapes in turn, twice (more than its memo keeps,
  // so plans are dropped and made again), with broadcasting and reductions whose shapes
  // follow the inputs'. Every call must give the values of a fresh compiled object (which
  // infers every shape) bit for bit, and eager's; a call that fails a shape check fails every
  // time, and leaves nothing behind.
  const auto softmax_mul = [](auto x, auto y) {
    auto e = fg::exp(x - fg::max(x, -1, true));
    return fg::cos(fg::cos(x)) * y + e / fg::sum(e, -1, true);
  };
  const std::vector<std::pair<fg::shape, fg::shape>> shapes{
      {{2, 5}, {5}}, {{3, 5}, {5}},       {{2, 5}, {1}}, {{1, 5}, {2, 5}}, {{4, 1}, {4, 3}},
      {{7}, {7}},    {{2, 3, 4}, {3, 1}}, {{1}, {6}},    {{6}, {1}},       {{3, 67}, {67}}};
  const auto check_all = [&](auto backend) {
    using B = decltype(backend);
    const auto f = fg::compile<B>(softmax_mul);
    for (int round = 0; round < 2; ++round)
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        CAPTURE(round);
        CAPTURE(k);
        const auto seed = static_cast<std::uint64_t>(10 * k + 1);
        const auto x = fg::randn<double>(shapes[k].first, seed), y = fg::randn<double>(shapes[k].second, seed + 1);
        fg::tensor<double> outs[3], gx[3], gy[3];
        for (int p = 0; p < 3; ++p) {  // the remembering object, a fresh one, eager
          auto xa = x.detach().clone().requires_grad(true), ya = y.detach().clone().requires_grad(true);
          outs[p] = p == 0 ? f(xa, ya) : p == 1 ? fg::compile<B>(softmax_mul)(xa, ya) : softmax_mul(xa, ya);
          outs[p].backward(fg::randn<double>(outs[p].shape(), seed + 2));
          gx[p] = xa.grad();
          gy[p] = ya.grad();
        }
        REQUIRE(outs[0].shape() == outs[2].shape());
        CHECK(outs[0].to_vector() == outs[1].to_vector());
        CHECK(gx[0].to_vector() == gx[1].to_vector());
        CHECK(gy[0].to_vector() == gy[1].to_vector());
        CHECK(max_rel(outs[0], outs[2]) < 1e-12);
        CHECK(max_rel(gx[0], gx[2]) < 1e-12);
        CHECK(max_rel(gy[0], gy[2]) < 1e-12);
      }
    for (int twice = 0; twice < 2; ++twice)
      CHECK_THROWS_WITH_AS((void)f(fg::ones<double>({2, 3}), fg::ones<double>({4})),
                           doctest::Contains("[2, 3] and [4]"), fg::error);
    CHECK(f(fg::ones<double>({2, 3}), fg::ones<double>({3})).shape() == fg::shape{2, 3});
  };
  check_all(fg::backend::fused{});
  check_all(fg::backend::aot_eager{});
}

TEST_CASE("the loops' choices kept for known shapes still follow the thread count of each call") {
  // A call on known shapes reads the kept choice of each stage's loop; whether the plain pass
  // runs on this thread or the row is split among threads is decided per call. Either order,
  // every call: eager's values and gradients, bit for bit.
  const int threads_before = fg::get_num_threads();
  const fg::index_t grain_before = fg::detail::set_parallel_grain(256);  // 4096 elements split
  for (const std::vector<int>& order : {std::vector<int>{1, 2, 1}, std::vector<int>{2, 1, 2}}) {
    const auto f = fg::compile([](auto x, auto y, auto z) { return fg::exp(x) * y + z; });
    const auto x0 = fg::randn<float>({4096}, 31), y0 = fg::randn<float>({4096}, 32), z0 = fg::randn<float>({4096}, 33);
    auto xe = x0.detach().requires_grad(true), ye = y0.detach().requires_grad(true);
    const fg::tensor<float> e = fg::exp(xe) * ye + z0;
    const auto g = fg::randn<float>({4096}, 34);
    e.backward(g);
    for (const int threads : order) {
      CAPTURE(threads);
      fg::set_num_threads(threads);
      auto x = x0.detach().requires_grad(true), y = y0.detach().requires_grad(true);
      const fg::tensor<float> out = f(x, y, z0);
      out.backward(g);
      CHECK(out.to_vector() == e.to_vector());
      CHECK(x.grad().to_vector() == xe.grad().to_vector());
      CHECK(y.grad().to_vector() == ye.grad().to_vector());
    }
  }
  fg::detail::set_parallel_grain(grain_before);
  fg::set_num_threads(threads_before);
}

TEST_CASE("errors inside compile name the problem") {
  CHECK_THROWS_WITH_AS((void)fg::compile([](auto x) { return fg::sum(x, 0); })(fg::ones<double>({2, 3})),
                       doctest::Contains("last dim"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::compile(coscos_mul)(fg::ones<double>({2, 3}), fg::ones<double>({4})),
                       doctest::Contains("[2, 3] and [4]"), fg::error);
  CHECK_THROWS_WITH_AS((void)fg::compile([](auto a, auto b) { return fg::matmul(a, b); })(fg::ones<double>({2, 3}),
                                                                                          fg::ones<double>({4, 5})),
                       doctest::Contains("cannot be multiplied"), fg::error);
}
