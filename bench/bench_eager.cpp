// Eager-path overhead: each fusegrad eager op beside a hand-written loop doing the same math.
//
//   cmake --preset bench && cmake --build --preset bench
//   ./build/bench/bench/bench_eager --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//       --benchmark_min_time=0.2   (one command line)
//
// The figures and what they mean are in docs/performance.md.
//
// Naming: BM_<case>/<variant>/<N>, registered N by N so each pair runs (and prints) together:
//   fusegrad       the eager op on tensors that do not require grad (no tape node)
//   fusegrad_grad  the same op on tensors that require grad (also records a tape node; N = 1 and
//                  N = 10, the size that shows the fixed cost)
//   hand           a plain loop over raw 64-byte-aligned arrays into a preallocated output,
//                  in a noinline function with __restrict pointers (GCC -O3 vectorises the
//                  arithmetic ones; std::cos / std::exp and an IEEE-ordered float sum stay scalar)
//   hand_xsimd     the same loop written with xsimd batches (the SIMD math fusegrad's kernels
//                  use), so "fusegrad vs hand_xsimd" is framework overhead only
//
// Every fusegrad benchmark checks its result against the hand loop once after timing and
// reports an error instead of a time if they disagree.

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <xsimd/xsimd.hpp>

#if defined(FUSEGRAD_HAVE_EIGEN)
#include <Eigen/Core>
#endif

#include "fusegrad/fusegrad.hpp"
#include "one_thread.hpp"

namespace fg = fusegrad;

namespace {

using fg::index_t;
using batch = xsimd::batch<float>;
constexpr index_t W = static_cast<index_t>(batch::size);

// --- raw buffers -------------------------------------------------------------------------

template <class T>
struct aligned64 {
  using value_type = T;
  aligned64() = default;
  template <class U>
  aligned64(const aligned64<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{64}); }
  template <class U>
  bool operator==(const aligned64<U>&) const noexcept {
    return true;
  }
};
using fvec = std::vector<float, aligned64<float>>;

fvec to_fvec(const fg::tensor<float>& t) {
  const std::vector<float> v = t.to_vector();
  return fvec(v.begin(), v.end());
}

// Deterministic inputs shared by both sides of a pair.
fg::tensor<float> input(const fg::shape& s, std::uint64_t seed) { return fg::randn<float>(s, seed); }

// --- hand-written loops --------------------------------------------------------------------

#define HAND [[gnu::noinline]]

HAND void add_loop(const float* __restrict a, const float* __restrict b, float* __restrict c, index_t n) {
  for (index_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
HAND void mul_loop(const float* __restrict a, const float* __restrict b, float* __restrict c, index_t n) {
  for (index_t i = 0; i < n; ++i) c[i] = a[i] * b[i];
}
HAND void cos_loop(const float* __restrict a, float* __restrict c, index_t n) {
  for (index_t i = 0; i < n; ++i) c[i] = std::cos(a[i]);
}
HAND void exp_loop(const float* __restrict a, float* __restrict c, index_t n) {
  for (index_t i = 0; i < n; ++i) c[i] = std::exp(a[i]);
}
HAND void cos_loop_xsimd(const float* __restrict a, float* __restrict c, index_t n) {
  index_t i = 0;
  for (; i + W <= n; i += W) xsimd::cos(batch::load_aligned(a + i)).store_aligned(c + i);
  for (; i < n; ++i) c[i] = std::cos(a[i]);
}
HAND void exp_loop_xsimd(const float* __restrict a, float* __restrict c, index_t n) {
  index_t i = 0;
  for (; i + W <= n; i += W) xsimd::exp(batch::load_aligned(a + i)).store_aligned(c + i);
  for (; i < n; ++i) c[i] = std::exp(a[i]);
}
// IEEE order: GCC may not reassociate, so this stays a scalar dependency chain.
HAND float sum_loop(const float* __restrict a, index_t n) {
  float s = 0.0f;
  for (index_t i = 0; i < n; ++i) s += a[i];
  return s;
}
// Same order as fusegrad's reduction: W lane accumulators, horizontal add, scalar tail.
HAND float sum_loop_xsimd(const float* __restrict a, index_t n) {
  batch acc(0.0f);
  index_t i = 0;
  for (; i + W <= n; i += W) acc += batch::load_aligned(a + i);
  float s = xsimd::hadd(acc);
  for (; i < n; ++i) s += a[i];
  return s;
}
// [rows, cols] + [cols]
HAND void bcast_add_loop(const float* __restrict a, const float* __restrict b, float* __restrict c, index_t rows,
                         index_t cols) {
  for (index_t r = 0; r < rows; ++r) {
    const float* __restrict ar = a + r * cols;
    float* __restrict cr = c + r * cols;
    for (index_t j = 0; j < cols; ++j) cr[j] = ar[j] + b[j];
  }
}
// Naive i-k-j product, c[n×n] = a · b (GCC vectorises the loop over j; the row of c goes
// through memory for every p).
HAND void matmul_loop(const float* __restrict a, const float* __restrict b, float* __restrict c, index_t n) {
  for (index_t i = 0; i < n * n; ++i) c[i] = 0.0f;
  for (index_t i = 0; i < n; ++i) {
    float* __restrict ci = c + i * n;
    for (index_t p = 0; p < n; ++p) {
      const float aip = a[i * n + p];
      const float* __restrict bp = b + p * n;
      for (index_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
    }
  }
}
// The same product with 4 rows x 16 columns of c in registers over the whole sum (the
// register tile a careful engineer writes first; no packing, so large n re-reads b).
HAND void matmul_loop_tiled(const float* __restrict a, const float* __restrict b, float* __restrict c, index_t n) {
  index_t i = 0;
  for (; i + 4 <= n; i += 4) {
    index_t j = 0;
    for (; j + 2 * W <= n; j += 2 * W) {
      batch acc[4][2] = {};
      for (index_t p = 0; p < n; ++p) {
        const batch b0 = batch::load_unaligned(b + p * n + j), b1 = batch::load_unaligned(b + p * n + j + W);
        for (index_t r = 0; r < 4; ++r) {
          const batch ar(a[(i + r) * n + p]);
          acc[r][0] = xsimd::fma(ar, b0, acc[r][0]);
          acc[r][1] = xsimd::fma(ar, b1, acc[r][1]);
        }
      }
      for (index_t r = 0; r < 4; ++r) {
        acc[r][0].store_unaligned(c + (i + r) * n + j);
        acc[r][1].store_unaligned(c + (i + r) * n + j + W);
      }
    }
    for (; j < n; ++j)
      for (index_t r = 0; r < 4; ++r) {
        float acc = 0.0f;
        for (index_t p = 0; p < n; ++p) acc = std::fma(a[(i + r) * n + p], b[p * n + j], acc);
        c[(i + r) * n + j] = acc;
      }
  }
  for (; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (index_t p = 0; p < n; ++p) acc = std::fma(a[i * n + p], b[p * n + j], acc);
      c[i * n + j] = acc;
    }
}
// loss = sum(cos(cos(x)) * y), gx = y * sin(cos x) * sin x, gy = cos(cos x): one pass.
HAND float fwd_bwd_loop(const float* __restrict x, const float* __restrict y, float* __restrict gx,
                        float* __restrict gy, index_t n) {
  float loss = 0.0f;
  for (index_t i = 0; i < n; ++i) {
    const float c1 = std::cos(x[i]), c2 = std::cos(c1);
    loss += c2 * y[i];
    gy[i] = c2;
    gx[i] = y[i] * std::sin(c1) * std::sin(x[i]);
  }
  return loss;
}
HAND float fwd_bwd_loop_xsimd(const float* __restrict x, const float* __restrict y, float* __restrict gx,
                              float* __restrict gy, index_t n) {
  batch acc(0.0f);
  index_t i = 0;
  for (; i + W <= n; i += W) {
    const batch xv = batch::load_aligned(x + i), yv = batch::load_aligned(y + i);
    const batch c1 = xsimd::cos(xv), c2 = xsimd::cos(c1);
    acc += c2 * yv;
    c2.store_aligned(gy + i);
    (yv * xsimd::sin(c1) * xsimd::sin(xv)).store_aligned(gx + i);
  }
  float loss = xsimd::hadd(acc);
  for (; i < n; ++i) {
    const float c1 = std::cos(x[i]), c2 = std::cos(c1);
    loss += c2 * y[i];
    gy[i] = c2;
    gx[i] = y[i] * std::sin(c1) * std::sin(x[i]);
  }
  return loss;
}

#undef HAND

// --- helpers -------------------------------------------------------------------------------

// Floats go to benchmark::DoNotOptimize as const lvalues only: with GCC 12, Google Benchmark
// 1.7.1's non-const overload ("+m,r" asm constraint) loses the value it was given (a float
// assigned in the loop reads back as garbage afterwards).

void set_throughput(benchmark::State& st, index_t items, index_t bytes) {
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * items);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * bytes);
}

// Relative check (the SIMD and libm transcendental functions differ by a few ulp).
void check(benchmark::State& st, const fvec& got, const fvec& want, float tol = 1e-5f) {
  if (got.size() != want.size()) {
    st.SkipWithError("size mismatch vs hand loop");
    return;
  }
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (1.0f + std::abs(want[i])))) {
      st.SkipWithError("result differs from the hand loop");
      return;
    }
}

using bench_fn = void (*)(benchmark::State&);
struct variant {
  const char* name;
  bench_fn fn;
};

// Registers `BM_<op>/<variant>/<N>` for every N, variants of one N side by side.
void register_cases(const std::string& op, std::initializer_list<variant> vs, std::initializer_list<index_t> ns) {
  for (index_t n : ns)
    for (const variant& v : vs) benchmark::RegisterBenchmark(("BM_" + op + "/" + v.name).c_str(), v.fn)->Arg(n);
}

// --- element-wise binary: a + b, a * b -----------------------------------------------------

enum class bin { add, mul };

template <bin K>
fg::tensor<float> fg_binary(const fg::tensor<float>& a, const fg::tensor<float>& b) {
  if constexpr (K == bin::add) return a + b;
  else return a * b;
}
template <bin K>
void hand_binary(const float* a, const float* b, float* c, index_t n) {
  if constexpr (K == bin::add) add_loop(a, b, c, n);
  else mul_loop(a, b, c, n);
}

template <bin K, bool Grad>
void BM_binary_fusegrad(benchmark::State& st) {
  const index_t n = st.range(0);
  fg::tensor<float> a = input({n}, 1), b = input({n}, 2);
  a.requires_grad(Grad);
  b.requires_grad(Grad);
  for (auto _ : st) {
    fg::tensor<float> c = fg_binary<K>(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, 3 * n * index_t{sizeof(float)});
  fvec want(static_cast<std::size_t>(n));
  hand_binary<K>(to_fvec(a).data(), to_fvec(b).data(), want.data(), n);
  check(st, to_fvec(fg_binary<K>(a, b)), want, 0.0f);
}

template <bin K>
void BM_binary_hand(benchmark::State& st) {
  const index_t n = st.range(0);
  const fvec a = to_fvec(input({n}, 1)), b = to_fvec(input({n}, 2));
  fvec c(static_cast<std::size_t>(n));
  for (auto _ : st) {
    hand_binary<K>(a.data(), b.data(), c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, 3 * n * index_t{sizeof(float)});
}

// --- element-wise unary: cos(x), exp(x) ----------------------------------------------------

enum class un { cos, exp };

template <un K>
fg::tensor<float> fg_unary(const fg::tensor<float>& x) {
  if constexpr (K == un::cos) return fg::cos(x);
  else return fg::exp(x);
}
template <un K>
void hand_unary_std(const float* x, float* y, index_t n) {
  if constexpr (K == un::cos) cos_loop(x, y, n);
  else exp_loop(x, y, n);
}
template <un K>
void hand_unary_xsimd(const float* x, float* y, index_t n) {
  if constexpr (K == un::cos) cos_loop_xsimd(x, y, n);
  else exp_loop_xsimd(x, y, n);
}

template <un K, bool Grad>
void BM_unary_fusegrad(benchmark::State& st) {
  const index_t n = st.range(0);
  fg::tensor<float> x = input({n}, 3);
  x.requires_grad(Grad);
  for (auto _ : st) {
    fg::tensor<float> y = fg_unary<K>(x);
    benchmark::DoNotOptimize(y.data_ptr());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, 2 * n * index_t{sizeof(float)});
  fvec want(static_cast<std::size_t>(n));
  hand_unary_std<K>(to_fvec(x).data(), want.data(), n);
  check(st, to_fvec(fg_unary<K>(x)), want);
}

template <un K, bool Xsimd>
void BM_unary_hand(benchmark::State& st) {
  const index_t n = st.range(0);
  const fvec x = to_fvec(input({n}, 3));
  fvec y(static_cast<std::size_t>(n));
  for (auto _ : st) {
    if constexpr (Xsimd) hand_unary_xsimd<K>(x.data(), y.data(), n);
    else hand_unary_std<K>(x.data(), y.data(), n);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, 2 * n * index_t{sizeof(float)});
}

// --- reduction: sum(x) ---------------------------------------------------------------------

void BM_sum_fusegrad(benchmark::State& st) {
  const index_t n = st.range(0);
  const fg::tensor<float> x = input({n}, 4);
  for (auto _ : st) {
    fg::tensor<float> s = fg::sum(x);
    benchmark::DoNotOptimize(s.data_ptr());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, n * index_t{sizeof(float)});
  check(st, {fg::sum(x).item()}, {sum_loop_xsimd(to_fvec(x).data(), n)}, 0.0f);
}

template <bool Xsimd>
void BM_sum_hand(benchmark::State& st) {
  const index_t n = st.range(0);
  const fvec x = to_fvec(input({n}, 4));
  for (auto _ : st) {
    const float s = Xsimd ? sum_loop_xsimd(x.data(), n) : sum_loop(x.data(), n);
    benchmark::DoNotOptimize(s);
  }
  set_throughput(st, n, n * index_t{sizeof(float)});
}

// --- broadcast: [N/16, 16] + [16] ----------------------------------------------------------

constexpr index_t bcast_cols = 16;

void BM_bcast_add_fusegrad(benchmark::State& st) {
  const index_t n = st.range(0), rows = n / bcast_cols;
  const fg::tensor<float> a = input({rows, bcast_cols}, 5), b = input({bcast_cols}, 6);
  for (auto _ : st) {
    fg::tensor<float> c = a + b;
    benchmark::DoNotOptimize(c.data_ptr());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, (2 * n + bcast_cols) * index_t{sizeof(float)});
  fvec want(static_cast<std::size_t>(n));
  bcast_add_loop(to_fvec(a).data(), to_fvec(b).data(), want.data(), rows, bcast_cols);
  check(st, to_fvec(a + b), want, 0.0f);
}

void BM_bcast_add_hand(benchmark::State& st) {
  const index_t n = st.range(0), rows = n / bcast_cols;
  const fvec a = to_fvec(input({rows, bcast_cols}, 5)), b = to_fvec(input({bcast_cols}, 6));
  fvec c(static_cast<std::size_t>(n));
  for (auto _ : st) {
    bcast_add_loop(a.data(), b.data(), c.data(), rows, bcast_cols);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, (2 * n + bcast_cols) * index_t{sizeof(float)});
}

// --- matmul: [n, n] · [n, n]; items = FLOPs (2 n^3) ----------------------------------------

void BM_matmul_fusegrad(benchmark::State& st) {
  const index_t n = st.range(0);
  const fg::tensor<float> a = input({n, n}, 7), b = input({n, n}, 8);
  for (auto _ : st) {
    fg::tensor<float> c = fg::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
    benchmark::ClobberMemory();
  }
  set_throughput(st, 2 * n * n * n, 3 * n * n * index_t{sizeof(float)});
  fvec want(static_cast<std::size_t>(n * n));
  matmul_loop(to_fvec(a).data(), to_fvec(b).data(), want.data(), n);
  check(st, to_fvec(fg::matmul(a, b)), want);
}

template <bool Tiled>
void BM_matmul_hand(benchmark::State& st) {
  const index_t n = st.range(0);
  const fvec a = to_fvec(input({n, n}, 7)), b = to_fvec(input({n, n}, 8));
  fvec c(static_cast<std::size_t>(n * n));
  for (auto _ : st) {
    if constexpr (Tiled) matmul_loop_tiled(a.data(), b.data(), c.data(), n);
    else matmul_loop(a.data(), b.data(), c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_throughput(st, 2 * n * n * n, 3 * n * n * index_t{sizeof(float)});
}

#if defined(FUSEGRAD_HAVE_EIGEN)
void BM_matmul_eigen(benchmark::State& st) {
  const index_t n = st.range(0);
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const fvec av = to_fvec(input({n, n}, 7)), bv = to_fvec(input({n, n}, 8));
  const M a = Eigen::Map<const M>(av.data(), n, n), b = Eigen::Map<const M>(bv.data(), n, n);
  M c(n, n);
  for (auto _ : st) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_throughput(st, 2 * n * n * n, 3 * n * n * index_t{sizeof(float)});
}
#endif

// --- forward + backward: sum(cos(cos(x)) * y).backward() -----------------------------------

void BM_fwd_bwd_fusegrad(benchmark::State& st) {
  const index_t n = st.range(0);
  fg::tensor<float> x = input({n}, 9), y = input({n}, 10);
  x.requires_grad(true);
  y.requires_grad(true);
  float loss = 0.0f;
  for (auto _ : st) {
    x.zero_grad();
    y.zero_grad();
    fg::tensor<float> l = fg::sum(fg::cos(fg::cos(x)) * y);
    l.backward();
    loss = l.item();
    benchmark::DoNotOptimize(std::as_const(loss));
    benchmark::DoNotOptimize(x.grad().data_ptr());
    benchmark::DoNotOptimize(y.grad().data_ptr());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, 4 * n * index_t{sizeof(float)});
  fvec gx(static_cast<std::size_t>(n)), gy(static_cast<std::size_t>(n));
  const float want = fwd_bwd_loop(to_fvec(x).data(), to_fvec(y).data(), gx.data(), gy.data(), n);
  check(st, {loss}, {want}, 1e-4f * static_cast<float>(n));
  check(st, to_fvec(x.grad()), gx);
  check(st, to_fvec(y.grad()), gy);
}

template <bool Xsimd>
void BM_fwd_bwd_hand(benchmark::State& st) {
  const index_t n = st.range(0);
  const fvec x = to_fvec(input({n}, 9)), y = to_fvec(input({n}, 10));
  fvec gx(static_cast<std::size_t>(n)), gy(static_cast<std::size_t>(n));
  for (auto _ : st) {
    const float loss = Xsimd ? fwd_bwd_loop_xsimd(x.data(), y.data(), gx.data(), gy.data(), n)
                             : fwd_bwd_loop(x.data(), y.data(), gx.data(), gy.data(), n);
    benchmark::DoNotOptimize(loss);
    benchmark::DoNotOptimize(gx.data());
    benchmark::DoNotOptimize(gy.data());
    benchmark::ClobberMemory();
  }
  set_throughput(st, n, 4 * n * index_t{sizeof(float)});
}

// --- registration --------------------------------------------------------------------------

// N = 1 is the "tiny op" case: with one element the time is all per-op overhead
// (shape checks, output allocation, and with fusegrad_grad the tape node).
const int registered = [] {
  register_cases("add", {{"fusegrad", BM_binary_fusegrad<bin::add, false>}, {"hand", BM_binary_hand<bin::add>}},
                 {1, 1 << 4, 1 << 10, 1 << 16, 1 << 20});
  register_cases("add", {{"fusegrad_grad", BM_binary_fusegrad<bin::add, true>}}, {1, 10});
  register_cases("mul", {{"fusegrad", BM_binary_fusegrad<bin::mul, false>}, {"hand", BM_binary_hand<bin::mul>}},
                 {1, 1 << 4, 1 << 10, 1 << 16, 1 << 20});
  register_cases("mul", {{"fusegrad_grad", BM_binary_fusegrad<bin::mul, true>}}, {1, 10});
  register_cases("cos",
                 {{"fusegrad", BM_unary_fusegrad<un::cos, false>},
                  {"hand", BM_unary_hand<un::cos, false>},
                  {"hand_xsimd", BM_unary_hand<un::cos, true>}},
                 {1, 1 << 4, 1 << 10, 1 << 16, 1 << 20});
  register_cases("cos", {{"fusegrad_grad", BM_unary_fusegrad<un::cos, true>}}, {1, 10});
  register_cases("exp",
                 {{"fusegrad", BM_unary_fusegrad<un::exp, false>},
                  {"hand", BM_unary_hand<un::exp, false>},
                  {"hand_xsimd", BM_unary_hand<un::exp, true>}},
                 {1, 1 << 4, 1 << 10, 1 << 16, 1 << 20});
  register_cases("sum",
                 {{"fusegrad", BM_sum_fusegrad}, {"hand", BM_sum_hand<false>}, {"hand_xsimd", BM_sum_hand<true>}},
                 {1, 1 << 4, 1 << 10, 1 << 16, 1 << 20});
  register_cases("bcast_add", {{"fusegrad", BM_bcast_add_fusegrad}, {"hand", BM_bcast_add_hand}},
                 {1 << 4, 1 << 10, 1 << 16, 1 << 20});
  register_cases("matmul",
                 {
                   {"fusegrad", BM_matmul_fusegrad}, {"hand", BM_matmul_hand<false>},
                       {"hand_tiled", BM_matmul_hand<true>},
#if defined(FUSEGRAD_HAVE_EIGEN)
                       {"eigen", BM_matmul_eigen},
#endif
                 },
                 {16, 64, 256});
  register_cases(
      "fwd_bwd",
      {{"fusegrad", BM_fwd_bwd_fusegrad}, {"hand", BM_fwd_bwd_hand<false>}, {"hand_xsimd", BM_fwd_bwd_hand<true>}},
      {1, 1 << 4, 1 << 10, 1 << 16, 1 << 20});
  return 0;
}();

}  // namespace
