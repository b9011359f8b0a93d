#pragma once
/// \file fusegrad/bench.hpp
/// A microbenchmark kit for fused kernels, on Google Benchmark (docs/benchmarking.md).
///
/// \code
/// fg::bench::suite("coscos", [](auto x, auto y) { return fg::cos(fg::cos(x)) * y; })
///     .sizes({10, 1 << 10, 1 << 20})
///     .with_backward()   // value and gradients of sum(f(x...)) instead of f's output alone
///     .hand(my_loop)     // optional: the loop the variants are measured against
///     .check(1e-5)       // optional: every variant agrees with the hand loop before timing
///     .add();            // registers <name>/<variant>/<N> cases with Google Benchmark
/// \endcode
///
/// One call registers, per size, the user's hand loop (first, when given), then eager,
/// `fg::compile`, `fg::jit` and, with `with_backward()`, the functional transforms on spans.
/// Each case reports its time, `items_per_second` (elements), `bytes_per_second` (the bytes one
/// fused pass must move), `copy_bound` (a copy loop's time over its own, the loop moving the
/// same bytes through the same arrays: 1 is as fast as memory allows) and `vs_hand` (its time
/// over the hand loop's).
///
/// Optional: only a translation unit that includes this header needs Google Benchmark (link
/// `benchmark::benchmark`); nothing else in fusegrad includes it. Where Google Benchmark is not
/// installed the header declares nothing, so that it still compiles on its own.

#if __has_include(<benchmark/benchmark.h>)

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "fusegrad/compile.hpp"
#include "fusegrad/core/error.hpp"
#include "fusegrad/functional.hpp"
#include "fusegrad/jit.hpp"

namespace fusegrad::bench {

/// The ways a suite runs the function, in the order they are registered at each size.
enum class variant { hand, eager, compile, jit, functional };

namespace detail {

inline constexpr std::size_t max_inputs = 8;

template <class T, std::size_t>
using tensor_arg = tensor<T>;
template <class T, std::size_t>
using span_in = std::span<const T>;
template <class T, std::size_t>
using span_out = std::span<T>;

template <class Fn, class T, std::size_t K>
constexpr bool callable_with() {
  return []<std::size_t... I>(std::index_sequence<I...>) { return std::is_invocable_v<const Fn&, tensor_arg<T, I>...>; }
  (std::make_index_sequence<K>{});
}

/// How many tensors `Fn` takes: the smallest count from 1 to `max_inputs` it can be called
/// with (0: none). Deduced, so that a suite needs no `inputs(K)` that could disagree with `fn`.
template <class Fn, class T>
constexpr std::size_t arity() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    std::size_t r = 0;
    ((r = (r == 0 && callable_with<Fn, T, K + 1>()) ? K + 1 : r), ...);
    return r;
  }
  (std::make_index_sequence<max_inputs>{});
}

/// Whether `H` is a hand loop of the suite's kind (see `suite_builder::hand`).
template <class H, class T, bool Backward, std::size_t... I>
constexpr bool hand_fits(std::index_sequence<I...>) {
  if constexpr (Backward) return std::is_invocable_r_v<T, const H&, span_in<T, I>..., span_out<T, I>...>;
  else return std::is_invocable_v<const H&, span_in<T, I>..., std::span<T>>;
}

struct no_hand {};

inline const char* name_of(variant v) {
  switch (v) {
    case variant::hand: return "hand";
    case variant::eager: return "eager";
    case variant::compile: return "compile";
    case variant::jit: return "jit";
    case variant::functional: return "functional";
  }
  return "?";
}

/// Seconds per call of `fn`: the fastest of 21 batches of at least 0.1 ms each (the best the
/// machine does, as a bound should be; short batches, so that on a busy machine some of them
/// run without being preempted). The number of calls per batch is found by doubling.
template <class F>
double best_seconds_per_call(F&& fn) {
  using clock = std::chrono::steady_clock;
  auto batch = [&](long reps) {
    const auto t0 = clock::now();
    for (long i = 0; i < reps; ++i) fn();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  long reps = 1;
  while (batch(reps) < 1e-4) reps *= 2;
  double best = std::numeric_limits<double>::infinity();
  for (int b = 0; b < 21; ++b) best = std::min(best, batch(reps));
  return best / static_cast<double>(reps);
}

/// The cheapest loop with a fused pass's memory traffic: reads `R` arrays of `n` floats and
/// writes `W`, storing the bitwise or of the inputs to each output (an or takes one cycle, so
/// the loop is bound by its loads and stores, as a copy is; a chain of adds measured slower
/// than x * y + z in L1: docs/benchmarking.md). The pointers come by value: a SIMD store may
/// alias anything, and pointers read through a reference would be read again after every store.
template <std::size_t R, std::size_t W>
[[gnu::noinline]] void stream(const std::array<const float*, R> src, const std::array<float*, W> dst, std::size_t n) {
  using B = xsimd::batch<float>;
  std::size_t i = 0;
  for (; i + B::size <= n; i += B::size) {
    B s = B::load_unaligned(src[0] + i);
    for (std::size_t r = 1; r < R; ++r) s = s | B::load_unaligned(src[r] + i);
    for (std::size_t w = 0; w < W; ++w) s.store_unaligned(dst[w] + i);
  }
  for (; i < n; ++i) {
    float s = src[0][i];
    for (std::size_t r = 1; r < R; ++r) s += src[r][i];
    for (std::size_t w = 0; w < W; ++w) dst[w][i] = s;
  }
}

/// Seconds the machine takes to move `bytes` per array in `R` arrays read and `W` written: the
/// copy bound of a fused pass with that traffic. A copy loop rather than `std::memcpy`: its
/// streams are the pass's (a memcpy reads one array and writes one, and writes cost more than
/// reads), and glibc's memcpy copies tens of KiB many times slower than a vector loop on some
/// machines (`rep movsb` on AMD Zen). Measured once per traffic and size.
template <std::size_t R, std::size_t W>
double copy_seconds(std::size_t bytes) {
  static std::map<std::size_t, double> cache;  // benchmarks run on one thread, one at a time
  if (const auto it = cache.find(bytes); it != cache.end()) return it->second;
  const std::size_t n = std::max<std::size_t>((bytes + sizeof(float) - 1) / sizeof(float), 1);
  std::vector<std::vector<float>> in(R, std::vector<float>(n, 1.0f)), out(W, std::vector<float>(n, 0.0f));
  std::array<const float*, R> src;
  std::array<float*, W> dst;
  for (std::size_t r = 0; r < R; ++r) src[r] = in[r].data();
  for (std::size_t w = 0; w < W; ++w) dst[w] = out[w].data();
  return cache[bytes] = best_seconds_per_call([&] {
           stream<R, W>(src, dst, n);
           benchmark::DoNotOptimize(dst[0]);
           benchmark::ClobberMemory();
         });
}

/// A suite's inputs at one size, the outputs the hand loop and the functional transforms write
/// to, and the size's `fg::jit` function (one per size: each size compiles its own program).
template <class T, std::size_t K, class Fn>
struct size_data {
  index_t n = 0;
  std::array<std::vector<T>, K> x;  // the inputs, for the hand loop and the functional form
  std::array<tensor<T>, K> t;       // the same values as tensors (leaves requiring grad in backward mode)
  std::array<std::vector<T>, K> g;  // gradients written by the hand loop and the functional form
  std::vector<T> out;               // the forward output of the hand loop
  std::optional<decltype(fusegrad::jit(std::declval<Fn>()))> jitted;
  std::array<bool, 5> shown{};  // whose plan show_plans() printed
};

/// What one call of a variant produced: the output (forward-only: f's N elements; with
/// backward: one element, sum(f(x...))), then with backward each input's gradient.
template <class T>
using results = std::vector<std::vector<T>>;

}  // namespace detail

/// A suite being configured; `add()` registers its cases. Made by `fg::bench::suite`. Every
/// setter returns a changed copy, so a suite is written as one chain of calls.
template <Element T, std::size_t K, class Fn, class Hand, bool Backward>
class suite_builder {
  static_assert(K >= 1,
                "fusegrad::bench::suite: the function must be callable with 1 to 8 fusegrad::tensor<T> "
                "arguments (the inputs, by value or const&), e.g. [](auto x, auto y) { return x * y; }");
  static constexpr bool has_hand = !std::is_same_v<Hand, detail::no_hand>;

 public:
  suite_builder(std::string name, Fn fn, Hand hand = {})
      : name_(std::move(name)), fn_(std::move(fn)), hand_(std::move(hand)) {}

  /// The sizes (elements per input) to register cases at, in this order.
  suite_builder sizes(std::vector<index_t> ns) const {
    auto r = *this;
    r.sizes_ = std::move(ns);
    return r;
  }
  /// Time `sum(f(x...))` and the gradients of every input (for tensors: the forward, then
  /// `fg::sum(out).backward()`) instead of the forward alone; adds the functional variant.
  suite_builder<T, K, Fn, Hand, true> with_backward() const { return rebuild<Hand, true>(hand_); }
  /// The loop every variant is measured against (`vs_hand`) and, with `check`, checked
  /// against, registered first at each size. Forward only, it is called as
  /// `hand(x0, ..., out)` with `std::span<const T>` inputs and a `std::span<T>` output; with
  /// `with_backward()`, as `T hand(x0, ..., g0, ...)` writing each input's gradient of the
  /// sum to `std::span<T>`s and returning the sum. Its signature is checked in `add()`.
  template <class H>
  suite_builder<T, K, Fn, H, Backward> hand(H h) const {
    return rebuild<H, Backward>(std::move(h));
  }
  /// Before registering, runs every variant once at the smallest size and throws
  /// `fusegrad::error` unless each output and gradient is within `tol` of the hand loop's (of
  /// eager's without one): |a - b| <= tol * max(1, |b|).
  suite_builder check(double tol) const {
    auto r = *this;
    r.tol_ = tol;
    return r;
  }
  /// Inputs drawn uniformly from [lo, hi) instead of from the standard normal (for functions
  /// defined on part of the line: `log`, `sqrt`).
  suite_builder uniform(T lo, T hi) const {
    auto r = *this;
    r.range_ = {lo, hi};
    return r;
  }
  /// Prints, to standard error, what each case runs the first time it runs: a header naming
  /// the case, then with `FUSEGRAD_LOGS=output_code` on for that one call, `fg::compile`'s plan
  /// and `fg::jit`'s program (docs/benchmarking.md says what each variant prints).
  suite_builder show_plans() const {
    auto r = *this;
    r.show_ = true;
    return r;
  }

  /// Registers the cases `<name>/<variant>/<N>`: per size, `hand` (if given), `eager`,
  /// `compile`, `jit`, and with `with_backward()`, `functional`. Call it before
  /// `benchmark::RunSpecifiedBenchmarks()`.
  void add() const {
    if constexpr (has_hand)
      static_assert(
          detail::hand_fits<Hand, T, Backward>(std::make_index_sequence<K>{}),
          "fusegrad::bench: the hand loop does not fit the suite. Forward only, it is called as "
          "hand(x0, ..., x{K-1}, out) with K std::span<const T> inputs and a std::span<T> output; "
          "with with_backward(), as hand(x0, ..., x{K-1}, g0, ..., g{K-1}) with K std::span<const T> "
          "inputs and K std::span<T> gradients, returning sum(f(x...)) as T (called const: no mutable lambda)");
    if (sizes_.empty())
      fusegrad::detail::fail("bench::suite", "'", name_,
                             "' has no sizes; expected .sizes({...}) with at least one size");
    for (const index_t n : sizes_)
      if (n < 1) fusegrad::detail::fail("bench::suite", "'", name_, "' has size ", n, "; expected sizes of 1 or more");
    if (tol_ >= 0) check_now(*std::min_element(sizes_.begin(), sizes_.end()));
    auto self = std::make_shared<const suite_builder>(*this);
    for (const index_t n : sizes_) {
      if constexpr (has_hand) self->template register_case<variant::hand>(self, n);
      self->template register_case<variant::eager>(self, n);
      self->template register_case<variant::compile>(self, n);
      self->template register_case<variant::jit>(self, n);
      if constexpr (Backward) self->template register_case<variant::functional>(self, n);
    }
  }

 private:
  template <Element, std::size_t, class, class, bool>
  friend class suite_builder;
  using data_t = detail::size_data<T, K, Fn>;

  template <class H, bool B>
  suite_builder<T, K, Fn, H, B> rebuild(H h) const {
    suite_builder<T, K, Fn, H, B> r(name_, fn_, std::move(h));
    r.sizes_ = sizes_, r.tol_ = tol_, r.range_ = range_, r.show_ = show_;
    return r;
  }

  /// The bytes one fused pass moves per call: the inputs read, and the output (forward) or
  /// the gradients (backward; the value is one number) written.
  static std::size_t bytes_of(index_t n) {
    return static_cast<std::size_t>(n) * sizeof(T) * (Backward ? 2 * K : K + 1);
  }

  data_t make_data(index_t n) const {
    data_t d;
    d.n = n;
    for (std::size_t i = 0; i < K; ++i) {
      const auto seed = static_cast<std::uint64_t>(i + 1);  // fixed: every run sees the same numbers
      tensor<T> v =
          range_ ? fusegrad::rand<T>({n}, seed, range_->first, range_->second) : fusegrad::randn<T>({n}, seed);
      d.x[i] = v.to_vector();
      d.t[i] = fusegrad::from_vector<T>(d.x[i]);
      if constexpr (Backward) d.t[i].requires_grad(true);
      d.g[i].assign(static_cast<std::size_t>(n), T(0));
    }
    d.out.assign(static_cast<std::size_t>(n), T(0));
    jit_options o;
    o.name = name_ + "/jit/" + std::to_string(n);
    d.jitted.emplace(fusegrad::jit(fn_, std::move(o)));
    return d;
  }

  /// The call a user writes, for the tensor variants.
  template <variant V>
  tensor<T> call(data_t& d) const {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (V == variant::eager) return tensor<T>(fn_(d.t[I]...));
      else if constexpr (V == variant::compile) return tensor<T>(compiled_(d.t[I]...));
      else return tensor<T>((*d.jitted)(d.t[I]...));
    }
    (std::make_index_sequence<K>{});
  }

  /// `value_and_grad` of `sum(f(x...))` on spans, writing the gradients to `d.g`.
  auto functional_step(data_t& d) const {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto summed = [fn = fn_](const auto&... a) { return fusegrad::sum(fn(a...)); };
      return fusegrad::value_and_grad(summed, argnums<I...>).into(std::span<T>(d.g[I])...);
    }
    (std::make_index_sequence<K>{});
  }

  /// One call of variant `V` on `d`, made to be timed: nothing is read back.
  template <variant V>
  auto step_of(data_t& d) const {
    data_t* p = &d;  // the data outlives the step: it lives in `per_size_`
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (V == variant::hand) {
        return [this, p] {
          if constexpr (Backward) {
            benchmark::DoNotOptimize(hand_(std::span<const T>(p->x[I])..., std::span<T>(p->g[I])...));
          } else {
            hand_(std::span<const T>(p->x[I])..., std::span<T>(p->out));
            benchmark::DoNotOptimize(p->out.data());
          }
          benchmark::ClobberMemory();
        };
      } else if constexpr (V == variant::functional) {
        return [vg = functional_step(*p), p]() mutable {
          benchmark::DoNotOptimize(vg(std::span<const T>(p->x[I])...));
          benchmark::ClobberMemory();
        };
      } else {
        return [this, p] {  // the result is dropped, which frees it, as in a user's loop
          if constexpr (Backward) {
            (p->t[I].zero_grad(), ...);
            fusegrad::sum(call<V>(*p)).backward();
          } else {
            benchmark::DoNotOptimize(call<V>(*p));
          }
        };
      }
    }
    (std::make_index_sequence<K>{});
  }

  /// What one call of variant `V` produces, read back (for `check`).
  template <variant V>
  detail::results<T> results_of(data_t& d) const {
    detail::results<T> r;
    if constexpr (Backward && (V == variant::hand || V == variant::functional)) {
      T v{};
      if constexpr (V == variant::hand) {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          v = hand_(std::span<const T>(d.x[I])..., std::span<T>(d.g[I])...);
        }
        (std::make_index_sequence<K>{});
      } else {
        v = [&]<std::size_t... I>(std::index_sequence<I...>) {
          return functional_step(d)(std::span<const T>(d.x[I])...);
        }
        (std::make_index_sequence<K>{});
      }
      r.push_back({v});
      for (const auto& g : d.g) r.push_back(g);
    } else if constexpr (V == variant::hand) {
      step_of<V>(d)();
      r.push_back(d.out);
    } else {
      for (auto& t : d.t) t.zero_grad();
      const tensor<T> out = call<V>(d);
      if constexpr (Backward) {
        const tensor<T> s = fusegrad::sum(out);
        s.backward();
        r.push_back({s.item()});
        for (const auto& t : d.t)  // an input f ignores has no gradient: zeros
          r.push_back(t.grad().defined() ? t.grad().to_vector() : std::vector<T>(static_cast<std::size_t>(d.n), T(0)));
      } else {
        r.push_back(out.to_vector());
      }
    }
    return r;
  }

  /// `check(tol)`: every variant against the reference (the hand loop, else eager) at size `n`.
  void check_now(index_t n) const {
    // The check's calls log nothing: fg::compile prints its plan once per process, and that
    // should be under the benchmark case that runs it, not here.
    struct quiet {
      unsigned before = logs::detail::mask().exchange(0);
      ~quiet() { logs::detail::mask().store(before); }
    } silence;
    data_t d = make_data(n);
    constexpr variant ref_v = has_hand ? variant::hand : variant::eager;
    const detail::results<T> ref = results_of<ref_v>(d);
    auto compare = [&](variant v, const detail::results<T>& got) {
      for (std::size_t k = 0; k < ref.size(); ++k) {
        const std::string what = k == 0 ? (Backward ? "the value sum(f(x...))" : "the output")
                                        : "the gradient of input " + std::to_string(k - 1);
        if (got[k].size() != ref[k].size())
          fusegrad::detail::fail("bench::check", name_, "/", detail::name_of(v), "/", n, ": ", what, " has ",
                                 got[k].size(), " elements; expected ", ref[k].size());
        for (std::size_t i = 0; i < ref[k].size(); ++i) {
          const double a = got[k][i], b = ref[k][i];
          if (!(std::abs(a - b) <= tol_ * std::max(1.0, std::abs(b))))  // NaN fails too
            fusegrad::detail::fail("bench::check", name_, "/", detail::name_of(v), "/", n, ": ", what, ", element ", i,
                                   ", is ", a, "; expected ", b, " (", detail::name_of(ref_v), ") within ", tol_,
                                   " * max(1, |", b, "|)");
        }
      }
    };
    if constexpr (has_hand) compare(variant::eager, results_of<variant::eager>(d));
    compare(variant::compile, results_of<variant::compile>(d));
    compare(variant::jit, results_of<variant::jit>(d));
    if constexpr (Backward) compare(variant::functional, results_of<variant::functional>(d));
  }

  template <variant V>
  void register_case(const std::shared_ptr<const suite_builder>& self, index_t n) const {
    const std::string name = name_ + "/" + detail::name_of(V) + "/" + std::to_string(n);
    benchmark::RegisterBenchmark(name.c_str(), [self, n](benchmark::State& state) { self->template run<V>(state, n); })
        ->UseRealTime()  // fg::compile and fg::jit may run on every core: wall time, not this thread's
        ->Unit(benchmark::kMicrosecond);
  }

  /// The data of size `n`, made at the first case that needs it and shared by its variants.
  data_t& data(index_t n) const {
    auto& slot = per_size_->data[n];
    if (!slot) slot = std::make_unique<data_t>(make_data(n));
    return *slot;
  }

  template <variant V>
  void run(benchmark::State& state, index_t n) const {
    data_t& d = data(n);
    auto step = step_of<V>(d);
    if (show_ && !d.shown[static_cast<std::size_t>(V)]) {
      d.shown[static_cast<std::size_t>(V)] = true;
      show(V, n, step);
    }
    step();  // outside the timing: fg::jit compiles, fg::compile instantiates, caches warm up
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) step();
    const double per_call = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                            static_cast<double>(state.iterations());
    const std::size_t bytes = bytes_of(n);
    state.SetItemsProcessed(state.iterations() * n);
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
    constexpr std::size_t writes = Backward ? K : 1;  // the gradients, or the output
    state.counters["copy_bound"] = detail::copy_seconds<K, writes>(static_cast<std::size_t>(n) * sizeof(T)) / per_call;
    // The hand case of this size ran first (it is registered first): its time is the unit.
    auto& hand = per_size_->hand[n];
    if constexpr (V == variant::hand) hand.add(state.iterations(), per_call);
    if (!hand.per_call.empty()) state.counters["vs_hand"] = per_call / hand.seconds();
  }

  template <class Step>
  void show(variant v, index_t n, Step& step) const {
    const char* what = "";
    switch (v) {
      case variant::hand: what = "the hand loop (no plan)"; break;
      case variant::eager: what = "eager, op by op on the tape (no plan)"; break;
      case variant::compile:
        what =
            "fg::compile (a plan is printed the first time it runs in this process: nothing below means the plan "
            "above)";
        break;
      case variant::jit: what = "fg::jit (the program compiled for this size)"; break;
      case variant::functional: what = "value_and_grad on spans: the span engine's one pass (no plan)"; break;
    }
    std::fprintf(stderr, "[fusegrad::bench] %s/%s/%lld: %s\n", name_.c_str(), detail::name_of(v),
                 static_cast<long long>(n), what);
    auto& mask = logs::detail::mask();
    const unsigned before = mask.load();
    mask.store(before | logs::output_code);
    step();
    mask.store(before);
  }

  /// The hand loop's time at one size. Google Benchmark calls a case with growing iteration
  /// counts until it has run long enough, and reports the last call (once per repetition, all
  /// with that count): the time kept is the median over the calls with the most iterations,
  /// the hand case's reported time (its median with `--benchmark_repetitions`).
  struct hand_record {
    std::int64_t iterations = 0;
    std::vector<double> per_call;
    void add(std::int64_t iters, double seconds) {
      if (iters > iterations) iterations = iters, per_call.clear();
      if (iters == iterations) per_call.push_back(seconds);
    }
    double seconds() const {
      std::vector<double> v = per_call;
      std::sort(v.begin(), v.end());
      const std::size_t m = v.size() / 2;
      return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
    }
  };
  /// State the registered cases share (the builder itself is const once added).
  struct shared_state {
    std::map<index_t, std::unique_ptr<data_t>> data;
    std::map<index_t, hand_record> hand;
  };

  std::string name_;
  Fn fn_;
  Hand hand_;
  decltype(fusegrad::compile(std::declval<Fn>())) compiled_ = fusegrad::compile(fn_);
  std::vector<index_t> sizes_;
  double tol_ = -1;
  std::optional<std::pair<T, T>> range_;
  bool show_ = false;
  std::shared_ptr<shared_state> per_size_ = std::make_shared<shared_state>();
};

/// A suite of benchmarks of `fn`, a generic function of 1 to 8 tensors of element type `T`
/// (`float` unless given: `fg::bench::suite<double>(...)`); see `suite_builder`.
template <Element T = float, class Fn>
auto suite(std::string name, Fn fn) {
  return suite_builder<T, detail::arity<Fn, T>(), Fn, detail::no_hand, false>(std::move(name), std::move(fn));
}

}  // namespace fusegrad::bench

#endif  // __has_include(<benchmark/benchmark.h>)
