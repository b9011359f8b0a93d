// The compiled-autograd seed ("Compiled Autograd: Capturing a larger backward graph"),
// section by section, in C++. Every gradient is checked against the eager engine, and the
// seed's assertions (graph counts, cache-miss messages) are asserted on fusegrad's counters
// and logs. Differences from the seed are said where they occur.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

namespace {

int failures = 0;
void expect(bool ok, const char* what) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", what);
  failures += ok ? 0 : 1;
}
double max_abs_diff(const fg::tensor<float>& a, const fg::tensor<float>& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape()) return 1e300;
  const auto x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(double(x[i]) - double(y[i])));
  return m;
}

/// Log lines, captured so that the example can assert on them (and printed).
struct captured_logs {
  std::vector<std::string> lines;
  explicit captured_logs(const char* channels) {
    fg::logs::set(channels);
    fg::logs::set_sink([this](fg::logs::channel c, std::string_view s) {
      std::printf("  [fusegrad:%s] %.*s\n", std::string(fg::logs::name(c)).c_str(), static_cast<int>(s.size()),
                  s.data());
      lines.emplace_back(s);
    });
  }
  ~captured_logs() {
    fg::logs::set("");
    fg::logs::set_sink({});
  }
  [[nodiscard]] bool contains(std::string_view needle) const {
    for (const auto& l : lines)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
};

// Setup: the seed's model, a 10 -> 10 linear layer.
// [ca-model]
struct Model {
  fg::nn::linear<float> linear{10, 10};
  fg::tensor<float> operator()(const fg::tensor<float>& x) const { return linear(x); }
};
// [ca-model]

}  // namespace

int main() {
  std::printf("Basic usage\n");
  {
    // [ca-basic]
    Model model;
    fg::tensor<float> x = fg::randn<float>({10}, 0);
    fg::config().compiled_autograd = true;  // every backward() is captured from now on
    auto train = fg::jit([&](const fg::tensor<float>& input) {
      fg::tensor<float> loss = fg::sum(model(input));
      loss.backward();
      return loss;
    });
    train(x);
    fg::config().compiled_autograd = false;
    // [ca-basic]
    const fg::tensor<float> g = model.linear.weight.grad();
    model.linear.weight.zero_grad();
    model.linear.bias.zero_grad();
    fg::sum(model(x)).backward();  // the eager engine
    expect(max_abs_diff(g, model.linear.weight.grad()) < 1e-6, "weight gradient equals the eager engine's");
  }

  std::printf("Inspecting the compiled autograd logs (FUSEGRAD_LOGS=compiled_autograd)\n");
  {
    captured_logs logs("compiled_autograd");
    Model model;
    const fg::tensor<float> x = fg::randn<float>({10}, 1);
    fg::tensor<float> loss = fg::sum(fg::tanh(model(x)) * 2.0f);
    fg::reset_counters();
    {
      fg::compiled_autograd::enable scope;
      loss.backward();
    }
    expect(logs.contains("graph of 'compiled_autograd'"), "the captured backward graph is logged");
    expect(logs.contains("tanh") || logs.contains("mul("), "it holds the tanh and mul backwards, fused");
    // The weight's gradient: linear is one node (LinearBackward0, as PyTorch's addmm), whose
    // matmuls stay opaque calls: 'linear_dw' (gyᵀ x) and, where x takes a gradient, 'linear_dx'.
    expect(logs.contains("call(%") && logs.contains("'linear_dw')"),
           "matmul's backward is an opaque call node of the same graph");
    expect(fg::counters().cache_hits + fg::counters().cache_misses == 1, "the whole backward is one graph");
  }

  std::printf("Compiling the forward and backward pass using different flags\n");
  {
    // [ca-flags]
    auto forward = fg::jit([](const fg::tensor<float>& x) {
      auto h = fg::sigmoid(x) * x;
      if (fg::max(h).item() > 100.0f) h = h / 100.0f;  // a graph break in the forward
      return fg::sum(h * h);
    });
    fg::tensor<float> x = fg::randn<float>({10}, 2).requires_grad(true);
    fg::tensor<float> loss = forward(x);
    {  // the backward as one graph, fullgraph: a break there would throw
      fg::compiled_autograd::enable scope(fg::backend::fused{/*fullgraph=*/true});
      loss.backward();
    }
    // [ca-flags]
    auto xe = x.detach().requires_grad(true);
    auto he = fg::sigmoid(xe) * xe;
    if (fg::max(he).item() > 100.0f) he = he / 100.0f;
    fg::sum(he * he).backward();
    expect(max_abs_diff(x.grad(), xe.grad()) < 1e-5, "fullgraph backward equals eager");
  }

  std::printf("Compiled Autograd addresses certain limitations of AOTAutograd\n");
  std::printf("1. Graph breaks in the forward pass no longer necessarily lead to graph breaks in the backward pass\n");
  {
    // [ca-breaks]
    auto fn = fg::jit([](const fg::tensor<float>& x) {
      auto temp = x + 10.0f;  // 1st graph
      fg::graph_break();
      temp = temp + 10.0f;  // 2nd graph
      fg::graph_break();
      return fg::sum(temp * temp);  // 3rd graph
    });
    fg::tensor<float> x = fg::randn<float>({10, 10}, 3).requires_grad(true);
    fg::reset_counters();
    fg::tensor<float> loss = fn(x);
    // 3 graphs, each with its backward (the 2nd is the 1st's structure again: a cache hit)
    const auto forward_graphs = fg::counters().cache_hits + fg::counters().cache_misses;

    // 1. base fg::jit: the backward runs the 3 backward programs, one per graph
    loss.backward({.retain_graph = true});
    const fg::tensor<float> grad1 = x.grad();
    x.zero_grad();
    fg::reset_counters();

    // 2. with compiled autograd: the 3 backwards are inlined into one captured graph
    {
      fg::compiled_autograd::enable scope(fg::backend::aot_eager{});
      loss.backward();
    }
    const auto backward_graphs = fg::counters().cache_hits + fg::counters().cache_misses;  // 1
    // [ca-breaks]
    std::printf("  forward graphs %llu, backward graphs %llu\n", static_cast<unsigned long long>(forward_graphs),
                static_cast<unsigned long long>(backward_graphs));
    expect(forward_graphs == 3, "3 graphs (and 3 backward programs) without compiled autograd");
    expect(backward_graphs == 1, "a single graph for the backward with compiled autograd");
    expect(max_abs_diff(grad1, x.grad()) < 1e-5, "both backwards give the same gradient");
    expect(max_abs_diff(x.grad(), (x.detach() + 20.0f) * 2.0f) < 1e-4, "and it is 2 (x + 20)");
  }

  std::printf("2. Backward hooks are captured\n");
  {
    captured_logs logs("compiled_autograd");
    // [ca-hook]
    auto fn = fg::jit([](const fg::tensor<float>& x) { return fg::sum(x); });
    fg::tensor<float> x = fg::randn<float>({10, 10}, 4).requires_grad(true);
    x.register_hook([](const fg::tensor<float>& grad) { return grad + 10.0f; });
    fg::tensor<float> loss = fn(x);
    {
      fg::compiled_autograd::enable scope(fg::backend::aot_eager{});
      loss.backward();
    }
    // [ca-hook]
    expect(max_abs_diff(x.grad(), fg::full<float>({10, 10}, 11.0f)) < 1e-6, "the hook ran: every gradient is 1 + 10");
    expect(logs.contains("call_hook(%aot0_"),
           "the hook is a call_hook node of the captured graph, on the inlined backward");
    expect(logs.contains("accumulate_grad(%"), "the gradient accumulation is in the captured graph");
  }
  {
    captured_logs logs("compiled_autograd");
    // [ca-hook-traced]
    fg::tensor<float> x = fg::randn<float>({10, 10}, 4).requires_grad(true);
    x.register_hook([](auto grad) { return grad + 10.0f; });  // generic: traced and fused
    fg::tensor<float> loss = fg::sum(x * 2.0f);
    {
      fg::compiled_autograd::enable scope;
      loss.backward();
    }
    // [ca-hook-traced]
    expect(max_abs_diff(x.grad(), fg::full<float>({10, 10}, 12.0f)) < 1e-6,
           "the traced hook ran: every gradient is 2 + 10");
    expect(logs.contains("add(%") && logs.contains(", 10.0)") && !logs.contains("call_hook"),
           "the generic hook is traced into the graph (add 10), not called");
  }

  std::printf("Common recompilation reasons for Compiled Autograd\n");
  std::printf("1. Due to changes in the autograd structure of the loss value\n");
  {
    captured_logs logs("compiled_autograd_verbose");
    fg::compiled_autograd::reset();  // a fresh cache, as in the seed's new process
    fg::config().compiled_autograd = true;
    // [ca-new-node]
    fg::tensor<float> x = fg::randn<float>({10}, 5).requires_grad(true);
    auto add = [](auto a, auto b) { return a + b; };
    auto sub = [](auto a, auto b) { return a - b; };
    auto mul = [](auto a, auto b) { return a * b; };
    auto div = [](auto a, auto b) { return a / b; };
    for (int op = 0; op < 4; ++op) {
      fg::tensor<float> loss = fg::sum(op == 0 ? add(x, x) : op == 1 ? sub(x, x) : op == 2 ? mul(x, x) : div(x, x));
      loss.backward();
    }
    // [ca-new-node]
    fg::config().compiled_autograd = false;
    expect(logs.contains("Cache miss due to new autograd node: GraphRoot (NodeCall 0)"), "a miss for the first tape");
    expect(logs.contains("Cache miss due to new autograd node: SubBackward0 (NodeCall 2)"),
           "SubBackward0 is a new node");
    expect(logs.contains("Cache miss due to new autograd node: MulBackward0 (NodeCall 2)"),
           "MulBackward0 is a new node");
    expect(logs.contains("Cache miss due to new autograd node: DivBackward0 (NodeCall 2)"),
           "DivBackward0 is a new node");
  }

  std::printf("2. Due to tensors changing shapes\n");
  {
    captured_logs logs("compiled_autograd_verbose");
    fg::config().compiled_autograd = true;
    fg::reset_counters();
    // [ca-shapes]
    for (fg::index_t i : {10, 100, 10}) {
      fg::tensor<float> x = fg::randn<float>({i, i}, 6).requires_grad(true);
      fg::tensor<float> loss = fg::sum(x);
      loss.backward();
      expect(max_abs_diff(x.grad(), fg::ones<float>({i, i})) == 0, "the gradient of sum(x) is ones");
    }
    // [ca-shapes]
    fg::config().compiled_autograd = false;
    const auto c = fg::counters();
    expect(
        logs.contains("Cache miss due to changed shapes: marking size idx 1 of AccumulateGrad (NodeCall 2) as dynamic"),
        "the changed sizes are marked dynamic");
    expect(c.compiled_autograd_captures == 2 && c.compiled_autograd_hits == 1,
           "10 and 100 are captured, the second 10 hits");
    std::printf("  backward graphs compiled: %llu\n", static_cast<unsigned long long>(c.unique_graphs));
    expect(c.unique_graphs == 2, "the backward graph compiles twice");
  }

  std::printf("3. Scalars that change between steps are graph inputs (fusegrad; the seed's `scalars`)\n");
  {
    fg::reset_counters();
    fg::compiled_autograd::reset();
    fg::tensor<double> x = fg::randn<double>({4, 3}, 7).requires_grad(true);
    fg::tensor<double> w = fg::randn<double>({3}, 8).requires_grad(true);
    std::vector<std::vector<double>> compiled_grads;
    {
      fg::compiled_autograd::enable on;
      // [ca-scalars]
      for (double k : {0.5, 2.0, 0.5, -3.0}) {
        auto h = fg::tanh(x * w) * k + w;  // MulBackward1's k: scalars[...] of the graph
        fg::sum(h * h).backward();         // one capture, then three direct hits
        compiled_grads.push_back(x.grad().to_vector());
        x.zero_grad();
        w.zero_grad();
      }
      // [ca-scalars]
    }
    const auto c = fg::counters();
    expect(c.compiled_autograd_captures == 1 && c.compiled_autograd_direct == 3,
           "one capture, three hits that run the graph");
    bool same = true;
    std::size_t i = 0;
    for (double k : {0.5, 2.0, 0.5, -3.0}) {
      auto h = fg::tanh(x * w) * k + w;
      fg::sum(h * h).backward();  // the eager engine (compiled autograd is off here)
      same = same && x.grad().to_vector() == compiled_grads[i++];
      x.zero_grad();
      w.zero_grad();
    }
    expect(same, "each step's gradient equals the eager engine's, bit for bit");
  }

  std::printf("%s\n", failures == 0 ? "all sections hold" : "some sections FAILED");
  return failures == 0 ? 0 : 1;
}
