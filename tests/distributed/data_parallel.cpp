// Multi-rank tests of distributed::data_parallel, run by CTest under `mpirun -np 2` and
// `-np 3`. A plain driver (no doctest under mpirun): every rank runs every case, prints its
// own summary, and returns non-zero if a check failed on it.
//
// The reference of every equivalence check is the single-process run over the concatenated
// batch, computed on every rank from rank 0's initial parameters.
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fusegrad/distributed/data_parallel.hpp>
#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;
namespace dist = fusegrad::distributed;

namespace {

int rank = 0, ranks = 1, checks = 0, failures = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (ok) return;
  ++failures;
  std::printf("rank %d: FAILED: %s\n", rank, what.c_str());
  std::fflush(stdout);
}

/// True on every rank iff `ok` on every rank.
bool everywhere(bool ok) {
  int v = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

/// Runs `body`, which must throw a fusegrad::error whose message holds `expect`; true if so.
bool throws_with(const std::function<void()>& body, const std::string& expect) {
  try {
    body();
  } catch (const fg::error& e) {
    if (std::string(e.what()).find(expect) != std::string::npos) return true;
    std::printf("rank %d: unexpected message: %s\n", rank, e.what());
    return false;
  }
  std::printf("rank %d: no error (expected one with \"%s\")\n", rank, expect.c_str());
  return false;
}

constexpr fg::index_t in = 8, hidden = 16, out = 4, batch = 6;  // batch: rows per rank

template <class T>
struct mlp {
  explicit mlp(std::uint64_t seed) : l1(in, hidden, true, seed), l2(hidden, out, true, seed + 10) {}
  fg::tensor<T> operator()(const fg::tensor<T>& x) const { return l2(fg::tanh(l1(x))); }
  std::vector<fg::tensor<T>> parameters() const {
    auto p = l1.parameters();
    for (auto& q : l2.parameters()) p.push_back(q);
    return p;
  }
  fg::nn::linear<T> l1, l2;
};

/// Rows [first, first + n) of a step's data (the same numbers on every rank).
template <class T>
fg::tensor<T> rows(std::uint64_t seed, fg::index_t cols, fg::index_t first, fg::index_t n) {
  const auto all = fg::randn<T>({batch * ranks, cols}, seed).to_vector();
  std::vector<T> v(all.begin() + first * cols, all.begin() + (first + n) * cols);
  return fg::from_vector<T>(v, {n, cols});
}

/// The loss of `n` rows from `first`: the mean squared error (a mean over rows, so that the
/// average over ranks of the ranks' gradients is the full batch's gradient).
template <class T>
fg::tensor<T> loss_of(const mlp<T>& m, int step, fg::index_t first, fg::index_t n) {
  const auto x = rows<T>(100 + 2 * static_cast<std::uint64_t>(step), in, first, n);
  const auto t = rows<T>(101 + 2 * static_cast<std::uint64_t>(step), out, first, n);
  const auto d = m(x) - t;
  return fg::mean(d * d);
}

template <class T>
fg::tensor<T> local_loss(const mlp<T>& m, int step) {
  return loss_of(m, step, batch * rank, batch);
}

/// Max |a - b| over the parameters.
template <class T>
double max_diff(const std::vector<fg::tensor<T>>& a, const std::vector<fg::tensor<T>>& b) {
  double d = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const auto x = a[k].to_vector(), y = b[k].to_vector();
    for (std::size_t i = 0; i < x.size(); ++i)
      d = std::max(d, std::abs(static_cast<double>(x[i]) - static_cast<double>(y[i])));
  }
  return d;
}

/// Whether the parameters are bit for bit rank 0's.
template <class T>
bool same_as_rank0(const std::vector<fg::tensor<T>>& ps) {
  bool same = true;
  for (const auto& p : ps) {
    auto v = p.to_vector(), mine = v;
    MPI_Bcast(v.data(), static_cast<int>(v.size()), dist::detail::mpi_type<T>(), 0, MPI_COMM_WORLD);
    same = same && v == mine;
  }
  return everywhere(same);
}

/// A model whose initial parameters differ on every rank but rank 0's (data_parallel makes
/// them rank 0's).
template <class T>
mlp<T> rank_model() {
  return mlp<T>(rank == 0 ? 7 : 1000 + static_cast<std::uint64_t>(rank));
}

template <class T>
constexpr double tolerance = std::is_same_v<T, float> ? 1e-6 : 1e-12;

}  // namespace

/// N steps of SGD through data_parallel equal the single-process run over the concatenated
/// batch, and leave every rank's parameters bit for bit rank 0's. With compiled autograd,
/// the one captured backward holds a call_hook per parameter, and the later steps hit it.
template <class T>
void equivalence(const char* name, bool compiled, dist::data_parallel_options o) {
  constexpr int steps = 4;
  const T lr = T(0.1);
  mlp<T> ref(7);
  auto rp = ref.parameters();
  fg::nn::sgd<T> ropt(rp, lr);
  for (int s = 0; s < steps; ++s) {
    ropt.zero_grad();
    loss_of(ref, s, 0, batch * ranks).backward();
    ropt.step();
  }
  mlp<T> m = rank_model<T>();
  auto ps = m.parameters();
  dist::data_parallel<T> dp(ps, MPI_COMM_WORLD, o);
  fg::nn::sgd<T> opt(ps, lr);
  std::string graph;
  fg::reset_counters();
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    const auto loss = local_loss(m, s);
    if (compiled) {
      if (s == 0) {
        fg::logs::set("compiled_autograd");
        fg::logs::set_sink([&](fg::logs::channel, std::string_view l) { graph += l; });
      }
      fg::compiled_autograd::enable on;
      loss.backward();
      fg::logs::set("");
      fg::logs::set_sink({});
    } else {
      loss.backward();
    }
    dp.finish();
    opt.step();
  }
  const std::string n = name;
  check(same_as_rank0(ps), n + ": parameters identical on every rank");
  const double d = max_diff(ps, rp);
  if (rank == 0) std::printf("  %s: max |parameter - single-process run's| = %.3g\n", name, d);
  check(d <= tolerance<T>, n + ": parameters equal the single-process run's (max diff " + std::to_string(d) + ")");
  check(dp.step() == steps, n + ": steps counted");
  if (!compiled) return;
  std::size_t hooks = 0;
  for (auto at = graph.find("call_hook("); at != std::string::npos; at = graph.find("call_hook(", at + 1)) ++hooks;
  check(hooks == ps.size(),
        n + ": the captured backward holds one call_hook per parameter (found " + std::to_string(hooks) + ")");
  const auto c = fg::counters();
  check(c.compiled_autograd_captures == 1 && c.compiled_autograd_hits == steps - 1,
        n + ": one capture, then cache hits (captures " + std::to_string(c.compiled_autograd_captures) + ", hits " +
            std::to_string(c.compiled_autograd_hits) + ")");
}

/// Two backwards with a finish() after each and no zero_grad between: .grad() is the sum of
/// the two averages (the average of the accumulated gradients, as DDP's); a second backward
/// before finish() is an error on every rank that does it.
template <class T>
void accumulation(bool compiled) {
  auto backward = [compiled](const fg::tensor<T>& loss) {
    if (!compiled) return loss.backward();
    fg::compiled_autograd::enable on;
    loss.backward();
  };
  const T lr = T(0.1);
  mlp<T> ref(7);
  auto rp = ref.parameters();
  fg::nn::sgd<T> ropt(rp, lr);
  mlp<T> m = rank_model<T>();
  auto ps = m.parameters();
  fg::nn::sgd<T> opt(ps, lr);
  {
    dist::data_parallel<T> dp(ps);
    for (int s = 0; s < 4; s += 2) {
      ropt.zero_grad();
      loss_of(ref, s, 0, batch * ranks).backward();
      loss_of(ref, s + 1, 0, batch * ranks).backward();
      ropt.step();
      opt.zero_grad();
      backward(local_loss(m, s));
      dp.finish();
      backward(local_loss(m, s + 1));
      dp.finish();
      opt.step();
    }
    check(max_diff(ps, rp) <= tolerance<T>, "accumulation: .grad() sums the averages of the backwards");
    check(same_as_rank0(ps), "accumulation: parameters identical on every rank");
    local_loss(m, 0).backward();
    check(throws_with([&] { local_loss(m, 1).backward(); }, "arrived twice"),
          "a second backward before finish() throws");
  }  // the half-done round ends alike on every rank
}

/// Parameter lists that differ in count, shape, dtype or requires_grad: an error at
/// construction, on every rank.
void mismatched_lists() {
  const int last = ranks - 1;
  const std::string r = std::to_string(last);
  {
    auto ps = mlp<float>(7).parameters();
    if (rank == last) ps.push_back(fg::zeros<float>({3}).requires_grad(true));
    check(throws_with([&] { dist::data_parallel<float> dp(ps); }, "rank " + r + " has 5 parameters, rank 0 has 4"),
          "count mismatch");
  }
  {
    auto ps = mlp<float>(7).parameters();
    if (rank == last) ps[0] = fg::zeros<float>({hidden, in + 1}).requires_grad(true);
    check(throws_with([&] { dist::data_parallel<float> dp(ps); },
                      "parameter 0 is [16, 9] float requires_grad on rank " + r),
          "shape mismatch");
  }
  {
    auto pf = mlp<float>(7).parameters();
    auto pd = mlp<double>(7).parameters();
    const bool dbl = rank == last;
    check(throws_with([&] { dbl ? (void)dist::data_parallel<double>(pd) : (void)dist::data_parallel<float>(pf); },
                      "parameter 0 is [16, 8] double requires_grad on rank " + r),
          "dtype mismatch");
  }
  {
    auto ps = mlp<float>(7).parameters();
    if (rank == last) ps[1].requires_grad(false);
    check(throws_with([&] { dist::data_parallel<float> dp(ps); }, "parameter 1 is [16] float no grad on rank " + r),
          "requires_grad mismatch");
  }
}

template <class T>
std::vector<std::vector<T>> grads_of(const std::vector<fg::tensor<T>>& ps) {
  std::vector<std::vector<T>> g;
  for (const auto& p : ps) g.push_back(p.grad().to_vector());
  return g;
}

/// A NaN gradient, a requires_grad turned off, a finish() without a backward, each on one
/// rank: the same error on every rank, no gradient changed, and the next step runs.
template <class T>
void bad_steps() {
  const int last = ranks - 1;
  const std::string r = std::to_string(last);
  mlp<T> m = rank_model<T>();
  auto ps = m.parameters();
  dist::data_parallel<T> dp(ps, MPI_COMM_WORLD, {.bucket_bytes = 512});
  local_loss(m, 0).backward();
  dp.finish();
  auto before = grads_of(ps);
  auto loss = local_loss(m, 1);
  if (rank == last) loss = loss * std::numeric_limits<T>::quiet_NaN();
  loss.backward();
  check(throws_with([&] { dp.finish(); }, "rank " + r + " had a NaN or infinite gradient at step 2"),
        "NaN on one rank");
  check(grads_of(ps) == before, "NaN: no gradient changed");

  if (rank == last) ps[2].requires_grad(false);
  local_loss(m, 2).backward();
  check(throws_with([&] { dp.finish(); }, "requires_grad changed on rank " + r), "requires_grad off on one rank");
  if (rank == last) ps[2].requires_grad(true);

  if (rank != last) local_loss(m, 3).backward();
  check(throws_with([&] { dp.finish(); }, "rank " + r + " called finish() without a backward at step 4"),
        "no backward on one rank");

  local_loss(m, 4).backward();
  dp.finish();
  bool finite = true;
  for (const auto& g : grads_of(ps))
    for (T v : g) finite = finite && std::isfinite(v);
  check(finite && same_as_rank0(ps), "the step after the errors runs");
}

/// A rank that skips a step: the ranks' steps pair in order (the parameters stay identical),
/// and the step the others run beyond it meets its close(): an error on every rank.
void skipped_step() {
  const int skipper = ranks - 1;
  mlp<float> m = rank_model<float>();
  auto ps = m.parameters();
  fg::nn::sgd<float> opt(ps, 0.1f);
  bool reported = false;
  {
    dist::data_parallel<float> dp(ps);
    for (int s = 0; s < 4; ++s) {
      if (rank == skipper && s == 1) continue;
      opt.zero_grad();
      local_loss(m, s).backward();
      if (rank == skipper) {
        dp.finish();
      } else if (s < 3) {
        dp.finish();
      } else {
        reported = throws_with([&] { dp.finish(); }, "rank " + std::to_string(skipper) + " left");
        break;
      }
      opt.step();
    }
    if (rank == skipper) reported = throws_with([&] { dp.close(); }, "while rank 0 ran on");
  }
  check(reported, "a skipped step: an error on every rank");
  check(same_as_rank0(ps), "a skipped step: parameters identical on every rank");
}

/// An exception on one rank between steps: its data_parallel, destroyed by the unwinding,
/// tells the others, whose finish() throws instead of waiting. (Its destructor prints, on
/// stderr, that the others ran on: the line in the test's log is expected.)
void exception_on_one_rank() {
  const int last = ranks - 1;
  mlp<float> m = rank_model<float>();
  auto ps = m.parameters();
  bool reported = false;
  try {
    dist::data_parallel<float> dp(ps);
    for (int s = 0; s < 3; ++s) {
      auto loss = local_loss(m, s);
      if (rank == last && s == 1) throw std::runtime_error("a bad batch");
      loss.backward();
      dp.finish();
    }
  } catch (const fg::error& e) {
    reported =
        rank != last && std::string(e.what()).find("rank " + std::to_string(last) + " left") != std::string::npos;
  } catch (const std::runtime_error&) { reported = rank == last; }
  check(reported, "an exception on one rank: an error on every other rank");
}

/// Names the case on rank 0 (where a case hangs, the log says which).
void begin(const char* name) {
  if (rank == 0) std::printf("case: %s\n", name);
  std::fflush(stdout);
}

/// A backward on another thread than the data_parallel's: its hooks would call MPI there
/// (MPI_THREAD_FUNNELED forbids it), so the first one throws, before any collective.
void other_thread() {
  mlp<float> m = rank_model<float>();
  auto ps = m.parameters();
  dist::data_parallel<float> dp(ps);
  const auto loss = local_loss(m, 0);
  bool thrown = false;
  std::thread t([&] { thrown = throws_with([&] { loss.backward(); }, "called on another thread"); });
  t.join();
  check(thrown, "a backward on another thread throws");
  local_loss(m, 1).backward();
  dp.finish();
  check(same_as_rank0(ps), "the step after it runs");
}

void run_cases() {
  begin("equivalence");
  equivalence<float>("float, eager", false, {});
  equivalence<double>("double, eager", false, {});
  equivalence<float>("float, eager, 4 buckets", false, {.bucket_bytes = 512});
  equivalence<double>("double, eager, no overlap", false, {.bucket_bytes = 512, .overlap = false});
  equivalence<float>("float, compiled autograd", true, {});
  equivalence<double>("double, compiled autograd, 4 buckets", true, {.bucket_bytes = 1024});
  begin("accumulation");
  accumulation<float>(false);
  accumulation<double>(false);
  accumulation<float>(true);
  begin("mismatched lists");
  mismatched_lists();
  begin("bad steps");
  bad_steps<float>();
  bad_steps<double>();
  begin("a skipped step");
  skipped_step();
  begin("an exception on one rank");
  exception_on_one_rank();
  begin("a backward on another thread");
  other_thread();
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  run_cases();
  std::printf("rank %d of %d: %d checks, %d failed\n", rank, ranks, checks, failures);
  std::fflush(stdout);
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
