// fg::jit, the run-time tracer: code whose graph depends on data (a loop whose trip count is
// a tensor value), graph breaks, the guarded cache and its automatic dynamic shapes, logs,
// counters and entries, and trace_once (the function traced once per signature). Every result is checked against the
// same code run eagerly.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <fusegrad/jit.hpp>

namespace fg = fusegrad;

namespace {
double max_abs_diff(const fg::tensor<double>& a, const fg::tensor<double>& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  double m = x.size() == y.size() ? 0 : 1e300;
  for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}
}  // namespace

int main() {
  // [jit-basic]
  // Newton steps for sqrt(a) until the residual is small: the trip count is data.
  auto newton_sqrt = [](const fg::tensor<double>& a) {
    fg::tensor<double> x = a * 0.5 + 0.5;
    for (int it = 0; it < 50 && fg::max(fg::abs(x * x - a)).item() > 1e-12; ++it)  // a sync point
      x = (x + a / x) * 0.5;
    return x;
  };
  auto compiled = fg::jit(newton_sqrt, {.name = "newton_sqrt"});
  // [jit-basic]

  // [jit-logs]
  fg::logs::set("recompiles,graph_breaks");  // or: FUSEGRAD_LOGS=recompiles,graph_breaks ./jit
  fg::reset_counters();
  double worst = 0;
  for (fg::index_t n : {10, 8, 6, 12}) {
    const auto a = fg::rand<double>({n}, static_cast<std::uint64_t>(n), 1.0, 4.0).requires_grad(true);
    fg::tensor<double> root = compiled(a);
    fg::sum(root).backward();  // d sqrt(a)/da = 1 / (2 sqrt(a)), through every traced step
    worst = std::max(worst, max_abs_diff(root, fg::sqrt(a.detach())));
    worst = std::max(worst, max_abs_diff(a.grad(), 0.5 / fg::sqrt(a.detach())));
  }
  const fg::jit_counters c = fg::counters();
  std::printf("graphs compiled %llu, graph breaks %llu, cache hits %llu, recompiles %llu\n",
              static_cast<unsigned long long>(c.unique_graphs), static_cast<unsigned long long>(c.graph_breaks),
              static_cast<unsigned long long>(c.cache_hits), static_cast<unsigned long long>(c.recompiles));
  // [jit-logs]
  fg::logs::set("");
  std::printf("largest difference from sqrt and its derivative: %g\n", worst);

  // [jit-entries]
  for (const fg::jit_entry_info& e : compiled.entries())
    std::printf("--- %s entry (%s)\n%s%s%s", e.dynamic ? "dynamic" : "static", e.dtype.c_str(), e.guards.c_str(),
                e.graph.c_str(), e.code.c_str());
  // [jit-entries]

  // [jit-fullgraph]
  auto strict = fg::jit(newton_sqrt, {.fullgraph = true});
  try {
    (void)strict(fg::ones<double>({4}));
  } catch (const fg::error& e) { std::printf("fullgraph: %s\n", e.what()); }
  // [jit-fullgraph]

  // [jit-trace-once]
  // Trace once per signature: a later call with the same signature replays the graph's
  // programs without calling the function. A captured number is a constant of the trace.
  double scale = 2.0;
  int calls = 0;
  auto scaled = fg::jit(
      [&](const fg::tensor<double>& x, const fg::tensor<double>& y) {
        ++calls;
        return fg::cos(fg::cos(x)) * y * scale;
      },
      {.name = "scaled", .trace_once = true});
  const auto x = fg::randn<double>({8}, 1).requires_grad(true), y = fg::randn<double>({8}, 2);
  fg::tensor<double> first = scaled(x, y);   // traced: calls == 1
  scale = 3.0;                               // not seen by the trace
  fg::tensor<double> second = scaled(x, y);  // replayed: calls == 1, still times 2
  fg::sum(second).backward();                // through the cached backward program
  fg::tensor<double> bigger =
      scaled(fg::randn<double>({9}, 3), fg::randn<double>({9}, 4));  // a new signature: traced, times 3
  // [jit-trace-once]
  std::printf("trace_once: %d calls of the function for 3 calls (replayed values %s)\n", calls,
              max_abs_diff(first, second) == 0 ? "equal" : "differ");
  const bool once_ok = calls == 2 && max_abs_diff(first, second) == 0 && x.grad().defined() &&
                       max_abs_diff(second, fg::cos(fg::cos(x.detach())) * y * 2.0) == 0 &&
                       bigger.shape() == fg::shape{9};

  // Each distinct graph compiles once static, then once shape-generic: no more than the
  // number of distinct step counts times two, whatever the sizes.
  return worst < 1e-9 && c.recompiles > 0 && c.graph_breaks > 0 && once_ok ? 0 : 1;
}
