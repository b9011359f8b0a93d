// test_autograd: nn::linear training, in-place safety of saved parameters, and the gradient
// and buffer caches.
#include "helpers.hpp"

// =======================================================================================
// nn
// =======================================================================================

TEST_CASE("nn::linear forward shape and parameters") {
  fg::nn::linear<float> lin(10, 10);
  const auto params = lin.parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].is_same(lin.weight));
  CHECK(params[1].is_same(lin.bias));
  CHECK(lin.weight.shape() == shp({10, 10}));
  CHECK(lin.bias.shape() == shp({10}));
  for (const auto& p : params) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
    // PyTorch's init: uniform in +-1/sqrt(in_features).
    for (float v : p.to_vector()) CHECK(std::abs(v) <= 1.0f / std::sqrt(10.0f));
  }

  const auto x = fg::randn<float>({4, 10}, 1);
  const auto y = lin(x);
  CHECK(y.shape() == shp({4, 10}));
  CHECK(y.requires_grad());
  CHECK(lin(fg::randn<float>({10}, 2)).shape() == shp({10}));
  CHECK(lin(fg::randn<float>({2, 3, 10}, 3)).shape() == shp({2, 3, 10}));

  // Values: y = x W^T + b.
  fg::nn::linear<double> small(2, 1, true, 5);
  const auto in = fg::from_vector<double>({1, 2}, {1, 2});
  const double w0 = small.weight.at({0, 0}), w1 = small.weight.at({0, 1}), b0 = small.bias.at({0});
  CHECK(small(in).item() == doctest::Approx(w0 * 1 + w1 * 2 + b0));

  // Gradients: L = sum(y) -> dW[o][i] = sum_n x[n][i], db[o] = N.
  const auto xx = fg::from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  fg::sum(small(xx)).backward();
  check_values(small.weight.grad(), {1 + 3 + 5, 2 + 4 + 6});
  check_values(small.bias.grad(), {3});

  // Without bias there is one parameter.
  fg::nn::linear<float> nobias(3, 2, false);
  CHECK(nobias.parameters().size() == 1);
  CHECK_FALSE(nobias.bias.defined());
  CHECK(nobias(fg::ones<float>({5, 3})).shape() == shp({5, 2}));
}

TEST_CASE("nn: sgd + mse_loss training reduces the loss") {
  fg::nn::linear<float> lin(10, 10, true, 123);
  fg::nn::sgd<float> opt(lin.parameters(), 0.1f);
  const auto x = fg::randn<float>({32, 10}, 11);
  const auto target = fg::randn<float>({32, 10}, 12);

  std::vector<float> losses;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    for (const auto& p : lin.parameters()) CHECK_FALSE(p.grad().defined());
    const auto loss = fg::nn::mse_loss(lin(x), target);
    CHECK(loss.dim() == 0);
    losses.push_back(loss.item());
    loss.backward();
    for (const auto& p : lin.parameters()) CHECK(p.grad().defined());
    opt.step();
  }
  REQUIRE(losses.size() == 20);
  INFO("first loss " << losses.front() << ", last loss " << losses.back());
  CHECK(losses.back() < losses.front());
  for (float l : losses) CHECK(std::isfinite(l));

  opt.zero_grad();
  CHECK_FALSE(lin.weight.grad().defined());
  CHECK_FALSE(lin.bias.grad().defined());
}

TEST_CASE("nn: mse_loss and one sgd step by hand") {
  // mse(a, b) = mean((a - b)^2); d/da = 2 (a - b) / n.
  auto a = fg::from_vector<float>({1, 2, 3, 4}).requires_grad(true);
  const auto b = fg::from_vector<float>({0, 2, 5, 4});
  const auto l = fg::nn::mse_loss(a, b);
  CHECK(l.item() == doctest::Approx((1.0 + 0 + 4 + 0) / 4));
  l.backward();
  check_values(a.grad(), {0.5f, 0, -1.0f, 0});

  // p -= lr * grad, in place (same storage, same handle).
  const float* before = a.data();
  fg::nn::sgd<float> opt({a}, 0.5f);
  opt.step();
  CHECK(a.data() == before);
  check_values(a, {0.75f, 2, 3.5f, 4});

  // A parameter without a gradient is skipped.
  auto untouched = fg::from_vector<float>({1}).requires_grad(true);
  fg::nn::sgd<float> opt2({untouched}, 1.0f);
  opt2.step();
  check_values(untouched, {1});
}

// =======================================================================================
// In-place safety
// =======================================================================================

TEST_CASE("backward refuses a saved parameter modified in place by sgd") {
  fg::nn::linear<float> lin(3, 2, true, 9);
  fg::nn::sgd<float> opt(lin.parameters(), 0.1f);
  const auto x = fg::randn<float>({4, 3}, 8);

  // The right order: forward, backward, step -- no error, parameters move.
  const auto w_before = lin.weight.to_vector();
  fg::sum(lin(x)).backward();
  CHECK_NOTHROW(opt.step());
  CHECK(lin.weight.to_vector() != w_before);

  // The wrong order: forward (saves the weight), step (modifies it), then backward.
  const auto loss = fg::sum(lin(x));
  opt.step();
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("modified in place"), fg::error);
  CHECK(fg::is_grad_enabled());  // the failed backward left grad mode as it was

  // The same through a plain Mul that saved a leaf.
  auto p = fg::from_vector<float>({1, 2}).requires_grad(true);
  fg::sum(p * 1.0f).backward();  // gives p a gradient for the step
  fg::nn::sgd<float> opt2({p}, 1.0f);
  const auto y = fg::sum(p * p);
  opt2.step();
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("modified in place"), fg::error);
  try {
    y.backward();
  } catch (const fg::error& e) {
    CHECK(e.op() == "backward");
    CHECK(std::string(e.what()).find("MulBackward0") != std::string::npos);
  }

  // A graph recorded after the step is fine.
  p.zero_grad();
  fg::sum(p * p).backward();
  check_values(p.grad(), {0, 2});  // p is now {0, 1}
}

TEST_CASE("a leaf takes over a fresh gradient, but never one that someone else holds") {
  // Fresh: the gradient of sum(x * y) w.r.t. x is y * 1, a new buffer; nothing else refers to it.
  auto x = fg::randn<double>({1000}, 1).requires_grad(true);
  auto y = fg::randn<double>({1000}, 2).requires_grad(true);
  fg::sum(x * y).backward();
  CHECK(x.grad().to_vector() == y.detach().to_vector());
  CHECK(y.grad().to_vector() == x.detach().to_vector());
  // The same gradient flows to two leaves (a + b): each leaf gets its own values.
  auto a = fg::zeros<double>({1000}).requires_grad(true), b = fg::zeros<double>({1000}).requires_grad(true);
  fg::sum((a + b) * 3.0).backward();
  CHECK(a.grad().data() != b.grad().data());
  a.grad().data()[0] = 7;
  CHECK(b.grad().to_vector()[0] == 3.0);
  // A gradient the caller passes in stays the caller's.
  auto leaf = fg::zeros<double>({1000}).requires_grad(true);
  const auto g = fg::ones<double>({1000});
  leaf.backward(g);
  CHECK(leaf.grad().data() != g.data());
  // A hook's returned tensor that the hook keeps stays the hook's.
  auto h = fg::zeros<double>({1000}).requires_grad(true);
  fg::tensor<double> kept;
  h.register_hook([&](const fg::tensor<double>& gr) {
    kept = gr * 2.0;
    return kept;
  });
  fg::sum(h).backward();
  CHECK(h.grad().data() != kept.data());
  CHECK(h.grad().to_vector()[0] == 2.0);
}

TEST_CASE("the per-thread buffer cache makes room for new sizes") {
  using cache = fg::detail::buffer_cache;
  const std::size_t limit = std::size_t{512} << 20, before = fg::buffer_cache_limit();
  fg::set_buffer_cache_limit(limit);
  // Fill the cache past its byte budget with sizes a loop no longer uses...
  {
    std::vector<fg::tensor<float>> old;
    for (fg::index_t k = 0; k < 14; ++k) old.push_back(fg::zeros<float>({(40 << 20) / 4 + 1024 * k}));
  }
  CHECK(cache::cached_bytes() <= limit);
  CHECK(cache::cached_bytes() + (64u << 20) > limit);  // no room for 64 MiB without evicting
  // ...then a new size is cached (oldest buffers evicted), and comes back from the cache.
  { auto big = fg::full<float>({16 << 20}, 1.0f); }
  const std::size_t after = cache::cached_bytes();
  CHECK(after <= limit);
  CHECK(after >= (64u << 20));
  {
    auto again = fg::full<float>({16 << 20}, 2.0f);
    CHECK(cache::cached_bytes() == after - (64u << 20));  // taken from the cache, not the allocator
    CHECK(again.data()[(16 << 20) - 1] == 2.0f);
  }
  CHECK(cache::cached_buffers() <= cache::max_entries);
  fg::set_buffer_cache_limit(before);
}

TEST_CASE("a step that frees many buffers of one size keeps them all within the byte budget") {
  // A compiled forward + backward of a 40-node function over 2^20 floats frees 60 buffers of
  // 4 MiB per step: each one the cache dropped was faulted in afresh on the next step.
  using cache = fg::detail::buffer_cache;
  const std::size_t before = fg::buffer_cache_limit();
  fg::empty_cache();
  fg::set_buffer_cache_limit(std::size_t{256} << 20);
  constexpr int buffers = 200;
  constexpr fg::index_t floats = (256 << 10) / 4;  // 256 KiB each, 50 MiB in all
  {
    std::vector<fg::tensor<float>> step;
    for (int k = 0; k < buffers; ++k) step.push_back(fg::zeros<float>({floats}));
  }
  CHECK(cache::cached_buffers() == buffers);
  CHECK(cache::cached_bytes() == buffers * (std::size_t{256} << 10));
  {
    std::vector<fg::tensor<float>> step;
    for (int k = 0; k < buffers; ++k) step.push_back(fg::zeros<float>({floats}));
    CHECK(cache::cached_bytes() == 0);  // every one back from the cache
  }
  fg::empty_cache();
  fg::set_buffer_cache_limit(before);
}

TEST_CASE("the buffer cache's limit is the user's: a step's buffers stay cached; 0 keeps none; empty_cache frees") {
  using cache = fg::detail::buffer_cache;
  const std::size_t before = fg::buffer_cache_limit();
  CHECK(before >= (std::size_t{256} << 20));
  CHECK(before <= (std::size_t{4} << 30));
  fg::empty_cache();
  CHECK(cache::cached_bytes() == 0);
  // Nine buffers of 64 MiB (a step of a ten-layer chain over 2^24 floats) fit a 1 GiB limit...
  fg::set_buffer_cache_limit(std::size_t{1} << 30);
  {
    std::vector<fg::tensor<float>> step;
    for (int k = 0; k < 9; ++k) step.push_back(fg::zeros<float>({16 << 20}));
  }
  CHECK(cache::cached_bytes() == 9 * (std::size_t{64} << 20));
  // ...and a next step takes them all back from the cache.
  {
    std::vector<fg::tensor<float>> step;
    for (int k = 0; k < 9; ++k) step.push_back(fg::zeros<float>({16 << 20}));
    CHECK(cache::cached_bytes() == 0);
  }
  fg::empty_cache();
  CHECK(cache::cached_bytes() == 0);
  CHECK(cache::cached_buffers() == 0);
  // A limit of 0 keeps no large buffer.
  fg::set_buffer_cache_limit(0);
  { auto t = fg::zeros<float>({1 << 20}); }
  CHECK(cache::cached_bytes() == 0);
  fg::set_buffer_cache_limit(before);
  CHECK(fg::buffer_cache_limit() == before);
}

TEST_CASE("small buffers come back from the per-thread cache, in their size class") {
  using cache = fg::detail::buffer_cache;
  CHECK(cache::rounded(1) == 64);
  CHECK(cache::rounded(40) == 64);
  CHECK(cache::rounded(65) == 128);
  CHECK(cache::rounded((32u << 10) + 1) == (64u << 10));
  CHECK(cache::rounded(100u << 10) == (100u << 10));
  const float* first = nullptr;
  {
    auto a = fg::full<float>({10}, 1.0f);
    first = a.data();
  }
  auto b = fg::full<float>({12}, 2.0f);  // the same class (64 bytes): the same buffer, when small ones are kept
  if (cache::small_per_class > 0) CHECK(b.data() == first);
  CHECK(b.to_vector() == std::vector<float>(12, 2.0f));
  CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % fg::storage_alignment == 0);
}
