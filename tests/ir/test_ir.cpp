// The run-time IR: graphs built by calling fusegrad's ops on ir::value (the same generic
// functions that run eagerly), run by the tile interpreter, and differentiated at run time
// with each op's own derivative rule; everything against the eager path.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"
#include <fusegrad/ir/backward.hpp>
#include <fusegrad/jit/program.hpp>

namespace fg = fusegrad;

namespace {
/// Sets fg::last_cache_bytes() for a scope (the run-time programs' long tiles follow it).
struct last_cache_guard {
  explicit last_cache_guard(std::size_t bytes) { fg::set_last_cache_bytes(bytes); }
  ~last_cache_guard() { fg::set_last_cache_bytes(0); }
  last_cache_guard(const last_cache_guard&) = delete;
  last_cache_guard& operator=(const last_cache_guard&) = delete;
};
}  // namespace
using fusegrad_test::max_normwise;
using fusegrad_test::max_rel;

namespace {

// Builds fn's graph on IR values of the inputs' shapes, runs it and its backward, and compares
// values and gradients with eager (the same fn on tensors).
template <class F, class... X>
void same_as_eager(F fn, const X&... xs) {
  std::vector<fg::tensor<double>> in{xs.detach().clone()...};
  // Eager.
  std::vector<fg::tensor<double>> ea;
  for (const auto& t : in) ea.push_back(t.detach().clone().requires_grad(true));
  const fg::tensor<double> ye = [&]<std::size_t... I>(std::index_sequence<I...>) { return fn(ea[I]...); }
  (std::index_sequence_for<X...>{});
  const auto w = fg::randn<double>(ye.shape(), 77);
  fg::sum(ye * w).backward();
  // IR.
  fg::ir::graph<double> g;
  std::vector<fg::ir::value<double>> v;
  for (const auto& t : in) v.emplace_back(&g, g.add_input(t.shape()));
  const int out = [&]<std::size_t... I>(std::index_sequence<I...>) { return fn(v[I]...).id; }
  (std::index_sequence_for<X...>{});
  std::vector<int> wrt;
  for (const auto& x : v) wrt.push_back(x.id);
  const std::vector<int> grads = fg::ir::backward(g, {out}, wrt);
  std::vector<int> outputs{out};
  for (int gi : grads) {
    REQUIRE(gi >= 0);
    outputs.push_back(gi);
  }
  const fg::detail::jit::program<double> prog(g, outputs);
  std::vector<fg::tensor<double>> args = in;
  args.push_back(w);  // the output's gradient is the graph's last input
  const auto r = prog.run(args);
  CHECK(max_rel(ye, r[0]) < 1e-12);
  for (std::size_t i = 0; i < ea.size(); ++i) {
    CAPTURE(i);
    CHECK(max_normwise(ea[i].grad(), r[i + 1]) < 1e-12);
  }
}

}  // namespace

TEST_CASE("IR graphs of pointwise ops equal eager, values and gradients") {
  const auto x = fg::randn<double>({1000}, 1), y = fg::randn<double>({1000}, 2),
             z = fg::abs(fg::randn<double>({1000}, 3));
  SUBCASE("cos(cos(x)) * y") {
    same_as_eager([](auto a, auto b) { return fg::cos(fg::cos(a)) * b; }, x, y);
  }
  SUBCASE("every unary op") {
    same_as_eager(
        [](auto a, auto b) {
          return fg::exp(a * 0.3) + fg::log(b + 2.0) + fg::sin(a) - fg::tanh(b) * fg::sigmoid(a) +
                 fg::relu(a) / (fg::abs(b) + 1.0) + fg::sqrt(b + 3.0) + fg::pow(b + 2.0, 1.5) + fg::pow(a, 3.0) + (-a);
        },
        x, z);
  }
  SUBCASE("binary ops, maximum, pow with a tensor exponent, scalars on both sides") {
    same_as_eager(
        [](auto a, auto b) {
          return fg::maximum(a, b) * (2.0 - a) / (b + 3.0) + fg::pow(b + 2.0, a * 0.5) + 1.0 / (a * a + 1.0);
        },
        x, z);
  }
  SUBCASE("an operand used twice frees its tile register once (x * x, then more live values)") {
    same_as_eager(
        [](auto a, auto b) {
          auto c = fg::cos(a);
          auto d = c * c;
          auto e = fg::sin(b) + d;
          return d * fg::exp(a * 0.1) + e * (b + 1.0) + fg::tanh(e);
        },
        x, y);
  }
  SUBCASE("a 0-d input broadcast") {
    same_as_eager([](auto a, auto s) { return fg::sin(a) * s + s * s; }, x, fg::randn<double>({}, 4));
  }
}

TEST_CASE("IR graphs with full reductions (a softmax over everything) equal eager") {
  const auto x = fg::randn<double>({3, 333}, 5);
  same_as_eager(
      [](auto a) {
        auto e = fg::exp(a - fg::max(a));
        return e / fg::sum(e) + fg::mean(a * a);
      },
      x);
  // Lengths that are not a multiple of the tile or of a SIMD batch, and a single element.
  for (fg::index_t n : {1, 7, 512, 513, 1500}) {
    CAPTURE(n);
    same_as_eager([](auto a) { return fg::cos(a) * fg::mean(fg::sin(a)); }, fg::randn<double>({n}, 6));
  }
}

TEST_CASE("IR programs: loops, registers and errors") {
  fg::ir::graph<float> g;
  const fg::ir::value<float> a{&g, g.add_input({4096})};
  const auto m = fg::mean(fg::cos(a));
  const auto y = fg::sin(a) * m + 1.0;
  const fg::detail::jit::program<float> p(g, {y.id});
  CHECK(p.num_loops() == 2);  // the mean, then the pointwise pass that reads it
  const auto x = fg::randn<float>({4096}, 9);
  const auto r = p.run({x})[0];
  const auto e = fg::sin(x) * fg::mean(fg::cos(x)) + 1.0;
  const auto u = r.to_vector(), v = e.to_vector();
  for (std::size_t i = 0; i < u.size(); ++i) CHECK(u[i] == doctest::Approx(v[i]).epsilon(1e-5));
  CHECK(g.to_string().find("cos(%0)") != std::string::npos);
  CHECK_THROWS_WITH_AS(p.run({fg::ones<float>({8})}), doctest::Contains("compiled for [4096]"), fg::error);
  fg::ir::graph<double> h;
  const fg::ir::value<double> b{&h, h.add_input({3, 4})}, c{&h, h.add_input({4})};
  const auto bc = fg::exp(b * c);  // a broadcast a tile cannot express: an eager step, then a loop
  const fg::detail::jit::program<double> q(h, {bc.id});
  CHECK(q.num_steps() == 2);
  CHECK(q.num_loops() == 1);
  const auto xb = fg::randn<double>({3, 4}, 10), xc = fg::randn<double>({4}, 11);
  CHECK(max_rel(fg::exp(xb * xc), q.run({xb, xc})[0]) < 1e-14);
  CHECK_THROWS_WITH_AS(h.add_pointwise(fg::ops::add_op{}, b.id, h.add_input({5})), doctest::Contains("broadcast"),
                       fg::error);
}

TEST_CASE("IR graphs with general broadcasting (eager steps, summed-to gradients) equal eager") {
  same_as_eager([](auto a, auto b) { return fg::sin(a) * b + b; }, fg::randn<double>({4, 5}, 12),
                fg::randn<double>({5}, 13));
  same_as_eager([](auto a, auto b) { return a / b; }, fg::randn<double>({4, 5}, 14),
                fg::abs(fg::randn<double>({4, 1}, 15)) + 1.0);
}

// Regression (found by the fuzzer's slowdown over long runs): `clear()` kept the shape buffer
// of every node for reuse, also of nodes added without taking one (`add_copy`), so a long-lived
// graph (the tracer's, compiled autograd's) grew by those nodes on every graph and each copy of
// it (an entry's forward graph, a backward's joint graph) copied the whole pile.
TEST_CASE("IR graphs: the shape buffers kept for reuse stay bounded and are not copied") {
  fg::ir::graph<double> g;
  for (int round = 0; round < 1000; ++round) {
    const int x = g.add_input({3, 4});
    fg::ir::node<double> n = g.at(x);
    n.kind = fg::ir::node_kind::pointwise;
    for (int k = 0; k < 8; ++k) g.add_copy(n);
    g.clear();
  }
  CHECK(g.spare_shapes() <= 9);  // at most the largest graph's nodes
  const int x = g.add_input({3, 4});
  g.add_copy(g.at(x));
  const fg::ir::graph<double> copy = g;
  CHECK(copy.spare_shapes() == 0);
  CHECK(copy.size() == g.size());
  fg::ir::graph<double> assigned;
  assigned = g;
  CHECK(assigned.spare_shapes() == 0);
  CHECK(assigned.at(0).sizes == fg::shape{3, 4});
}

TEST_CASE("the last-level cache is the one a core sees: sysfs's figure before the C library's") {
  // glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) comes from cpuid and said 384 MiB on a virtual
  // machine whose core sees 32 MiB (lscpu, sysfs): loops that stream from memory then ran in
  // short tiles, and a captured 20-layer backward that streams from memory ran much slower
  // than in long tiles.
  fg::set_last_cache_bytes(0);  // the queried value
  CHECK(fg::last_cache_bytes() > 0);
  if (const std::size_t sysfs = fg::detail::sysfs_cache_bytes(3);
      sysfs > 0 && !std::getenv("FUSEGRAD_LAST_CACHE_BYTES"))
    CHECK(fg::last_cache_bytes() == sysfs);
}

TEST_CASE(
    "IR programs: a loop of many streams runs in long tiles, a loop of few in short ones, both with eager's bits") {
  // tile_for: many_streams streamed tensors or more -> tiles up to program::max_tile elements
  // (as long as the tile registers fit in tile_bytes) where the loop streams more than the
  // last-level cache holds; else 256. The long tiles are run over three whole tiles (or more)
  // and a partial one, with a splatted scalar; the same loop in cache, in short tiles. One
  // costly op (the tanh) does not make the loop arithmetic-bound.
  const fg::index_t n = 3 * fg::detail::jit::program<float>::max_tile + 123;
  fg::ir::graph<float> g;
  std::vector<fg::ir::value<float>> in;
  for (int i = 0; i < 12; ++i) in.emplace_back(&g, g.add_input({n}));
  const fg::ir::value<float> s{&g, g.add_input({})};
  std::vector<int> outs;
  fg::ir::value<float> h = fg::tanh(in[0]);
  for (int i = 1; i < 12; ++i) {
    h = fg::abs(h * in[static_cast<std::size_t>(i)]) * s;
    outs.push_back((h * 0.5f).id);  // 11 stored values + 12 inputs: 23 streams
  }
  const fg::detail::jit::program<float> many(g, outs);
  const std::string code = many.to_string();
  const auto at = code.find("where it streams from memory");
  REQUIRE(at != std::string::npos);
  const long tile = std::stol(code.substr(code.rfind("(of ", at) + 4));
  CHECK(tile > 256);
  CHECK(tile <= fg::detail::jit::program<float>::max_tile);
  CHECK(n > 3 * tile);
  std::vector<fg::tensor<float>> args;
  for (int i = 0; i < 12; ++i) args.push_back(fg::randn<float>({n}, 40 + static_cast<std::uint64_t>(i)));
  args.push_back(fg::full<float>({}, 0.9f));
  std::vector<fg::tensor<float>> got, in_cache;
  {
    last_cache_guard streaming(1);  // every run streams from memory: long tiles
    got = many.run(args);
  }
  {
    last_cache_guard cached(std::size_t{1} << 40);  // in cache: tiles of 256
    in_cache = many.run(args);
  }
  fg::tensor<float> e = fg::tanh(args[0]);
  for (int i = 1; i < 12; ++i) {
    e = fg::abs(e * args[static_cast<std::size_t>(i)]) * args[12];
    CHECK((e * 0.5f).to_vector() == got[static_cast<std::size_t>(i - 1)].to_vector());
    CHECK(in_cache[static_cast<std::size_t>(i - 1)].to_vector() == got[static_cast<std::size_t>(i - 1)].to_vector());
  }
  const fg::detail::jit::program<float> few(g, {outs.front()});
  CHECK(few.to_string().find("in tiles of 256") != std::string::npos);
  CHECK(few.run(args)[0].to_vector() == got.front().to_vector());
}

TEST_CASE("IR programs: a loop of several costly ops keeps short tiles however much it streams, with eager's bits") {
  // A chain of tanh layers streams as many tensors as the loop above, but each element costs
  // ten transcendentals: the arithmetic sets the pace, not the memory, and long tiles would
  // only push its tile buffers out of L1 (program::costly).
  const fg::index_t n = 3 * fg::detail::jit::program<float>::max_tile + 123;
  fg::ir::graph<float> g;
  std::vector<fg::ir::value<float>> in;
  for (int i = 0; i < 12; ++i) in.emplace_back(&g, g.add_input({n}));
  std::vector<int> outs;
  fg::ir::value<float> h = in[0];
  for (int i = 1; i < 12; ++i) {
    h = fg::tanh(h * in[static_cast<std::size_t>(i)]);
    outs.push_back(h.id);  // 11 stored values + 12 inputs: 23 streams
  }
  const fg::detail::jit::program<float> chain(g, outs);
  const std::string code = chain.to_string();
  CHECK(code.find("in tiles of 256") != std::string::npos);
  CHECK(code.find("where it streams from memory") == std::string::npos);
  std::vector<fg::tensor<float>> args;
  for (int i = 0; i < 12; ++i) args.push_back(fg::randn<float>({n}, 60 + static_cast<std::uint64_t>(i)));
  last_cache_guard streaming(1);
  const std::vector<fg::tensor<float>> got = chain.run(args);
  fg::tensor<float> e = args[0];
  for (int i = 1; i < 12; ++i) {
    e = fg::tanh(e * args[static_cast<std::size_t>(i)]);
    CHECK(e.to_vector() == got[static_cast<std::size_t>(i - 1)].to_vector());
  }
}

TEST_CASE("IR programs drop a value once the last step that reads it has run") {
  // Three eager steps in a row: %1 = f0(%0), %2 = f1(%1), %3 = f2(%2). Only the second reads
  // %1: by the third the program holds it no more (its buffer is back in the buffer cache,
  // warm, for the next step), as the eager engine frees a gradient once it is used. The
  // input and the output stay the caller's.
  fg::ir::graph<float> g;
  const int x = g.add_input({1000});
  const int a = g.add_call(x, -1, 0, {1000});
  const int b = g.add_call(a, -1, 1, {1000});
  const int c = g.add_call(b, -1, 2, {1000});
  const fg::detail::jit::program<float> p(g, {c});
  std::weak_ptr<fg::detail::tensor_impl<float>> first, second;
  bool first_alive = true, second_alive = false;
  using tf = fg::tensor<float>;
  const std::vector<fg::detail::jit::call_fn<float>> fns{[&](const tf& v, const tf&) {
                                                           tf r = v * 2.0f;
                                                           first = r.raw_impl();
                                                           return r;
                                                         },
                                                         [&](const tf& v, const tf&) {
                                                           tf r = v + 1.0f;
                                                           second = r.raw_impl();
                                                           return r;
                                                         },
                                                         [&](const tf& v, const tf&) {
                                                           first_alive = !first.expired();
                                                           second_alive =
                                                               !second.expired();  // the operand of this very step
                                                           return v * v;
                                                         }};
  const tf in = fg::randn<float>({1000}, 5);
  const tf r = p.run({in}, nullptr, &fns)[0];
  CHECK_FALSE(first_alive);
  CHECK(second_alive);
  CHECK(second.expired());  // after the run, nothing holds the intermediates
  const tf e = (in * 2.0f + 1.0f) * (in * 2.0f + 1.0f);
  CHECK(r.to_vector() == e.to_vector());
}
