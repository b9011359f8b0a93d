// The softmax family and cross-entropy beside hand-written loops, on rows of a [R, C] float
// matrix (the last dim reduced).
//
//   cmake --preset bench && cmake --build --preset bench --target bench_softmax
//   ./build/bench/bench/bench_softmax --benchmark_min_time=0.2   (figures: docs/performance.md)
//
// Cases (C = 1024 columns, R rows, 4 R C bytes read):
//   BM_softmax_<variant>/R       y = softmax(x, -1), forward only (grad mode off)
//   BM_log_softmax_<variant>/R   y = log_softmax(x, -1), forward only
//   BM_logsumexp_<variant>/R     y = logsumexp(x, -1), forward only
//       eager     eager ops, one kernel each (max, sub, exp, sum, div, ...)
//       compiled  fg::compile's fused kernels (one pass for the max, one for the rest)
//       jit       fg::jit, cache hit
//       hand      per row: one xsimd pass for the max, one for exp and the sum, one to scale
//   BM_cross_entropy_<variant>/R  loss = cross_entropy(logits, targets) and its backward
//       eager     nn::cross_entropy with the tape
//       jit       the same under fg::jit with compiled autograd on
//       hand      per row: max, exp-sum, the loss term and the gradient (softmax - onehot) / R
//   BM_<f>_grad_<variant>/R/C     forward + backward of loss = sum(f(x, -1) * g), f softmax or
//                                 log_softmax, on [R, C] ({1024, 1024} and {16384, 128}):
//       eager / compiled / jit  the tape, fg::compile, fg::jit (cache hit)
//       hand      per row: the max; exp, Σexp and Σexp·g (or Σg, Σx·g) in one pass; the
//                 gradient in a second (the best loop: softmax's y (g - Σgy), nothing saved)
//   BM_<f>_grad_<variant>/R/C     the same for logsumexp (loss = sum(logsumexp(x, -1, true) * g),
//                                 g [R, 1]), layer_norm (loss = sum(layer_norm(x) * g)) and
//                                 cross-entropy written as a user writes it for every path,
//                                 loss = -mean(sum(log_softmax(x, -1) * t, -1)) with t one-hot
//       hand      per row, the row in L1: logsumexp the max, exp into dx with Σexp, then dx·g/Σ;
//                 layer_norm the mean, the variance, Σg and Σg·x̂, then dx; cross-entropy the
//                 max, exp into dx with Σexp, then dx/Σ - t, all / R
//   BM_<case>_libtorch/...        LibTorch 1.13 (torch::softmax, log_softmax, logsumexp,
//                                 cross_entropy, each with its backward where timed) with the
//                                 threads set to 1, as the rest of this file runs, where
//                                 LibTorch is installed

#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "fusegrad/fusegrad.hpp"
#include "one_thread.hpp"

#if defined(FUSEGRAD_HAVE_TORCH)
#include <torch/torch.h>
#endif

namespace fg = fusegrad;

namespace {
constexpr long C = 1024;
using B = xsimd::batch<float>;
constexpr long W = static_cast<long>(B::size);

float hmax(const B& m) {
  alignas(64) float v[W];
  m.store_aligned(v);
  float r = v[0];
  for (long k = 1; k < W; ++k) r = std::max(r, v[k]);
  return r;
}
float row_max(const float* __restrict x, long n) {
  B m(-INFINITY);
  long i = 0;
  for (; i + W <= n; i += W) m = xsimd::max(m, B::load_unaligned(x + i));
  float r = hmax(m);
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}
/// out = exp(x - m), returns Σ out.
float row_exp_sum(const float* __restrict x, float m, float* __restrict out, long n) {
  B s(0.f);
  long i = 0;
  for (; i + W <= n; i += W) {
    const B e = xsimd::exp(B::load_unaligned(x + i) - B(m));
    e.store_unaligned(out + i);
    s += e;
  }
  float r = xsimd::hadd(s);
  for (; i < n; ++i) r += out[i] = std::exp(x[i] - m);
  return r;
}
__attribute__((noinline)) void hand_softmax(const float* __restrict x, float* __restrict y, long rows) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    const float s = row_exp_sum(xr, row_max(xr, C), yr, C), inv = 1.f / s;
    for (long i = 0; i < C; i += W) (B::load_unaligned(yr + i) * B(inv)).store_unaligned(yr + i);
  }
}
__attribute__((noinline)) void hand_log_softmax(const float* __restrict x, float* __restrict y, long rows) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    const float m = row_max(xr, C);
    B s(0.f);
    for (long i = 0; i < C; i += W) s += xsimd::exp(B::load_unaligned(xr + i) - B(m));
    const float shift = m + std::log(xsimd::hadd(s));
    for (long i = 0; i < C; i += W) (B::load_unaligned(xr + i) - B(shift)).store_unaligned(yr + i);
  }
}
__attribute__((noinline)) void hand_logsumexp(const float* __restrict x, float* __restrict y, long rows) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    const float m = row_max(xr, C);
    B s(0.f);
    for (long i = 0; i < C; i += W) s += xsimd::exp(B::load_unaligned(xr + i) - B(m));
    y[r] = m + std::log(xsimd::hadd(s));
  }
}
/// Mean cross-entropy of `rows` rows and its gradient (softmax - onehot) / rows.
__attribute__((noinline)) float hand_cross_entropy(const float* __restrict x, const long* __restrict t,
                                                   float* __restrict g, long rows) {
  float loss = 0;
  const float inv_rows = 1.f / static_cast<float>(rows);
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* gr = g + r * C;
    const float m = row_max(xr, C);
    const float s = row_exp_sum(xr, m, gr, C), scale = inv_rows / s;
    loss += (m + std::log(s) - xr[t[r]]) * inv_rows;
    for (long i = 0; i < C; i += W) (B::load_unaligned(gr + i) * B(scale)).store_unaligned(gr + i);
    gr[t[r]] -= inv_rows;
  }
  return loss;
}

fg::tensor<float> input(long rows) { return fg::randn<float>({rows, C}, 1) * 3.0f; }

template <class F>
void run_forward(benchmark::State& state, F&& f) {
  const fg::tensor<float> x = input(state.range(0));
  fg::no_grad ng;
  for (auto _ : state) {
    fg::tensor<float> y = f(x);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * C * static_cast<long>(sizeof(float)));
}

auto softmax = [](auto x) { return fg::softmax(x, -1); };
auto log_softmax = [](auto x) { return fg::log_softmax(x, -1); };
auto logsumexp = [](auto x) { return fg::logsumexp(x, -1); };

#define FORWARD_CASES(name, fn, hand)                                                  \
  void BM_##name##_eager(benchmark::State& s) {                                        \
    run_forward(s, [](const fg::tensor<float>& x) { return fn(x); });                  \
  }                                                                                    \
  void BM_##name##_compiled(benchmark::State& s) {                                     \
    auto f = fg::compile(fn);                                                          \
    run_forward(s, f);                                                                 \
  }                                                                                    \
  void BM_##name##_jit(benchmark::State& s) {                                          \
    auto f = fg::jit([](const fg::tensor<float>& x) { return fn(x); });                \
    run_forward(s, f);                                                                 \
  }                                                                                    \
  void BM_##name##_hand(benchmark::State& s) {                                         \
    const long rows = s.range(0);                                                      \
    const auto x = input(rows).to_vector();                                            \
    std::vector<float> y(static_cast<std::size_t>(rows * C));                          \
    for (auto _ : s) {                                                                 \
      hand(x.data(), y.data(), rows);                                                  \
      benchmark::DoNotOptimize(y.data());                                              \
    }                                                                                  \
    s.SetBytesProcessed(s.iterations() * rows * C * static_cast<long>(sizeof(float))); \
  }
FORWARD_CASES(softmax, softmax, hand_softmax)
FORWARD_CASES(log_softmax, log_softmax, hand_log_softmax)
FORWARD_CASES(logsumexp, logsumexp, hand_logsumexp)

std::vector<fg::index_t> targets(long rows) {
  std::vector<fg::index_t> t;
  for (long r = 0; r < rows; ++r) t.push_back((r * 37) % C);
  return t;
}
template <class F>
void run_cross_entropy(benchmark::State& state, F&& logits_of) {
  const long rows = state.range(0);
  const auto t = targets(rows);
  fg::tensor<float> x = input(rows).requires_grad(true);
  for (auto _ : state) {
    x.zero_grad();
    fg::tensor<float> loss = fg::nn::cross_entropy(logits_of(x), t);
    loss.backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * rows * C * static_cast<long>(sizeof(float)) * 2);
}
void BM_cross_entropy_eager(benchmark::State& s) {
  run_cross_entropy(s, [](const fg::tensor<float>& x) { return x; });
}
void BM_cross_entropy_jit(benchmark::State& s) {
  fg::compiled_autograd::enable on;
  const long rows = s.range(0);
  const auto t = targets(rows);
  auto f = fg::jit([&t](const fg::tensor<float>& x) { return fg::nn::cross_entropy(x, t); });
  fg::tensor<float> x = input(rows).requires_grad(true);
  for (auto _ : s) {
    x.zero_grad();
    fg::tensor<float> loss = f(x);
    loss.backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  s.SetBytesProcessed(s.iterations() * rows * C * static_cast<long>(sizeof(float)) * 2);
}
void BM_cross_entropy_hand(benchmark::State& s) {
  const long rows = s.range(0);
  const auto x = input(rows).to_vector();
  std::vector<long> t;
  for (auto v : targets(rows)) t.push_back(v);
  std::vector<float> g(static_cast<std::size_t>(rows * C));
  for (auto _ : s) {
    benchmark::DoNotOptimize(hand_cross_entropy(x.data(), t.data(), g.data(), rows));
    benchmark::DoNotOptimize(g.data());
  }
  s.SetBytesProcessed(s.iterations() * rows * C * static_cast<long>(sizeof(float)) * 2);
}

// ---- forward + backward on [R, C]: loss = sum(f(x) * g), then backward -----------------------
// Args: R, C ({1024, 1024} and {16384, 128}, the shapes the comparison with LibTorch uses; the
// hand loops take C a multiple of the batch width).
fg::tensor<float> input_rc(long rows, long cols, unsigned seed) { return fg::randn<float>({rows, cols}, seed) * 3.0f; }

/// The upstream weights of loss `f`: g [R, C] (softmax, log_softmax, layer_norm), [R, 1]
/// (logsumexp) or one-hot targets (cross-entropy).
enum class weights { full, per_row, one_hot };
fg::tensor<float> weights_of(weights w, long rows, long cols) {
  if (w == weights::full) return input_rc(rows, cols, 2);
  if (w == weights::per_row) return fg::randn<float>({rows, 1}, 2) * 3.0f;
  std::vector<float> t(static_cast<std::size_t>(rows * cols), 0.f);
  for (long r = 0; r < rows; ++r) t[static_cast<std::size_t>(r * cols + (r * 37) % cols)] = 1.f;
  return fg::from_vector(t, {rows, cols});
}
template <weights W = weights::full, class F>
void run_grad(benchmark::State& state, F&& f) {
  const long rows = state.range(0), cols = state.range(1);
  fg::tensor<float> x = input_rc(rows, cols, 1).requires_grad(true);
  const fg::tensor<float> g = weights_of(W, rows, cols);
  for (auto _ : state) {
    x.zero_grad();
    fg::tensor<float> loss = f(x, g);
    loss.backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * static_cast<long>(sizeof(float)) * 3);
}
auto softmax_loss = [](auto x, auto g) { return fg::sum(fg::softmax(x, -1) * g); };
auto log_softmax_loss = [](auto x, auto g) { return fg::sum(fg::log_softmax(x, -1) * g); };
auto logsumexp_loss = [](auto x, auto g) { return fg::sum(fg::logsumexp(x, -1, true) * g); };
auto layer_norm_loss = [](auto x, auto g) { return fg::sum(fg::layer_norm(x) * g); };
auto cross_entropy_loss = [](auto x, auto t) { return -fg::mean(fg::sum(fg::log_softmax(x, -1) * t, -1)); };

#define GRAD_CASES(name, fn, w)                                                                        \
  void BM_##name##_grad_eager(benchmark::State& s) {                                                   \
    run_grad<w>(s, [](const fg::tensor<float>& x, const fg::tensor<float>& g) { return fn(x, g); });   \
  }                                                                                                    \
  void BM_##name##_grad_compiled(benchmark::State& s) {                                                \
    auto f = fg::compile(fn);                                                                          \
    run_grad<w>(s, f);                                                                                 \
  }                                                                                                    \
  void BM_##name##_grad_jit(benchmark::State& s) {                                                     \
    auto f = fg::jit([](const fg::tensor<float>& x, const fg::tensor<float>& g) { return fn(x, g); }); \
    run_grad<w>(s, f);                                                                                 \
  }
GRAD_CASES(softmax, softmax_loss, weights::full)
GRAD_CASES(log_softmax, log_softmax_loss, weights::full)
GRAD_CASES(logsumexp, logsumexp_loss, weights::per_row)
GRAD_CASES(layer_norm, layer_norm_loss, weights::full)
GRAD_CASES(cross_entropy, cross_entropy_loss, weights::one_hot)

/// Per row: the max; e = exp(x - m) into dx with Σe and Σe·g; dx = e/s · (g - Σe·g / s).
__attribute__((noinline)) float hand_softmax_grad(const float* __restrict x, const float* __restrict g,
                                                  float* __restrict dx, long rows, long cols) {
  float loss = 0;
  for (long r = 0; r < rows; ++r) {
    const float *xr = x + r * cols, *gr = g + r * cols;
    float* dr = dx + r * cols;
    const float m = row_max(xr, cols);
    B s(0.f), t(0.f);
    for (long i = 0; i < cols; i += W) {
      const B e = xsimd::exp(B::load_unaligned(xr + i) - B(m));
      e.store_unaligned(dr + i);
      s += e;
      t = xsimd::fma(e, B::load_unaligned(gr + i), t);
    }
    const float inv = 1.f / xsimd::hadd(s), dot = xsimd::hadd(t) * inv;
    loss += dot;
    for (long i = 0; i < cols; i += W)
      (B::load_unaligned(dr + i) * B(inv) * (B::load_unaligned(gr + i) - B(dot))).store_unaligned(dr + i);
  }
  return loss;
}
/// Per row: the max; Σexp(x - m) and Σg; loss += Σ(x - shift)·g; dx = g - softmax · Σg.
__attribute__((noinline)) float hand_log_softmax_grad(const float* __restrict x, const float* __restrict g,
                                                      float* __restrict dx, long rows, long cols) {
  float loss = 0;
  for (long r = 0; r < rows; ++r) {
    const float *xr = x + r * cols, *gr = g + r * cols;
    float* dr = dx + r * cols;
    const float m = row_max(xr, cols);
    B s(0.f), gs(0.f), xg(0.f);
    for (long i = 0; i < cols; i += W) {
      const B xv = B::load_unaligned(xr + i), gv = B::load_unaligned(gr + i);
      const B e = xsimd::exp(xv - B(m));
      e.store_unaligned(dr + i);
      s += e;
      gs += gv;
      xg = xsimd::fma(xv, gv, xg);
    }
    const float sum = xsimd::hadd(s), gsum = xsimd::hadd(gs), shift = m + std::log(sum), k = gsum / sum;
    loss += xsimd::hadd(xg) - shift * gsum;
    for (long i = 0; i < cols; i += W)
      (B::load_unaligned(gr + i) - B::load_unaligned(dr + i) * B(k)).store_unaligned(dr + i);
  }
  return loss;
}
/// Per row: the max; e = exp(x - m) into dx with Σe; loss += g_r (m + log Σe); dx = e · g_r / Σe.
__attribute__((noinline)) float hand_logsumexp_grad(const float* __restrict x, const float* __restrict g,
                                                    float* __restrict dx, long rows, long cols) {
  float loss = 0;
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* dr = dx + r * cols;
    const float m = row_max(xr, cols), s = row_exp_sum(xr, m, dr, cols), k = g[r] / s;
    loss += g[r] * (m + std::log(s));
    for (long i = 0; i < cols; i += W) (B::load_unaligned(dr + i) * B(k)).store_unaligned(dr + i);
  }
  return loss;
}
/// Per row, in L1: the mean; the biased variance; x̂ = (x - mean) / σ into dx with Σg and Σg·x̂
/// (loss += Σg·x̂); dx = (g - Σg/C - x̂ Σg·x̂/C) / σ.
__attribute__((noinline)) float hand_layer_norm_grad(const float* __restrict x, const float* __restrict g,
                                                     float* __restrict dx, long rows, long cols) {
  float loss = 0;
  const float inv_c = 1.f / static_cast<float>(cols);
  for (long r = 0; r < rows; ++r) {
    const float *xr = x + r * cols, *gr = g + r * cols;
    float* dr = dx + r * cols;
    B s(0.f);
    for (long i = 0; i < cols; i += W) s += B::load_unaligned(xr + i);
    const float mean = xsimd::hadd(s) * inv_c;
    B v(0.f);
    for (long i = 0; i < cols; i += W) {
      const B d = B::load_unaligned(xr + i) - B(mean);
      v = xsimd::fma(d, d, v);
    }
    const float inv_sd = 1.f / std::sqrt(xsimd::hadd(v) * inv_c + 1e-5f);
    B gs(0.f), gy(0.f);
    for (long i = 0; i < cols; i += W) {
      const B y = (B::load_unaligned(xr + i) - B(mean)) * B(inv_sd), gv = B::load_unaligned(gr + i);
      y.store_unaligned(dr + i);
      gs += gv;
      gy = xsimd::fma(gv, y, gy);
    }
    const float a = xsimd::hadd(gs) * inv_c, b = xsimd::hadd(gy);
    loss += b;
    for (long i = 0; i < cols; i += W) {
      const B y = B::load_unaligned(dr + i);
      ((B::load_unaligned(gr + i) - B(a) - y * B(b * inv_c)) * B(inv_sd)).store_unaligned(dr + i);
    }
  }
  return loss;
}
/// The mean cross-entropy of the rows against one-hot targets `t` (the target of row r at
/// (r * 37) % cols) and its gradient: per row the max, exp into dx with Σexp, dx = (e/Σ - t)/R.
__attribute__((noinline)) float hand_cross_entropy_grad(const float* __restrict x, const float* __restrict,
                                                        float* __restrict dx, long rows, long cols) {
  float loss = 0;
  const float inv_rows = 1.f / static_cast<float>(rows);
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* dr = dx + r * cols;
    const long t = (r * 37) % cols;
    const float m = row_max(xr, cols), s = row_exp_sum(xr, m, dr, cols), scale = inv_rows / s;
    loss += (m + std::log(s) - xr[t]) * inv_rows;
    for (long i = 0; i < cols; i += W) (B::load_unaligned(dr + i) * B(scale)).store_unaligned(dr + i);
    dr[t] -= inv_rows;
  }
  return loss;
}
template <class H>
void run_hand_grad(benchmark::State& state, H&& hand, bool per_row = false) {
  const long rows = state.range(0), cols = state.range(1);
  const auto x = input_rc(rows, cols, 1).to_vector();
  const auto g = (per_row ? fg::randn<float>({rows, 1}, 2) * 3.0f : input_rc(rows, cols, 2)).to_vector();
  std::vector<float> dx(x.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(hand(x.data(), g.data(), dx.data(), rows, cols));
    benchmark::DoNotOptimize(dx.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * static_cast<long>(sizeof(float)) * 3);
}
void BM_softmax_grad_hand(benchmark::State& s) { run_hand_grad(s, hand_softmax_grad); }
void BM_log_softmax_grad_hand(benchmark::State& s) { run_hand_grad(s, hand_log_softmax_grad); }
void BM_logsumexp_grad_hand(benchmark::State& s) { run_hand_grad(s, hand_logsumexp_grad, true); }
void BM_layer_norm_grad_hand(benchmark::State& s) { run_hand_grad(s, hand_layer_norm_grad); }
void BM_cross_entropy_grad_hand(benchmark::State& s) { run_hand_grad(s, hand_cross_entropy_grad); }

#if defined(FUSEGRAD_HAVE_TORCH)
torch::Tensor torch_input(long rows) {
  const auto v = input(rows).to_vector();
  return torch::from_blob(const_cast<float*>(v.data()), {rows, C}, torch::kFloat).clone();
}
template <class F>
void run_torch_forward(benchmark::State& state, F&& f) {
  torch::set_num_threads(1);
  const torch::Tensor x = torch_input(state.range(0));
  torch::NoGradGuard ng;
  for (auto _ : state) {
    torch::Tensor y = f(x);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * C * static_cast<long>(sizeof(float)));
}
void BM_softmax_libtorch(benchmark::State& s) {
  run_torch_forward(s, [](const torch::Tensor& x) { return torch::softmax(x, -1); });
}
void BM_log_softmax_libtorch(benchmark::State& s) {
  run_torch_forward(s, [](const torch::Tensor& x) { return torch::log_softmax(x, -1); });
}
void BM_logsumexp_libtorch(benchmark::State& s) {
  run_torch_forward(s, [](const torch::Tensor& x) { return torch::logsumexp(x, -1); });
}
void BM_cross_entropy_libtorch(benchmark::State& s) {
  torch::set_num_threads(1);
  const long rows = s.range(0);
  std::vector<long> t;
  for (auto v : targets(rows)) t.push_back(v);
  const auto target = torch::from_blob(t.data(), {rows}, torch::kLong).clone();
  torch::Tensor x = torch_input(rows).requires_grad_(true);
  for (auto _ : s) {
    x.mutable_grad() = torch::Tensor();
    auto loss = torch::nn::functional::cross_entropy(x, target);
    loss.backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  s.SetBytesProcessed(s.iterations() * rows * C * static_cast<long>(sizeof(float)) * 2);
}
template <weights W = weights::full, class F>
void run_torch_grad(benchmark::State& state, F&& f) {
  torch::set_num_threads(1);
  const long rows = state.range(0), cols = state.range(1);
  auto from = [](const fg::tensor<float>& t) {
    const auto v = t.to_vector();
    std::vector<long> s(t.shape().begin(), t.shape().end());
    return torch::from_blob(const_cast<float*>(v.data()), s, torch::kFloat).clone();
  };
  torch::Tensor x = from(input_rc(rows, cols, 1)).requires_grad_(true);
  const torch::Tensor g = from(weights_of(W, rows, cols));
  for (auto _ : state) {
    x.mutable_grad() = torch::Tensor();
    auto loss = (f(x) * g).sum();
    loss.backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * static_cast<long>(sizeof(float)) * 3);
}
void BM_softmax_grad_libtorch(benchmark::State& s) {
  run_torch_grad(s, [](const torch::Tensor& x) { return torch::softmax(x, -1); });
}
void BM_log_softmax_grad_libtorch(benchmark::State& s) {
  run_torch_grad(s, [](const torch::Tensor& x) { return torch::log_softmax(x, -1); });
}
void BM_logsumexp_grad_libtorch(benchmark::State& s) {
  run_torch_grad<weights::per_row>(s, [](const torch::Tensor& x) { return torch::logsumexp(x, -1, true); });
}
void BM_layer_norm_grad_libtorch(benchmark::State& s) {
  run_torch_grad(s, [](const torch::Tensor& x) { return torch::layer_norm(x, {x.size(-1)}); });
}
/// LibTorch's own cross-entropy on class indices (its fused log_softmax + nll_loss).
void BM_cross_entropy_grad_libtorch(benchmark::State& s) {
  torch::set_num_threads(1);
  const long rows = s.range(0), cols = s.range(1);
  std::vector<long> t;
  for (long r = 0; r < rows; ++r) t.push_back((r * 37) % cols);
  const auto target = torch::from_blob(t.data(), {rows}, torch::kLong).clone();
  const auto v = input_rc(rows, cols, 1).to_vector();
  torch::Tensor x =
      torch::from_blob(const_cast<float*>(v.data()), {rows, cols}, torch::kFloat).clone().requires_grad_(true);
  for (auto _ : s) {
    x.mutable_grad() = torch::Tensor();
    auto loss = torch::nn::functional::cross_entropy(x, target);
    loss.backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  s.SetBytesProcessed(s.iterations() * rows * cols * static_cast<long>(sizeof(float)) * 3);
}
#endif

void rows(benchmark::internal::Benchmark* b) { b->Arg(64)->Arg(1024); }
void shapes(benchmark::internal::Benchmark* b) { b->Args({1024, 1024})->Args({16384, 128}); }
}  // namespace

BENCHMARK(BM_softmax_eager)->Apply(rows);
BENCHMARK(BM_softmax_compiled)->Apply(rows);
BENCHMARK(BM_softmax_jit)->Apply(rows);
BENCHMARK(BM_softmax_hand)->Apply(rows);
BENCHMARK(BM_log_softmax_eager)->Apply(rows);
BENCHMARK(BM_log_softmax_compiled)->Apply(rows);
BENCHMARK(BM_log_softmax_jit)->Apply(rows);
BENCHMARK(BM_log_softmax_hand)->Apply(rows);
BENCHMARK(BM_logsumexp_eager)->Apply(rows);
BENCHMARK(BM_logsumexp_compiled)->Apply(rows);
BENCHMARK(BM_logsumexp_jit)->Apply(rows);
BENCHMARK(BM_logsumexp_hand)->Apply(rows);
BENCHMARK(BM_cross_entropy_eager)->Apply(rows);
BENCHMARK(BM_cross_entropy_jit)->Apply(rows);
BENCHMARK(BM_cross_entropy_hand)->Apply(rows);
BENCHMARK(BM_softmax_grad_eager)->Apply(shapes);
BENCHMARK(BM_softmax_grad_compiled)->Apply(shapes);
BENCHMARK(BM_softmax_grad_jit)->Apply(shapes);
BENCHMARK(BM_softmax_grad_hand)->Apply(shapes);
BENCHMARK(BM_log_softmax_grad_eager)->Apply(shapes);
BENCHMARK(BM_log_softmax_grad_compiled)->Apply(shapes);
BENCHMARK(BM_log_softmax_grad_jit)->Apply(shapes);
BENCHMARK(BM_log_softmax_grad_hand)->Apply(shapes);
BENCHMARK(BM_logsumexp_grad_eager)->Apply(shapes);
BENCHMARK(BM_logsumexp_grad_compiled)->Apply(shapes);
BENCHMARK(BM_logsumexp_grad_jit)->Apply(shapes);
BENCHMARK(BM_logsumexp_grad_hand)->Apply(shapes);
BENCHMARK(BM_layer_norm_grad_eager)->Apply(shapes);
BENCHMARK(BM_layer_norm_grad_compiled)->Apply(shapes);
BENCHMARK(BM_layer_norm_grad_jit)->Apply(shapes);
BENCHMARK(BM_layer_norm_grad_hand)->Apply(shapes);
BENCHMARK(BM_cross_entropy_grad_eager)->Apply(shapes);
BENCHMARK(BM_cross_entropy_grad_compiled)->Apply(shapes);
BENCHMARK(BM_cross_entropy_grad_jit)->Apply(shapes);
BENCHMARK(BM_cross_entropy_grad_hand)->Apply(shapes);
#if defined(FUSEGRAD_HAVE_TORCH)
BENCHMARK(BM_softmax_libtorch)->Apply(rows);
BENCHMARK(BM_log_softmax_libtorch)->Apply(rows);
BENCHMARK(BM_logsumexp_libtorch)->Apply(rows);
BENCHMARK(BM_cross_entropy_libtorch)->Apply(rows);
BENCHMARK(BM_softmax_grad_libtorch)->Apply(shapes);
BENCHMARK(BM_log_softmax_grad_libtorch)->Apply(shapes);
BENCHMARK(BM_logsumexp_grad_libtorch)->Apply(shapes);
BENCHMARK(BM_layer_norm_grad_libtorch)->Apply(shapes);
BENCHMARK(BM_cross_entropy_grad_libtorch)->Apply(shapes);
#endif
