// Regression tests of the eager runtime's safety (its concurrency is in test_threads.cpp,
// which the TSan preset runs):
//   - shapes whose element or byte count overflows, negative sizes, and out-of-memory throw
//      fusegrad::error naming the op and the shape, at every entry point;
//   - a 200,000-op graph is freed (and run backward, printed, hooked, traced) without
//      recursing on its depth;
//   - hooks that register or remove hooks while they run (PyTorch's semantics: the running
//      backward uses a snapshot of the list).
// Expected gradients are derived by hand, never produced by the code under test.

#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace fg = fusegrad;
using D = fg::tensor<double>;

namespace {

constexpr fg::index_t big = fg::index_t{1} << 40;  // big * big overflows a 64-bit index

/// The message of the fg::error `f` throws; fails the test when it throws nothing or
/// something else.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const fg::error& e) { return e.what(); } catch (const std::exception& e) {
    FAIL_CHECK("threw a " << typeid(e).name() << " (" << e.what() << ") instead of fusegrad::error");
    return "";
  }
  FAIL_CHECK("did not throw");
  return "";
}

/// Checks that `f` throws fusegrad::error for `op` whose message contains `part`.
template <class F>
void check_error(F&& f, const std::string& op, const std::string& part) {
  const std::string msg = error_of(f);
  INFO("message: " << msg);
  CHECK(msg.rfind("fusegrad::" + op + ": ", 0) == 0);
  CHECK(msg.find(part) != std::string::npos);
  CHECK(msg.find("expected") != std::string::npos);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;  // their allocators abort on huge requests instead of throwing
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

}  // namespace

// =======================================================================================
// Item 9: sizes that overflow, negative sizes, out of memory
// =======================================================================================

TEST_CASE("factories reject shapes whose element count overflows") {
  const std::string two40 = "[1099511627776, 1099511627776]";
  check_error([&] { (void)fg::zeros<float>({big, big}); }, "zeros", two40);
  check_error([&] { (void)fg::ones<float>({(fg::index_t{1} << 62) + 1, 4}); }, "ones", "[4611686018427387905, 4]");
  check_error([&] { (void)fg::full<double>({big, big}, 2.0); }, "full", two40);
  check_error([&] { (void)fg::randn<double>({big, big}); }, "randn", two40);
  check_error([&] { (void)fg::rand<double>({big, big}); }, "rand", two40);
  // An empty shape too: its contiguous strides would overflow.
  check_error([&] { (void)fg::zeros<float>({big, big, 0}); }, "zeros", "[1099511627776, 1099511627776, 0]");
  // From user data: the count check must not be fooled by a wrapped-around product.
  check_error(
      [&] {
        (void)fg::from_vector<float>({1, 2, 3, 4}, {(fg::index_t{1} << 62) + 1, 4});
      },
      "from_vector", "[4611686018427387905, 4]");
  float buf[4] = {1, 2, 3, 4};
  check_error(
      [&] {
        (void)fg::view_of<float>(buf, {(fg::index_t{1} << 62) + 1, 4});
      },
      "view_of", "[4611686018427387905, 4]");
  check_error([&] { (void)fg::view_of<float>(buf, {big, big}); }, "view_of", two40);
  // The largest shape that fits is accepted as a shape (a view of nothing allocates nothing).
  CHECK(fg::view_of<float>(nullptr, {0, fg::index_t{1} << 31, fg::index_t{1} << 31}).numel() == 0);
}

TEST_CASE("factories reject negative sizes") {
  check_error([] { (void)fg::zeros<float>({-3, 4}); }, "zeros", "[-3, 4]");
  check_error([] { (void)fg::ones<double>({2, -1}); }, "ones", "[2, -1]");
  check_error([] { (void)fg::randn<double>({-2}); }, "randn", "[-2]");
  float buf[4] = {};
  check_error([&] { (void)fg::view_of<float>(buf, {-4}); }, "view_of", "[-4]");
  check_error([] { (void)fg::from_vector<float>({}, {-1, 0}); }, "from_vector", "[-1, 0]");
  check_error([] { (void)fg::arange<float>(-5); }, "arange", "-5");
}

TEST_CASE("a byte count that overflows, and out of memory, are fusegrad::errors") {
  // 2^61 doubles are 2^64 bytes: the byte count wraps around to 0.
  check_error([] { (void)fg::zeros<double>({fg::index_t{1} << 61}); }, "zeros", "[2305843009213693952]");
  if (sanitized) return;
  // 2^50 floats (4 PiB) exist on no machine: the allocator refuses at once.
  check_error([] { (void)fg::zeros<float>({fg::index_t{1} << 50}); }, "zeros",
              "out of memory allocating 4503599627370496 bytes");
  // An op's result: a broadcast view of one element, made real.
  const auto wide = fg::ones<float>({1}).expand({fg::index_t{1} << 50});
  check_error([&] { (void)fg::exp(wide); }, "exp", "[1125899906842624]");
  check_error([&] { (void)wide.contiguous(); }, "contiguous", "out of memory");
  check_error([&] { (void)(wide + wide); }, "add", "out of memory");
}

TEST_CASE("reshape, view and expand reject results whose element count overflows") {
  const auto e = fg::zeros<float>({0, 4});
  check_error([&] { (void)e.reshape({big, big, 0}); }, "reshape", "[1099511627776, 1099511627776, 0]");
  check_error([&] { (void)e.view({big, big, 0}); }, "view", "[1099511627776, 1099511627776, 0]");
  check_error(
      [&] {
        (void)fg::zeros<float>({big, 0}).reshape({-1, big, big});
      },
      "reshape", "1099511627776, 1099511627776]");
  check_error([&] { (void)e.reshape({-2, 0}); }, "reshape", "-2");
  const auto one = fg::zeros<float>({1}).requires_grad(true);
  check_error([&] { (void)one.expand({big, big}); }, "expand", "[1099511627776, 1099511627776]");
  check_error([&] { (void)one.expand({-2}); }, "expand", "-2");
  // Shapes that fit still work, with -1 inferred from the others.
  CHECK(fg::zeros<float>({6, 4}).reshape({-1, 8}).shape() == fg::shape{3, 8});
  CHECK(fg::zeros<float>({0, 4}).reshape({big, 0, 4}).numel() == 0);
}

TEST_CASE("broadcasting, matmul and cat reject results whose element count overflows") {
  // Each operand is empty and fits; their broadcast shape does not.
  const auto a = fg::zeros<double>({big, 1, 0}).requires_grad(true), b = fg::zeros<double>({1, big, 0});
  const std::string both = "[1099511627776, 1099511627776, 0]";
  check_error([&] { (void)(a * b); }, "mul", both);
  check_error([&] { (void)(a + b); }, "add", both);
  check_error(
      [&] {
        (void)fg::matmul(fg::zeros<double>({big, 0}), fg::zeros<double>({0, big}));
      },
      "matmul", "1099511627776, 1099511627776]");
  check_error(
      [&] {
        (void)fg::matmul(fg::zeros<double>({big, 1, 2, 0}), fg::zeros<double>({1, big, 0, 3}));
      },
      "matmul", "[1099511627776, 1099511627776]");
  const auto half = fg::zeros<float>({0, fg::index_t{1} << 62});
  check_error([&] { (void)fg::cat(std::vector<fg::tensor<float>>{half, half, half}, 1); }, "cat", "dim 1");
  // The jit's and fg::compile's shape inference go through the same check.
  auto jitted = fg::jit([](const D& x, const D& y) { return fg::sin(x) * y; });
  check_error([&] { (void)jitted(a, b); }, "mul", both);
  auto compiled = fg::compile([](auto x, auto y) { return fg::sin(x) * y; });
  check_error([&] { (void)compiled(a, b); }, "mul", both);
}

TEST_CASE("slice with a huge step does not overflow") {
  const auto x = fg::arange<double>(10).requires_grad(true);
  const auto s = x.slice(0, 2, 9, std::numeric_limits<fg::index_t>::max());
  REQUIRE(s.shape() == fg::shape{1});
  CHECK(s.at({0}) == 2.0);
  fg::sum(s * 3.0).backward();
  const auto g = x.grad().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (i == 2 ? 3.0 : 0.0));
}

// =======================================================================================
// Item 10: deep graphs are freed, run and walked without recursing on their depth
// =======================================================================================

namespace {
constexpr int depth = 200000;

/// x, then `depth` ops alternating * 2 and * 0.5: d sum(y) / dx = 1 everywhere.
D deep_chain(const D& x) {
  D y = x;
  for (int i = 0; i < depth; ++i) y = y * (i % 2 ? 0.5 : 2.0);
  return y;
}
}  // namespace

TEST_CASE("a 200,000-op chain is freed without backward") {
  const auto x = fg::ones<double>({2}).requires_grad(true);
  {
    const D y = deep_chain(x);
    CHECK(y.grad_fn_name() == "MulBackward1");
  }  // dropped here: 200,000 nested node destructors overflowed the stack
  CHECK_FALSE(x.grad().defined());
  CHECK(x.requires_grad());
}

TEST_CASE("backward through a 200,000-op chain, then freeing it") {
  const auto x = fg::ones<double>({2}).requires_grad(true);
  {
    const D y = deep_chain(x);
    fg::sum(y).backward();
  }
  REQUIRE(x.grad().defined());
  CHECK(x.grad().to_vector() == std::vector<double>{1.0, 1.0});
}

TEST_CASE("a 70,000-step diamond chain (210,000 nodes) with hooks, retain_graph and printing") {
  const auto x = fg::ones<double>({3}).requires_grad(true);
  int mid_calls = 0, root_calls = 0;
  {
    D y = x;
    D mid;
    for (int i = 0; i < 70000; ++i) {
      y = y * 0.25 + y * 0.75;  // two users of y per step: d/dy = 1
      if (i == 35000) mid = y;
    }
    mid.register_hook([&](const D& g) {
      ++mid_calls;
      return g * 2.0;
    });
    y.register_hook([&](const D&) { ++root_calls; });
    fg::sum(y).backward(fg::backward_options{.retain_graph = true});
    fg::sum(y).backward();
    std::ostringstream os;
    os << y;
    CHECK(os.str().find("grad_fn=<AddBackward0>") != std::string::npos);
    mid = D{};
  }  // y dropped here, its graph held by nothing else
  CHECK(mid_calls == 2);
  CHECK(root_calls == 2);
  REQUIRE(x.grad().defined());
  for (double g : x.grad().to_vector()) CHECK(g == doctest::Approx(4.0));  // 2 backwards, * 2 by the hook
}

TEST_CASE("compiled autograd over a 200,000-op chain") {
  const auto x = fg::ones<double>({2}).requires_grad(true);
  {
    const D y = deep_chain(x);
    fg::compiled_autograd::enable on;
    fg::sum(y).backward();
  }
  REQUIRE(x.grad().defined());
  CHECK(x.grad().to_vector() == std::vector<double>{1.0, 1.0});
}

TEST_CASE("fg::jit tracing a 200,000-op function") {
  const auto x = fg::ones<double>({2}).requires_grad(true);
  auto f = fg::jit([](const D& a) { return fg::sum(deep_chain(a)); });
  const D out = f(x);
  CHECK(out.item() == doctest::Approx(2.0));
  out.backward();
  REQUIRE(x.grad().defined());
  for (double g : x.grad().to_vector()) CHECK(g == doctest::Approx(1.0));
}

// =======================================================================================
// Item 12: hooks that register or remove hooks while they run
// =======================================================================================

TEST_CASE("a leaf hook that registers hooks: the new ones run from the next backward") {
  auto w = fg::ones<double>({3}).requires_grad(true);
  int outer = 0, inner = 0;
  D ww = w;  // the hook's handle to its own leaf
  w.register_hook([&](const D&) {
    ++outer;
    for (int k = 0; k < 16; ++k) ww.register_hook([&](const D&) { ++inner; });  // reallocates the list
  });
  fg::sum(w * 2.0).backward();
  CHECK(outer == 1);
  CHECK(inner == 0);
  fg::sum(w * 2.0).backward();
  CHECK(outer == 2);
  CHECK(inner == 16);
  for (double g : w.grad().to_vector()) CHECK(g == 4.0);
}

TEST_CASE("a leaf hook that removes itself while another hook exists") {
  auto w = fg::ones<double>({3}).requires_grad(true);
  D ww = w;
  int a = 0, b = 0;
  std::uint64_t id = 0;
  id = w.register_hook([&](const D& g) {
    ++a;
    CHECK(ww.remove_hook(id));  // destroys the running hook's entry in the list
    return g * 2.0;
  });
  w.register_hook([&](const D&) { ++b; });
  fg::sum(w * 1.0).backward();  // the first hook doubles: grad 2
  fg::sum(w * 1.0).backward();  // removed: grad 2 + 1
  CHECK(a == 1);
  CHECK(b == 2);
  for (double g : w.grad().to_vector()) CHECK(g == 3.0);
}

TEST_CASE("a hook that removes a later hook: the running backward still calls it (a snapshot)") {
  auto w = fg::ones<double>({2}).requires_grad(true);
  D ww = w;
  int first = 0, second = 0;
  std::uint64_t later = 0;
  w.register_hook([&](const D&) {
    ++first;
    ww.remove_hook(later);
  });
  later = w.register_hook([&](const D&) { ++second; });
  fg::sum(w).backward();
  fg::sum(w).backward();
  CHECK(first == 2);
  CHECK(second == 1);
}

TEST_CASE("pre-hooks of an intermediate that register and remove hooks while running") {
  const auto x = fg::ones<double>({3}).requires_grad(true);
  D y = x * 3.0;
  D yy = y;
  int a = 0, b = 0, c = 0;
  std::uint64_t id = 0;
  id = y.register_hook([&](const D& g) {
    ++a;
    yy.remove_hook(id);
    for (int k = 0; k < 16; ++k) yy.register_hook([&](const D&) { ++c; });
    return g * 2.0;
  });
  y.register_hook([&](const D&) { ++b; });
  fg::sum(y).backward(fg::backward_options{.retain_graph = true});  // 3 * 2
  fg::sum(y).backward();                                            // + 3
  CHECK(a == 1);
  CHECK(b == 2);
  CHECK(c == 16);
  for (double g : x.grad().to_vector()) CHECK(g == 9.0);
}

TEST_CASE("a stateful hook keeps its state across backwards (the snapshot shares it)") {
  auto w = fg::ones<double>({2}).requires_grad(true);
  int seen = 0;
  w.register_hook([n = 0, &seen](const D& g) mutable {
    seen = ++n;
    return g * static_cast<double>(n);
  });
  fg::sum(w).backward();  // * 1
  fg::sum(w).backward();  // * 2
  fg::sum(w).backward();  // * 3
  CHECK(seen == 3);
  for (double g : w.grad().to_vector()) CHECK(g == 6.0);
}

TEST_CASE("hooks that register hooks under compiled autograd") {
  auto w = fg::ones<double>({2}).requires_grad(true);
  D ww = w;
  int outer = 0, inner = 0;
  w.register_hook([&](const D& g) {
    ++outer;
    ww.register_hook([&](const D&) { ++inner; });
    return g;
  });
  fg::compiled_autograd::enable on;
  fg::sum(w * 2.0).backward();
  fg::sum(w * 2.0).backward();
  CHECK(outer == 2);
  CHECK(inner == 1);
  for (double g : w.grad().to_vector()) CHECK(g == 4.0);
}

TEST_CASE("reused_vector: a scope's buffer is the thread's next one; a nested scope gets its own") {
  // What a compiled function's calls keep their node values in (compile/compiled_graph.hpp).
  struct tag;
  using reused = fg::detail::reused_vector<fg::tensor<float>, tag>;
  const fg::tensor<float> a = fg::ones<float>({3});
  const fg::tensor<float>* first = nullptr;
  {
    reused v;
    v->resize(4, a);
    first = v->data();
    {
      reused nested;  // the thread's buffer is taken: a buffer of its own, empty
      CHECK(nested->empty());
      nested->resize(2);
      CHECK(nested->data() != first);
    }
    CHECK(v->size() == 4);  // the outer scope's values untouched by the nested one
    CHECK(v->data() == first);
    for (const auto& t : *v) CHECK(t.is_same(a));
  }
  CHECK(a.raw_impl().use_count() == 1);  // the values went with the scope
  reused again;
  CHECK(again->empty());
  CHECK(again->capacity() >= 4);  // the larger buffer was kept for the next scope
}

TEST_CASE("small_vector: resize_for_overwrite keeps the elements it had, inline and past it") {
  // The jit's signature makes room for its words this way and then writes them: the old words
  // must survive a growth from inline storage to the heap, and the size be the one asked.
  using sv = fg::small_vector<std::int64_t, 4>;
  for (std::size_t had : {0u, 2u, 4u, 6u})
    for (std::size_t grow : {0u, 1u, 3u, 9u}) {
      CAPTURE(had);
      CAPTURE(grow);
      sv v;
      for (std::size_t i = 0; i < had; ++i) v.push_back(static_cast<std::int64_t>(10 + i));
      v.resize_for_overwrite(had + grow);
      REQUIRE(v.size() == had + grow);
      CHECK(v.capacity() >= had + grow);
      for (std::size_t i = 0; i < had; ++i) CHECK(v[i] == static_cast<std::int64_t>(10 + i));
      for (std::size_t i = had; i < had + grow; ++i) v[i] = -static_cast<std::int64_t>(i);  // the caller's writes
      for (std::size_t i = had; i < had + grow; ++i) CHECK(v[i] == -static_cast<std::int64_t>(i));
    }
  sv shrink{1, 2, 3};
  shrink.resize_for_overwrite(1);  // shrinking keeps the prefix, as resize does
  CHECK(shrink.size() == 1);
  CHECK(shrink[0] == 1);
}

TEST_CASE("small_vector: copies and moves between inline and heap storage keep the values") {
  // shape and strides hold up to 6 dims inline; past that, on the heap. Every pairing of the
  // two forms through copy and move, construction and assignment, against std::vector.
  using sv = fg::small_vector<fg::index_t, 6>;
  auto make = [](std::size_t n, fg::index_t from) {
    sv v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(from + static_cast<fg::index_t>(i));
    return v;
  };
  auto same = [](const sv& v, std::size_t n, fg::index_t from) {
    std::vector<fg::index_t> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = from + static_cast<fg::index_t>(i);
    return std::vector<fg::index_t>(v.begin(), v.end()) == want;
  };
  for (std::size_t a : {0u, 3u, 6u, 7u, 12u})
    for (std::size_t b : {0u, 2u, 6u, 9u}) {
      CAPTURE(a);
      CAPTURE(b);
      sv x = make(a, 100), y = make(b, 200);
      sv c(x);
      CHECK(same(c, a, 100));
      c = y;  // copy-assign over either form
      CHECK(same(c, b, 200));
      sv m = make(a, 300);
      m = make(b, 400);  // move-assign over either form
      CHECK(same(m, b, 400));
      sv src = make(b, 500);
      sv moved(std::move(src));
      CHECK(same(moved, b, 500));
      moved.push_back(7);  // still usable, growing past inline storage where it must
      CHECK(moved.size() == b + 1);
      CHECK(moved.back() == 7);
      CHECK(same(x, a, 100));  // sources of copies unchanged
      CHECK(same(y, b, 200));
      // Equality: sizes first, then every element, whatever the storage.
      CHECK(sv(x) == x);
      CHECK((make(a, 100) == make(b, 100)) == (a == b));
      if (a > 0) {
        sv z = x;
        z[a - 1] += 1;  // the last element differs
        CHECK_FALSE(z == x);
        CHECK(z != x);
      }
    }
}

TEST_CASE("linear reads a dense view whose dims of size 1 have other strides as the dense tensor it is") {
  // Found by the differential fuzzer at 16 threads (`--seed 2`, graph 66): linear(x [1, 4, 1, 10])
  // under a permute, whose backward hands linear a [1, 4, 1, 1] gradient with strides
  // [4, 1, 4, 4]. Such a view is dense (is_contiguous: a dim of size 1 steps nowhere), so it
  // was read in place, and its rows were taken to step by the stride of the dim of size 1
  // before the last (4 instead of 1): reads past the gradient's 4 values (AddressSanitizer: a
  // heap-buffer-overflow) and a wrong gradient. The same view as linear's input gave wrong rows.
  using td = fg::tensor<double>;
  const td w = fg::randn<double>({3, 10}, 2), b = fg::randn<double>({3}, 3);
  // An input [4, 1, 10] with strides [10, 1, 1]: dense, its dim of size 1 stepping by 1.
  const td x_view = fg::randn<double>({4, 10, 1}, 1).permute({0, 2, 1});
  REQUIRE(x_view.is_contiguous());
  REQUIRE(x_view.strides()[1] != 10);
  const td x_dense = x_view.clone();  // contiguous() would hand back the view itself
  REQUIRE(x_dense.strides() == fg::strides{10, 10, 1});
  CHECK(fg::linear(x_view, w, b).to_vector() == fg::linear(x_dense, w, b).to_vector());
  CHECK(fg::linear(x_view, w).to_vector() == fg::matmul(x_dense, w.t()).to_vector());

  // The fuzzer's graph: the gradient of linear arrives as that kind of view.
  td x = fg::randn<double>({1, 4, 1, 10}, 4).requires_grad(true);
  td w1 = fg::randn<double>({1, 10}, 5).requires_grad(true);
  td b1 = fg::randn<double>({1}, 6).requires_grad(true);
  const td g = fg::randn<double>({1, 1, 1, 4}, 7);
  const auto grads = [&](const td& gy) {
    x.zero_grad();
    w1.zero_grad();
    b1.zero_grad();
    fg::linear(x, w1, b1).backward(gy);
    return std::vector<std::vector<double>>{x.grad().to_vector(), w1.grad().to_vector(), b1.grad().to_vector()};
  };
  const td gy_view = g.permute({0, 3, 2, 1});  // [1, 4, 1, 1], strides [4, 1, 4, 4]
  REQUIRE(gy_view.is_contiguous());
  const td gy_dense = gy_view.clone();
  REQUIRE(gy_dense.strides() == fg::strides{4, 1, 1, 1});
  const auto from_view = grads(gy_view), from_dense = grads(gy_dense);
  CHECK(from_view == from_dense);
  // Row i of x's gradient is g_i w1 (rows differ: the wrong reads gave equal or zero rows).
  const auto gx = from_dense[0], wv = w1.to_vector(), gv = g.to_vector();
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t k = 0; k < 10; ++k) CHECK(gx[i * 10 + k] == doctest::Approx(gv[i] * wv[k]));
  // And through the fuzzer's ops, against finite differences.
  const auto f = [](const td& a, const td& c, const td& d) {
    return fg::sum(fg::linear(a, c, d).permute({0, 3, 2, 1}), std::vector<fg::index_t>{2}, false) *
           fg::from_vector<double>({0.5, -0.2, 0.1, -0.8}, {1, 1, 4});
  };
  CHECK(fg::gradcheck(f, x, w1, b1));
}
