#pragma once
/// \file fusegrad/jit/native_abi.hpp
/// What a program's loop and the native code generated for it share (jit/native_emitter.hpp):
/// where each instruction reads and writes in a run, a full reduction's state, and the
/// signature of a loop's generated function. The interpreter (jit/program.hpp) and the
/// generated code are built from these same definitions, so a run can switch between them
/// loop by loop and keep its bits.

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "fusegrad/core/accumulate.hpp"
#include "fusegrad/core/shape.hpp"
#include "fusegrad/loops/tile_reductions.hpp"

namespace fusegrad::detail::jit {

/// Where a loop instruction reads and writes in one run: a fixed pointer (a splat's buffer),
/// one that moves with the tile (`adv`: a stream), or a tile register (an index: each thread
/// running a block has its own registers).
template <Element T>
struct loop_ptrs {
  const T* src[2] = {nullptr, nullptr};
  bool adv[2] = {false, false};
  int src_reg[2] = {-1, -1};
  T* dst = nullptr;
  bool dst_adv = false;
  int dst_reg = -1;
};

/// A full reduction's state over the tiles one thread runs.
template <Element T>
struct reduction_state {
  fusegrad::detail::running_max<T> max;  ///< a max (loops/tile_reductions.hpp)
  fusegrad::detail::running_sum<T> sum;  ///< a sum (core/accumulate.hpp: eager mode's bits)
  T merged = T(0);                       ///< run in blocks: the blocks' value combined
  void reset() {
    max.reset();
    sum.reset();
  }
};

/// A loop's generated function: its tiles [lo, hi) of `tile` elements, each instruction's
/// pointers in `pv` and its op's constant in `scalars`, this thread's reductions `red` and
/// tile buffers `buf` (`native_code::buffers` of them) — the interpreter's `run_tiles` with
/// the same effects, in registers where it uses tile registers.
template <Element T>
using native_loop_fn = void (*)(const loop_ptrs<T>* pv, const T* scalars, index_t tile, index_t lo, index_t hi, T* buf,
                                reduction_state<T>* red);

/// A row step's generated function (jit/row_step.hpp): rows [r0, r1) of `C` values, with by
/// node the data of each operand and stored member (`data`), by member what an averaging
/// expand divides by (`divisors`) and its op's constant (`scalars`), and this thread's row
/// buffers (`rowbuf`, the interpreter's) — the interpreter's rows with the same effects.
template <Element T>
using native_rows_fn = void (*)(T* const* data, const T* divisors, const T* scalars, index_t C, index_t r0, index_t r1,
                                T* rowbuf);

/// A program's generated library's one entry point: fills `fns` with the loops' functions and
/// `rows` with the row steps' (one each per step; null where a step is not of that kind or was
/// not generated).
template <Element T>
using native_program_fn = void (*)(native_loop_fn<T>* fns, native_rows_fn<T>* rows);

/// A program's native code, swapped in while the program runs: one function per step (null:
/// the interpreter runs it) and each loop instruction's constant. Shared with the code cache's
/// background thread, which may install the functions after the program is gone.
template <Element T>
class native_code {
 public:
  explicit native_code(std::size_t steps)
      : fns_(std::make_unique<std::atomic<native_loop_fn<T>>[]>(steps)),
        rows_(std::make_unique<std::atomic<native_rows_fn<T>>[]>(steps)),
        n_(steps) {
    for (std::size_t i = 0; i < steps; ++i) {
      fns_[i].store(nullptr, std::memory_order_relaxed);
      rows_[i].store(nullptr, std::memory_order_relaxed);
    }
  }
  /// Loop `l`'s function, or null while none is installed.
  [[nodiscard]] native_loop_fn<T> at(std::size_t l) const noexcept { return fns_[l].load(std::memory_order_acquire); }
  /// Row step `l`'s function, or null while none is installed.
  [[nodiscard]] native_rows_fn<T> rows_at(std::size_t l) const noexcept {
    return rows_[l].load(std::memory_order_acquire);
  }
  /// Installs the functions a generated library's entry point gives.
  void install(native_program_fn<T> entry) {
    std::vector<native_loop_fn<T>> f(n_, nullptr);
    std::vector<native_rows_fn<T>> r(n_, nullptr);
    entry(f.data(), r.data());
    for (std::size_t i = 0; i < n_; ++i) {
      if (f[i]) fns_[i].store(f[i], std::memory_order_release);
      if (r[i]) rows_[i].store(r[i], std::memory_order_release);
    }
    ready_.store(true, std::memory_order_release);
  }
  /// True once a generated library was installed.
  [[nodiscard]] bool ready() const noexcept { return ready_.load(std::memory_order_acquire); }
  /// Per step: its instructions' constants (`scalars` of `native_loop_fn`; a row step's by
  /// member, `scalars` of `native_rows_fn`), set before the code is requested.
  std::vector<std::vector<T>> scalars;
  /// Per step: the tile buffers its function takes (the values its reductions read).
  std::vector<int> buffers;
  /// Set when the code was requested: a run before it is installed counts as a fallback.
  std::atomic<bool> requested{false};

 private:
  std::unique_ptr<std::atomic<native_loop_fn<T>>[]> fns_;
  std::unique_ptr<std::atomic<native_rows_fn<T>>[]> rows_;
  std::size_t n_;
  std::atomic<bool> ready_{false};
};

}  // namespace fusegrad::detail::jit
