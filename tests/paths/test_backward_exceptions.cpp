// Exception safety of a backward pass: whatever throws inside it (a hook on a leaf or an
// intermediate, a custom op's backward) leaves every `.grad()` as it was before that backward,
// and the next backward is exact. One small graph, a throw at every position, on every path:
// the eager engine, a `fg::jit` function, a `fg::compile` function, and compiled autograd's
// capture and cache hit.
#include <doctest/doctest.h>

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_normwise;

namespace {

struct boom : std::exception {
  [[nodiscard]] const char* what() const noexcept override { return "boom"; }
};

/// Which position throws (-1: none): the hooks check it when they run.
int throw_at = -1;

// Positions of the graph below. Hooks: on the three leaves and on the three intermediates;
// then the custom op's backward.
constexpr int n_hooks = 6;
constexpr int custom_position = n_hooks;
constexpr int n_positions = n_hooks + 1;

/// A custom differentiable op whose backward throws at its position.
struct throwing_square {
  static constexpr std::string_view name = "ThrowingSquareBackward";
  static auto forward(const auto& x) { return x * x; }
  static auto setup_context(const auto& x, const auto&) { return fg::save_for_backward(x); }
  static auto backward(const auto& saved, const auto& g) {
    if (throw_at == custom_position) throw boom{};
    const auto& [x] = saved;
    return g * x * 2.0;
  }
};

fg::tensor<double> throwing_hook(int position, const fg::tensor<double>& g) {
  if (throw_at == position) throw boom{};
  return g;
}

enum class path { eager, jit, compile, ca_capture, ca_hit };
const char* path_name(path p) {
  switch (p) {
    case path::eager: return "eager";
    case path::jit: return "fg::jit";
    case path::compile: return "fg::compile";
    case path::ca_capture: return "compiled autograd (capture)";
    case path::ca_hit: return "compiled autograd (hit)";
  }
  return "?";
}

struct leaves {
  fg::tensor<double> a = fg::randn<double>({4, 3}, 11).requires_grad(true);
  fg::tensor<double> b = fg::randn<double>({3}, 12).requires_grad(true);  // broadcast
  fg::tensor<double> c = fg::randn<double>({4, 3}, 13).requires_grad(true);
  std::vector<fg::tensor<double>*> all() { return {&a, &b, &c}; }
};

/// u = f(a, b) on the path's own machinery; v = the custom op of u; loss = sum((u * c + v)^2).
/// Every tensor carries an opaque hook that throws at its position.
fg::tensor<double> build(leaves& l, path p) {
  static const auto jitted = fg::jit([](auto a, auto b) { return fg::cos(a) * b + a; });
  static const auto compiled = fg::compile([](auto a, auto b) { return fg::cos(a) * b + a; });
  std::vector<fg::tensor<double>*> ls = l.all();
  for (int k = 0; k < 3; ++k)
    ls[static_cast<std::size_t>(k)]->register_hook([k](const fg::tensor<double>& g) { return throwing_hook(k, g); });
  fg::tensor<double> u = p == path::jit       ? jitted(l.a, l.b)
                         : p == path::compile ? compiled(l.a, l.b)
                                              : fg::tensor<double>(fg::cos(l.a) * l.b + l.a);
  fg::tensor<double> v = fg::function<throwing_square>::apply(u);
  fg::tensor<double> w = u * l.c + v;
  int k = 3;
  for (fg::tensor<double>* t : {&u, &v, &w}) {
    t->register_hook([k](const fg::tensor<double>& g) { return throwing_hook(k, g); });
    ++k;
  }
  return fg::sum(w * w);
}

void clear_hooks(leaves& l) {
  for (auto* t : l.all()) *t = t->detach().requires_grad(true);
}

/// The leaves' gradients as values (nullopt: undefined).
std::vector<std::optional<std::vector<double>>> grads_of(leaves& l) {
  std::vector<std::optional<std::vector<double>>> r;
  for (auto* t : l.all()) r.push_back(t->grad().defined() ? std::optional(t->grad().to_vector()) : std::nullopt);
  return r;
}

/// One backward of the graph on path `p` (compiled autograd on for its two paths).
void backward_on(leaves& l, path p) {
  const fg::tensor<double> loss = build(l, p);
  if (p == path::ca_capture || p == path::ca_hit) {
    fg::compiled_autograd::enable on;
    loss.backward();
  } else {
    fg::compiled_autograd::disable off;
    loss.backward();
  }
}

/// The eager engine's gradients of one backward from fresh leaves with `l`'s values.
std::vector<fg::tensor<double>> reference(leaves& l) {
  leaves fresh;
  auto fa = fresh.all(), la = l.all();
  for (std::size_t i = 0; i < la.size(); ++i) *fa[i] = la[i]->detach().clone().requires_grad(true);
  throw_at = -1;
  backward_on(fresh, path::eager);
  std::vector<fg::tensor<double>> g;
  for (auto* t : fresh.all()) g.push_back(t->grad());
  return g;
}

void check_position(path p, int position, bool grads_before) {
  const std::string on = path_name(p);
  CAPTURE(on);
  CAPTURE(position);
  CAPTURE(grads_before);
  leaves l;
  if (grads_before || p == path::ca_hit) {  // a hit needs a captured graph of this structure
    throw_at = -1;
    backward_on(l, p);
    clear_hooks(l);
    if (!grads_before)
      for (auto* t : l.all()) t->zero_grad();
  }
  const auto before = grads_of(l);
  if (p == path::ca_capture) fg::compiled_autograd::reset();  // the next backward captures
  throw_at = position;
  CHECK_THROWS_AS(backward_on(l, p), boom);
  throw_at = -1;
  CHECK(grads_of(l) == before);  // bit for bit, undefined ones undefined
  // The next backward is exact: the gradients before plus one backward's.
  clear_hooks(l);
  const std::vector<fg::tensor<double>> g = reference(l);
  backward_on(l, p);
  const auto after = l.all();
  for (std::size_t i = 0; i < after.size(); ++i) {
    REQUIRE(after[i]->grad().defined());
    const fg::tensor<double> want =
        before[i] ? fg::tensor<double>(g[i] + fg::from_vector<double>(*before[i], g[i].shape())) : g[i];
    CHECK(max_normwise(after[i]->grad(), want) < 1e-12);
  }
}

}  // namespace

TEST_CASE("a throw at any position of a backward leaves every .grad() as it was, on every path") {
  fg::config().compiled_autograd = false;
  for (path p : {path::eager, path::jit, path::compile, path::ca_capture, path::ca_hit})
    for (int position = 0; position < n_positions; ++position) {
      // The custom op's backward is generic code, traced into the captured graph at the
      // capture: a hit replays the graph without calling it, so it cannot throw there.
      if (p == path::ca_hit && position == custom_position) continue;
      for (bool grads_before : {false, true}) check_position(p, position, grads_before);
    }
}

TEST_CASE("after a hook threw in a first compiled-autograd capture, the other leaves' gradients are readable") {
  fg::compiled_autograd::reset();
  auto x = fg::randn<double>({4}, 1).requires_grad(true);
  auto y = fg::randn<double>({4}, 2).requires_grad(true);
  y.register_hook([](const fg::tensor<double>&) -> fg::tensor<double> { throw boom{}; });
  {
    fg::compiled_autograd::enable on;
    CHECK_THROWS_AS(fg::sum(fg::exp(x) * y).backward(), boom);
  }
  CHECK_FALSE(x.grad().defined());
  auto y2 = y.detach().requires_grad(true);
  fg::compiled_autograd::enable on;
  fg::sum(fg::exp(x) * y2).backward();
  CHECK(max_normwise(x.grad(), fg::exp(x.detach()) * y2.detach()) < 1e-12);
}

TEST_CASE("a backward that throws inside a hook's own backward rolls back that backward alone") {
  auto x = fg::randn<double>({3}, 4).requires_grad(true);
  auto z = fg::randn<double>({3}, 5).requires_grad(true);
  bool inner_threw = false;
  auto y = fg::sin(x);
  y.register_hook([&](const fg::tensor<double>& g) {
    // A nested backward that accumulates into z and then throws; the hook recovers.
    fg::enable_grad on;
    auto t = fg::exp(z);
    t.register_hook([](const fg::tensor<double>&) -> fg::tensor<double> { throw boom{}; });
    try {
      fg::sum(t * z).backward();
    } catch (const boom&) { inner_threw = true; }
    return g;
  });
  fg::sum(y * z.detach()).backward();
  CHECK(inner_threw);
  CHECK_FALSE(z.grad().defined());  // the nested backward left nothing behind
  CHECK(max_normwise(x.grad(), fg::cos(x.detach()) * z.detach()) < 1e-12);
}
