// The walk-through seed ("A Walk Through Example of torch.compile"), section by section: the
// compile-time path (expression types, derived backward, save/recompute plan, backends), then
// the seed's own program with its data-dependent branch (`if x.mean() > 0.5`) through the
// run-time tracer `fg::jit`: graph breaks, guards, automatic dynamic shapes.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

// --- AOTAutograd: the eager Cosine saves one tensor per call --------------------------------
// [walkthrough-cosine]
struct Cosine {
  static constexpr std::string_view name = "CosineBackward";
  static inline int saved = 0;
  static auto forward(const auto& x0) { return fg::cos(x0); }
  static auto setup_context(const auto& x, const auto& /*output*/) {
    if constexpr (fg::Tensor<decltype(x)>) {  // eager call: a real tensor
      std::printf("saving tensor of size %s\n", fg::to_string(x.shape()).c_str());
      ++saved;
    }
    return fg::save_for_backward(x);
  }
  static auto backward(const auto& saved_values, const auto& grad_output) {
    const auto& [x] = saved_values;
    return -fg::sin(x) * grad_output;
  }
};
auto cosine = [](const auto& x) { return fg::function<Cosine>::apply(x); };
auto naive_two_cosine = [](const auto& x0) { return cosine(cosine(x0)); };
// [walkthrough-cosine]

// --- The compiled version: the C++ compiler derives the backward and picks what to save ----
// [walkthrough-plan]
auto two_cosine = [](auto x) { return fg::cos(fg::cos(x)); };
using plan_of = decltype(fg::compile(two_cosine))::analysis<float, /*inputs=*/1>;
constexpr auto eager_like = plan_of::plan<fg::policy::save_all>;  // what eager saves
constexpr auto aot = plan_of::plan<fg::policy::min_cut>;          // AOTAutograd's min-cut
static_assert(eager_like.saved_count == 2, "save_all keeps x and cos(x)");
static_assert(aot.saved_count == 1, "min-cut keeps only x and recomputes cos(x)");
static_assert(plan_of::cg.kind[aot.saved_nodes[0]] == fg::detail::gkind::input, "the one saved tensor is the input");
// fusegrad's default weighs what a CPU pays instead. A cos costs about six loads of an element
// streamed from memory, more than saving it (a store and a load), but the backward computes
// sin(x) anyway, and sin and cos of one value come out of one reduction (lanes::sincos): cos(x)
// recomputed beside it costs a select. So the cost-based plan keeps only x, in cache and out of
// it, and the backward's loop computes the pair together; for a cheaper op such as exp the two
// size classes plan differently.
constexpr auto cached = plan_of::plan<fg::policy::cost_cached>;
constexpr auto streamed = plan_of::plan<fg::policy::cost_streamed>;
static_assert(cached.saved_count == 1 && streamed.saved_count == 1 && plan_of::cg.sibling[1] >= 0,
              "the cost-based plan keeps x and recomputes cos(x) beside its sibling sin(x)");
// [walkthrough-plan]

template <class T>
double max_abs_diff(const fg::tensor<T>& a, const fg::tensor<T>& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(double(x[i]) - double(y[i])));
  return m;
}

// --- The seed's program: a data-dependent branch, traced at run time ---------------------------
int data_dependent() {
  fg::reset_counters();
  // [walkthrough-jit]
  using inputs = std::map<std::string, fg::tensor<float>>;
  auto function = fg::jit(
      [](const inputs& in) {
        auto x = in.at("x");
        auto y = in.at("y");
        x = fg::cos(fg::cos(x));
        if (fg::mean(x).item() > 0.5f) x = x / 1.1f;  // item() needs a value: a graph break
        return x * y;
      },
      {.name = "function"});

  inputs shape_10_inputs{{"x", fg::randn<float>({10}, 4).requires_grad(true)},
                         {"y", fg::randn<float>({10}, 5).requires_grad(true)}};
  inputs shape_8_inputs{{"x", fg::randn<float>({8}, 6).requires_grad(true)},
                        {"y", fg::randn<float>({8}, 7).requires_grad(true)}};
  // warmup
  for (int i = 0; i < 100; ++i) {
    fg::tensor<float> output = function(shape_10_inputs);
    output = function(shape_8_inputs);
  }
  // execution of compiled functions
  fg::tensor<float> output = function(shape_10_inputs);
  fg::sum(output).backward();
  // [walkthrough-jit]
  const fg::jit_counters c = fg::counters();
  std::printf("\nfg::jit: %llu graphs compiled, %llu graph breaks, %llu cache hits, %llu recompiles\n",
              static_cast<unsigned long long>(c.unique_graphs), static_cast<unsigned long long>(c.graph_breaks),
              static_cast<unsigned long long>(c.cache_hits), static_cast<unsigned long long>(c.recompiles));
  const auto entries = function.entries();
  std::printf("most recently used entry (%s):\n%s%s", entries.front().dynamic ? "dynamic" : "static",
              entries.front().guards.c_str(), entries.front().graph.c_str());
  // The same program eagerly, on fresh leaves with the same values.
  auto x = shape_10_inputs.at("x").detach().requires_grad(true),
       y = shape_10_inputs.at("y").detach().requires_grad(true);
  auto xe = fg::cos(fg::cos(x));
  if (fg::mean(xe).item() > 0.5f) xe = xe / 1.1f;
  auto expected = xe * y;
  fg::sum(expected).backward();
  const double d = std::max({max_abs_diff(expected, output), max_abs_diff(x.grad(), shape_10_inputs.at("x").grad()),
                             max_abs_diff(y.grad(), shape_10_inputs.at("y").grad())});
  std::printf("jitted values and gradients differ from eager by %g\n", d);
  // Each of the two graphs (before and after the break) compiles twice: static for size 10,
  // then shape-generic once size 8 arrives; every later call hits the cache.
  const bool ok = d < 1e-5 && c.graph_breaks == 201 && c.unique_graphs == 4 && c.recompiles == 2;
  return ok ? 0 : 1;
}

int main() {
  // [walkthrough-check]
  fg::tensor<float> input = fg::randn<float>({5, 5, 5}, 0).requires_grad(true);
  fg::tensor<float> grad_output = fg::randn<float>({5, 5, 5}, 1);

  fg::tensor<float> output1 = fg::cos(fg::cos(input));  // eager
  fg::sum(output1 * grad_output).backward();
  fg::tensor<float> grad_input1 = input.grad();
  input.zero_grad();

  fg::tensor<float> output2 = naive_two_cosine(input);  // two custom Functions: saves 2 tensors
  fg::sum(output2 * grad_output).backward();
  fg::tensor<float> grad_input2 = input.grad();
  input.zero_grad();

  auto optimized_two_cosine = fg::compile(two_cosine);  // one fused kernel each way, saves 1
  fg::tensor<float> output3 = optimized_two_cosine(input);
  fg::sum(output3 * grad_output).backward();
  fg::tensor<float> grad_input3 = input.grad();
  input.zero_grad();
  // [walkthrough-check]
  std::printf("saved tensors: eager Cosine x2 = %d, compiled save_all = %d, compiled min_cut = %d\n", Cosine::saved,
              eager_like.saved_count, aot.saved_count);
  std::printf("grad_fn of the compiled output: %s\n", output3.grad_fn_name().c_str());
  const double d = std::max({max_abs_diff(output1, output2), max_abs_diff(output1, output3),
                             max_abs_diff(grad_input1, grad_input2), max_abs_diff(grad_input1, grad_input3)});
  std::printf("largest difference from eager (values and gradients): %g\n", d);
  if (d > 1e-5 || Cosine::saved != 2) return 1;

  // [walkthrough-backends]
  auto function = [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; };
  auto eager = fg::compile<fg::backend::eager>(function);          // op by op (the reference)
  auto aot_eager = fg::compile<fg::backend::aot_eager>(function);  // joint graph + plan, no fusion
  auto fused = fg::compile<fg::backend::fused>(function);          // one xsimd pass each way
  // [walkthrough-backends]
  const fg::tensor<float> x = fg::randn<float>({1 << 16}, 2), y = fg::randn<float>({1 << 16}, 3);
  auto time_it = [&](auto& f) {
    fg::tensor<float> xs = x.detach().requires_grad(true), ys = y.detach().requires_grad(true);
    const auto t0 = std::chrono::steady_clock::now();
    fg::tensor<float> out;
    for (int i = 0; i < 20; ++i) {
      out = f(xs, ys);
      fg::sum(out).backward();
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 20;
    return std::pair{out, us};
  };
  const auto [o_eager, t_eager] = time_it(eager);
  const auto [o_aot, t_aot] = time_it(aot_eager);
  const auto [o_fused, t_fused] = time_it(fused);
  std::printf("backend     forward+backward (us, N=65536, indicative only)\n");
  std::printf("eager       %8.1f\naot_eager   %8.1f\nfused       %8.1f\n", t_eager, t_aot, t_fused);
  const double db = std::max(max_abs_diff(o_eager, o_aot), max_abs_diff(o_eager, o_fused));
  std::printf("backends agree within %g\n", db);
  if (db > 1e-5) return 1;
  return data_dependent();
}
