#pragma once
/// \file fusegrad/native/code_cache.hpp
/// The native code cache: C++ source in, a loaded function out (the counterpart of Inductor's
/// CppCodeCache and AsyncCompile), kept in memory for the process and on disk across runs.
///
/// A request names a kernel (`kernel_source`: a prelude every kernel includes, the kernel's own
/// text, the `extern "C"` symbol to look up). `get` answers from memory when the function is
/// loaded; otherwise, in mode `sync` it loads the library from the disk cache or compiles it
/// before it returns, and in mode `async` it queues the request for one background thread and
/// returns nullptr (the caller runs its interpreter; `on_ready` tells it when the function is
/// there). Native code never throws: a failure (no compiler, a compile error, a compiler past
/// its time limit, a library that does not load) is logged once, and the kernel is not tried
/// again in this process.
///
/// The background thread builds every kernel queued while it was busy in one compiler run (a
/// batch, up to `max_batch`): the compiler's start, the precompiled header's load and the
/// instantiation of the templates the kernels share are paid once, which is most of a small
/// kernel's compile. Each kernel is compiled in a namespace of its own, with its symbol renamed
/// after its text (`<symbol>_<hash>`), so that kernels never clash in one library; a body must
/// therefore include nothing (its includes belong in the prelude). A batch that fails to compile
/// is built again kernel by kernel, so that one bad kernel fails alone.
///
/// On disk, in the cache directory (native/cache_dir.hpp says which, and what it must be):
///   `<key>.cpp`, `<key>.so`   a kernel's source as compiled, and its library; `<key>` is a
///                             64-bit hash of the prelude, the text, the compiler's identity,
///                             the flags and `FUSEGRAD_NATIVE_ABI_VERSION`. The kernels of a
///                             batch share one library: each `<key>.so` is a hard link to it;
///   `<key>.lock`              the lock one process holds while it compiles the key (`flock`):
///                             two processes compile a key once;
///   `prelude-<h>.hpp(.gch)`   the prelude and its precompiled header, one per prelude, compiler
///                             and flags, so that a kernel's compile parses none of it.
/// Every file is written under a temporary name and renamed into place. A library is loaded only
/// when it and the directory belong to the user alone, and when the stored `<key>.cpp` equals
/// the requested source byte for byte (a hash collision loads nothing). A directory that fails
/// those checks turns the cache off for the process. Libraries are never unloaded: callers keep
/// the function pointers.

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fusegrad/core/error.hpp"
#include "fusegrad/core/hash.hpp"
#include "fusegrad/native/cache_dir.hpp"
#include "fusegrad/native/compiler.hpp"
#include "fusegrad/native/flags.hpp"
#include "fusegrad/native/options.hpp"

/// Part of every key: raise it when what a kernel library must contain changes (the calling
/// convention of generated kernels, the prelude's layout), so that no older library is loaded.
#ifndef FUSEGRAD_NATIVE_ABI_VERSION
#define FUSEGRAD_NATIVE_ABI_VERSION "fusegrad-native-3"
#endif

namespace fusegrad::detail::native {

/// One kernel to compile and load.
struct kernel_source {
  std::string prelude;  ///< text of a header every kernel includes (precompiled once per prelude)
  std::string body;     ///< the kernel's code, after the prelude's #include (which the cache adds); includes nothing
  std::string symbol;  ///< the extern "C" function the body defines (the library exports it renamed: `exported_symbol`)
};

/// Mixes `s` with its length first, so that the strings of a key cannot run into each other.
inline fnv1a& mix_field(fnv1a& h, std::string_view s) { return h.mix(s.size()).mix(s); }

class code_cache {
 public:
  struct options {
    std::string dir;                 ///< the cache directory (created, mode 0700)
    std::string compiler;            ///< the compiler driver, run without a shell (PATH searched)
    std::vector<std::string> flags;  ///< before `-fPIC -shared -o ...`: standard, optimisation, ISA, -I
    double time_limit_s = 60;        ///< a kernel's compile past it is killed (its whole process group)
  };

  /// The most kernels one compiler run builds: a batch's compile grows with it, and its first
  /// kernel waits for its last.
  static constexpr std::size_t max_batch = 32;

  explicit code_cache(options o) : opts_(std::move(o)) {
    if (!(opts_.time_limit_s > 0) || !std::isfinite(opts_.time_limit_s))
      fail("native::code_cache", "time_limit_s is ", opts_.time_limit_s, "; expected a positive number of seconds");
    if (opts_.compiler.empty()) fail("native::code_cache", "no compiler given; expected a program name or path");
  }
  code_cache(const code_cache&) = delete;
  code_cache& operator=(const code_cache&) = delete;
  ~code_cache() { stop(); }

  /// The process's cache: its directory, compiler and flags from the environment
  /// (`options_from_environment`). Never destroyed (a static destructor elsewhere may still ask
  /// it); at exit its worker is stopped, its compiler killed and its thread joined.
  static code_cache& global() {
    static code_cache* const c = new code_cache(options_from_environment());
    struct stopper {
      code_cache* c;
      ~stopper() { c->stop(); }
    };
    static const stopper at_exit{c};
    return *c;
  }

  /// `FUSEGRAD_CACHE_DIR` (or the XDG default), `$CXX` (else `c++`), `FUSEGRAD_NATIVE_FLAGS`
  /// (split at spaces; else `library_flags()`, this library's own), `FUSEGRAD_NATIVE_TIMEOUT` (seconds; else 60).
  static options options_from_environment() {
    options o;
    o.dir = default_cache_dir();
    const char* cxx = std::getenv("CXX");
    o.compiler = cxx != nullptr && *cxx != '\0' ? cxx : "c++";
    o.flags = split_flags(std::getenv("FUSEGRAD_NATIVE_FLAGS"));
    o.time_limit_s = timeout_from_environment();
    return o;
  }

  /// The function `src.symbol` of `src`: at once if loaded; otherwise see this header's comment.
  /// `on_ready` (mode async) is called with the function on the worker thread when it is loaded
  /// (never when the kernel fails). Never throws.
  void* get(const kernel_source& src, fusegrad::native::mode m, std::function<void(void*)> on_ready = {}) noexcept {
    try {
      return get_or_queue(src, m, std::move(on_ready));
    } catch (...) {  // no memory for a request: the caller's interpreter runs
      return nullptr;
    }
  }

  /// Blocks until the background queue is empty and the worker idle (tests).
  void wait_idle() {
    std::unique_lock<std::mutex> lock(m_);
    idle_.wait(lock, [&] { return stop_.load() || (queue_.empty() && !busy_); });
  }

  /// Stops the worker: queued kernels are dropped (marked failed, silently), a running compiler
  /// is killed, the thread joined. `get` then answers only from memory. Idempotent.
  void stop() noexcept {
    {
      const std::lock_guard<std::mutex> lock(m_);
      stop_.store(true);
      for (entry* e : queue_) e->st = state::failed;
      queue_.clear();
    }
    work_.notify_all();
    done_.notify_all();
    idle_.notify_all();
    if (!worker_.joinable()) return;
    // In a child forked while the worker ran, the thread does not exist: nothing to join.
    if (worker_pid_ == ::getpid()) {
      worker_.join();
    } else {
      worker_.detach();
    }
  }

  [[nodiscard]] const options& settings() const noexcept { return opts_; }

 private:
  enum class state { pending, ready, failed };
  struct entry {
    kernel_source src;
    state st = state::pending;
    void* fn = nullptr;
    std::vector<std::function<void(void*)>> waiters;
  };

  static std::vector<std::string> split_flags(const char* text) {
    if (text == nullptr) return library_flags();
    std::vector<std::string> flags;
    std::string cur;
    for (const char* p = text;; ++p) {
      if (*p == '\0' || *p == ' ') {
        if (!cur.empty()) flags.push_back(std::move(cur));
        cur.clear();
        if (*p == '\0') break;
      } else {
        cur += *p;
      }
    }
    return flags;
  }

  static double timeout_from_environment() {
    const char* v = std::getenv("FUSEGRAD_NATIVE_TIMEOUT");
    if (v == nullptr || *v == '\0') return 60;
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (*end == '\0' && t > 0 && std::isfinite(t)) return t;
    log("FUSEGRAD_NATIVE_TIMEOUT=" + std::string(v) + " is not a positive number of seconds; using 60");
    return 60;
  }

  /// The in-memory key: the request's own text (the compiler and flags are this cache's).
  static std::uint64_t memory_key(const kernel_source& src) {
    fnv1a h;
    mix_field(mix_field(mix_field(h, src.symbol), src.prelude), src.body);
    return h.value();
  }

  entry* find(const kernel_source& src, std::uint64_t key) {
    auto [lo, hi] = entries_.equal_range(key);
    for (auto it = lo; it != hi; ++it) {
      const kernel_source& s = it->second.src;
      if (s.body == src.body && s.symbol == src.symbol && s.prelude == src.prelude) return &it->second;
    }
    return nullptr;
  }

  void* get_or_queue(const kernel_source& src, fusegrad::native::mode m, std::function<void(void*)> on_ready) {
    if (m == fusegrad::native::mode::off) return nullptr;
    const std::uint64_t key = memory_key(src);
    std::unique_lock<std::mutex> lock(m_);
    entry* e = find(src, key);
    if (e != nullptr && e->st == state::ready) {
      bump(counters().memory_hits);
      return e->fn;
    }
    if (e != nullptr && e->st == state::failed) return nullptr;
    if (disabled_.load() || stop_.load()) return nullptr;
    const bool fresh = e == nullptr;
    if (fresh) e = &entries_.emplace(key, entry{src, state::pending, nullptr, {}})->second;
    if (m == fusegrad::native::mode::async) {
      if (on_ready) e->waiters.push_back(std::move(on_ready));
      if (fresh) queue_locked(e);
      return nullptr;
    }
    if (!fresh) {  // queued or being built: wait for it rather than build it twice
      done_.wait(lock, [&] { return e->st != state::pending; });
      return e->st == state::ready ? e->fn : nullptr;
    }
    lock.unlock();
    void* fn = build(e->src);
    run_waiters(finish(e, fn), fn);
    return fn;
  }

  void queue_locked(entry* e) {
    queue_.push_back(e);
    if (!worker_.joinable()) {
      worker_pid_ = ::getpid();
      worker_ = std::thread([this] { work(); });
    }
    work_.notify_one();
  }

  /// Records the outcome of `e`; returns its waiters to call (outside the lock).
  std::vector<std::function<void(void*)>> finish(entry* e, void* fn) {
    const std::lock_guard<std::mutex> lock(m_);
    e->fn = fn;
    e->st = fn != nullptr ? state::ready : state::failed;
    done_.notify_all();
    std::vector<std::function<void(void*)>> waiters;
    waiters.swap(e->waiters);
    return waiters;
  }

  void run_waiters(const std::vector<std::function<void(void*)>>& waiters, void* fn) const {
    if (fn == nullptr) return;
    for (const auto& w : waiters) {
      if (stop_.load()) return;  // the process is exiting: its callers' state may be gone
      try {
        w(fn);
      } catch (...) {  // a caller's callback: its failure is not the cache's
      }
    }
  }

  /// Takes the queue's front and the queued kernels with the same prelude, up to `max_batch`,
  /// into `batch`; returns how many.
  std::size_t take_batch_locked(std::array<entry*, max_batch>& batch) {
    std::size_t n = 0;
    batch[n++] = queue_.front();
    queue_.pop_front();
    for (auto it = queue_.begin(); it != queue_.end() && n < max_batch;) {
      if ((*it)->src.prelude != batch[0]->src.prelude) {
        ++it;
        continue;
      }
      batch[n++] = *it;
      it = queue_.erase(it);
    }
    return n;
  }

  void work() {
    for (;;) {
      std::unique_lock<std::mutex> lock(m_);
      work_.wait(lock, [&] { return stop_.load() || !queue_.empty(); });
      if (stop_.load()) return;
      std::array<entry*, max_batch> batch{};
      const std::size_t n = take_batch_locked(batch);
      busy_ = true;
      lock.unlock();
      std::array<void*, max_batch> fns{};
      try {
        build_all(std::span<entry* const>(batch.data(), n), std::span<void*>(fns.data(), n));
      } catch (...) {  // no memory for a path or a log line: the kernels not built fail
      }
      for (std::size_t i = 0; i < n; ++i) run_waiters(finish(batch[i], fns[i]), fns[i]);
      lock.lock();
      busy_ = false;
      idle_.notify_all();
    }
  }

  // ---- building (on the worker, or on a sync caller's thread) ----

  /// The directory checks and the compiler's identity, once per cache. False when the
  /// directory is refused (the cache is then off for the process).
  bool set_up() {
    const std::lock_guard<std::mutex> lock(setup_m_);
    if (set_up_) return !disabled_.load();
    std::string why = make_private_dirs(opts_.dir);
    if (why.empty()) why = directory_problem(opts_.dir);
    if (!why.empty()) {
      disabled_.store(true);
      bump(counters().failures);
      log("cache directory refused: " + why + "; no native code is loaded in this process");
      set_up_ = true;
      return false;
    }
    identity_ = compiler_identity(opts_.compiler, opts_.time_limit_s, &stop_, compiler_problem_);
    set_up_ = !stop_.load();  // a --version killed at exit says nothing of the compiler
    return true;
  }

  /// Logs why the kernel failed (unless the process is exiting) and counts it.
  void* fail_kernel(const kernel_source& src, const std::string& why) {
    if (stop_.load()) return nullptr;
    bump(counters().failures);
    log("kernel " + src.symbol + " failed, the interpreter runs it: " + why);
    return nullptr;
  }

  std::string flags_text() const {
    std::string s;
    for (const auto& f : opts_.flags) s += (s.empty() ? "" : " ") + f;
    return s;
  }

  /// The prelude's file name: one per prelude text, compiler and flags (a precompiled header
  /// is only valid for the compiler and flags that built it).
  std::string prelude_name(const kernel_source& src) const {
    fnv1a h;
    mix_field(mix_field(mix_field(mix_field(h, FUSEGRAD_NATIVE_ABI_VERSION), identity_), flags_text()), src.prelude);
    return "prelude-" + hex64(h.value()) + ".hpp";
  }

  /// A comment naming what a key covers besides the text (so that the byte-for-byte check
  /// covers it too), and the prelude's #include: the head of every translation unit.
  std::string unit_head(const kernel_source& src, std::string_view what) const {
    return "// fusegrad native " + std::string(what) + "; " FUSEGRAD_NATIVE_ABI_VERSION "; compiler: " + identity_ +
           "; flags: " + flags_text() + "\n#include \"" + prelude_name(src) + "\"\n";
  }

  /// The hash of a kernel's text that names its namespace and its exported symbol.
  static std::string kernel_tag(const kernel_source& src) { return hex64(memory_key(src)); }

  /// The name under which a kernel's library exports its function.
  static std::string exported_symbol(const kernel_source& src) { return src.symbol + "_" + kernel_tag(src); }

  /// A kernel's body in its own namespace, its symbol renamed: one translation unit may hold
  /// several kernels (a batch), and a kernel compiles to the same code alone or in a batch.
  static std::string kernel_block(const kernel_source& src) {
    const std::string tag = kernel_tag(src);
    return "namespace fusegrad_kernel_" + tag + " {\n#define " + src.symbol + " " + exported_symbol(src) + "\n" +
           src.body + "\n#undef " + src.symbol + "\n}  // namespace fusegrad_kernel_" + tag + "\n";
  }

  /// The text compiled as `<key>.cpp`: the head and the kernel's block.
  std::string translation_unit(const kernel_source& src) const { return unit_head(src, "kernel") + kernel_block(src); }

  std::string disk_key(const std::string& unit, const kernel_source& src) const {
    fnv1a h;
    mix_field(mix_field(h, unit), src.prelude);
    return hex64(h.value());
  }

  /// One kernel: from the disk cache, else compiled alone (waiting for another process that
  /// compiles it).
  void* build(const kernel_source& src) {
    if (!set_up()) return nullptr;
    if (!compiler_problem_.empty()) return fail_kernel(src, compiler_problem_);
    const std::string unit = translation_unit(src);
    const std::string base = opts_.dir + "/" + disk_key(unit, src);
    std::string why;
    if (void* fn = load_existing(base, unit, src, why); fn != nullptr || !why.empty())
      return fn != nullptr ? fn : fail_kernel(src, why);
    file_lock lock;
    why = lock.open(base + ".lock");
    if (why.empty()) why = wait_for(lock, base + ".lock");
    if (!why.empty()) return fail_kernel(src, why);
    // Another process may have compiled it while this one waited for the lock.
    if (void* fn = load_existing(base, unit, src, why); fn != nullptr || !why.empty())
      return fn != nullptr ? fn : fail_kernel(src, why);
    why = compile(src, unit, base);
    return why.empty() ? load_compiled(src, unit, base) : fail_kernel(src, why);
  }

  /// The function of a kernel this process has just compiled into `<base>.so`.
  void* load_compiled(const kernel_source& src, const std::string& unit, const std::string& base) {
    std::string why;
    void* fn = load(base, unit, exported_symbol(src), why);
    if (fn == nullptr) return fail_kernel(src, why);
    bump(counters().compiles);
    return fn;
  }

  /// A kernel of a batch on its way to the compiler.
  struct pending {
    std::size_t index = 0;  ///< in the batch
    std::string unit;       ///< its translation unit alone, as stored in `<base>.cpp`
    std::string base;       ///< the cache's path of its files, without the extension
    std::unique_ptr<file_lock> lock = std::make_unique<file_lock>();  ///< held until it is built
  };

  /// What became of a kernel of a batch before the compiler: loaded (or failed) from the disk
  /// cache, left to build alone (another process holds its lock), or to compile in the batch.
  enum class next_step { done, alone, compile };

  next_step look_up(const kernel_source& src, pending& k, void*& fn) {
    if (!compiler_problem_.empty()) {
      fn = fail_kernel(src, compiler_problem_);
      return next_step::done;
    }
    k.unit = translation_unit(src);
    k.base = opts_.dir + "/" + disk_key(k.unit, src);
    std::string why;
    fn = load_existing(k.base, k.unit, src, why);
    if (fn == nullptr && why.empty()) why = k.lock->open(k.base + ".lock");
    if (fn == nullptr && why.empty() && !k.lock->try_lock()) return next_step::alone;
    // Another process may have compiled it between the first look and the lock.
    if (fn == nullptr && why.empty()) fn = load_existing(k.base, k.unit, src, why);
    if (fn == nullptr && why.empty()) return next_step::compile;
    if (fn == nullptr) fn = fail_kernel(src, why);
    return next_step::done;
  }

  /// The kernels of `batch` into `fns`: those in the disk cache loaded, the others compiled in
  /// one compiler run; a kernel another process is compiling is waited for, alone.
  void build_all(std::span<entry* const> batch, std::span<void*> fns) {
    if (batch.size() == 1) {
      fns[0] = build(batch[0]->src);
      return;
    }
    if (!set_up()) return;
    std::vector<pending> todo;
    std::vector<std::size_t> alone;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      pending k;
      k.index = i;
      const next_step o = look_up(batch[i]->src, k, fns[i]);
      if (o == next_step::alone) alone.push_back(i);
      if (o == next_step::compile) todo.push_back(std::move(k));
    }
    compile_together(batch, todo, fns);
    todo.clear();  // releases the locks before waiting for other processes' kernels
    for (const std::size_t i : alone) fns[i] = build(batch[i]->src);
  }

  /// Compiles the kernels of `todo` (their locks held) in one run; where that fails with a
  /// compile error, each alone, so that one bad kernel fails by itself.
  void compile_together(std::span<entry* const> batch, const std::vector<pending>& todo, std::span<void*> fns) {
    bool retry_alone = true;
    const std::string why = todo.size() > 1 ? compile_batch(batch, todo, retry_alone) : std::string();
    const bool together = todo.size() > 1 && why.empty();
    for (const pending& k : todo) {
      const kernel_source& src = batch[k.index]->src;
      if (stop_.load()) return;
      if (!together && !retry_alone) {
        fns[k.index] = fail_kernel(src, why);
        continue;
      }
      const std::string why_alone = together ? std::string() : compile(src, k.unit, k.base);
      fns[k.index] = why_alone.empty() ? load_compiled(src, k.unit, k.base) : fail_kernel(src, why_alone);
    }
  }

  /// Compiles the kernels of `todo` as one translation unit and links each `<key>.so` to the
  /// library it gives (each `<key>.cpp` holds its kernel alone); why it could not, or empty.
  /// The run's time limit is the kernels' together. `retry_alone` is false where building the
  /// kernels one by one cannot do better (the compiler did not start, or ran out of time).
  std::string compile_batch(std::span<entry* const> batch, const std::vector<pending>& todo, bool& retry_alone) {
    const kernel_source& first = batch[todo.front().index]->src;
    ensure_prelude(first);
    std::string text = unit_head(first, "kernels");
    for (const pending& k : todo) {
      if (std::string why = write_file_atomically(k.base + ".cpp", k.unit); !why.empty()) return why;
      text += kernel_block(batch[k.index]->src);
    }
    const std::string stem =
        opts_.dir + "/batch-" + std::to_string(::getpid()) + "-" + std::to_string(tmp_counter_.fetch_add(1));
    if (std::string why = write_file_atomically(stem + ".cpp", text); !why.empty()) return why;
    const process_result r =
        run_process(compile_command({"-I" + opts_.dir, "-fPIC", "-shared", "-o", stem + ".so", stem + ".cpp"}),
                    opts_.time_limit_s * static_cast<double>(todo.size()), &stop_);
    ::unlink((stem + ".cpp").c_str());
    std::string why;
    if (!r.ok()) {
      retry_alone = r.spawn_error.empty() && !r.timed_out && !r.stopped;
      why = "compiling " + std::to_string(todo.size()) + " kernels together " +
            r.describe(opts_.time_limit_s * static_cast<double>(todo.size())) +
            (r.output.empty() ? std::string() : ": " + r.output.substr(0, 400));
    }
    if (why.empty() && ::chmod((stem + ".so").c_str(), 0700) != 0)
      why = "cannot chmod " + stem + ".so: " + errno_text(errno);
    for (std::size_t i = 0; i < todo.size() && why.empty(); ++i) why = link_library(stem + ".so", todo[i].base);
    ::unlink((stem + ".so").c_str());
    if (why.empty() && fusegrad::native::log_sources())
      for (const pending& k : todo)
        log("compiled " + k.base + ".cpp (one of " + std::to_string(todo.size()) + " kernels in one compiler run):\n" +
            k.unit);
    return why;
  }

  /// Makes `<base>.so` a hard link to the library `so`, in place at once (a link under a
  /// temporary name, renamed); why it could not, or empty.
  std::string link_library(const std::string& so, const std::string& base) const {
    const std::string tmp = temporary_name(base + ".so");
    if (::link(so.c_str(), tmp.c_str()) != 0) return "cannot link " + so + " to " + tmp + ": " + errno_text(errno);
    if (::rename(tmp.c_str(), (base + ".so").c_str()) == 0) return {};
    const std::string why = "cannot rename " + tmp + " to " + base + ".so: " + errno_text(errno);
    ::unlink(tmp.c_str());
    return why;
  }

  /// The function from `<base>.so` where that library exists (a disk hit), else nullptr with
  /// `why` empty; nullptr with `why` set where it exists but is refused or does not load.
  void* load_existing(const std::string& base, const std::string& unit, const kernel_source& src, std::string& why) {
    if (!file_exists(base + ".so")) return nullptr;
    void* fn = load(base, unit, exported_symbol(src), why);
    if (fn != nullptr) bump(counters().disk_hits);
    return fn;
  }

  /// Vets `<base>.so` and `<base>.cpp`, checks the stored source equals `unit`, then loads.
  static void* load(const std::string& base, const std::string& unit, const std::string& symbol, std::string& why) {
    const std::string so = base + ".so";
    why = file_problem(so);
    std::string stored;
    if (why.empty()) why = read_private_file(base + ".cpp", stored);
    if (why.empty() && stored != unit) why = base + ".cpp differs from the requested source (a hash collision)";
    if (!why.empty()) return nullptr;
    void* lib = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      why = "cannot load " + so + ": " + (e != nullptr ? e : "dlopen failed");
      return nullptr;
    }
    void* fn = ::dlsym(lib, symbol.c_str());
    if (fn == nullptr) why = so + " has no symbol " + symbol;
    return fn;
  }

  /// Takes `lock`, waiting while another process compiles (its compile is killed at the time
  /// limit, which frees the lock); returns why it could not, or empty.
  std::string wait_for(file_lock& lock, const std::string& path) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(2 * opts_.time_limit_s + 10);
    while (!lock.try_lock()) {
      if (stop_.load()) return "the process is exiting";
      if (std::chrono::steady_clock::now() > deadline) return "timed out waiting for " + path;
      ::usleep(10000);
    }
    return {};
  }

  std::vector<std::string> compile_command(std::vector<std::string> tail) const {
    std::vector<std::string> argv{opts_.compiler};
    argv.insert(argv.end(), opts_.flags.begin(), opts_.flags.end());
    argv.insert(argv.end(), std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
    return argv;
  }

  /// Runs `argv`, whose output is `tmp`, and renames `tmp` to `out` (mode 0700); why it could not, or empty.
  std::string run_to(const std::vector<std::string>& argv, const std::string& tmp, const std::string& out,
                     const std::string& what) const {
    const process_result r = run_process(argv, opts_.time_limit_s, &stop_);
    std::string why;
    if (!r.ok())
      why = what + " " + r.describe(opts_.time_limit_s) +
            (r.output.empty() ? std::string() : ": " + r.output.substr(0, 400));
    if (why.empty() && ::chmod(tmp.c_str(), 0700) != 0) why = "cannot chmod " + tmp + ": " + errno_text(errno);
    if (why.empty() && ::rename(tmp.c_str(), out.c_str()) != 0)
      why = "cannot rename " + tmp + " to " + out + ": " + errno_text(errno);
    if (!why.empty()) ::unlink(tmp.c_str());
    return why;
  }

  std::string temporary_name(const std::string& path) const {
    return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(tmp_counter_.fetch_add(1));
  }

  /// Writes the prelude header and its precompiled form, once per prelude (under its lock).
  /// A prelude that does not precompile is logged once; kernels then include the plain header.
  void ensure_prelude(const kernel_source& src) {
    const std::string name = prelude_name(src);
    const std::lock_guard<std::mutex> guard(prelude_m_);
    if (!preludes_.insert(name).second) return;
    const std::string hpp = opts_.dir + "/" + name;
    file_lock lock;
    std::string why = lock.open(hpp + ".lock");
    if (why.empty()) why = wait_for(lock, hpp + ".lock");
    if (why.empty() && !file_exists(hpp)) why = write_file_atomically(hpp, src.prelude);
    if (why.empty() && !file_exists(hpp + ".gch")) {
      const std::string tmp = temporary_name(hpp + ".gch");
      why = run_to(compile_command({"-fPIC", "-x", "c++-header", "-o", tmp, hpp}), tmp, hpp + ".gch",
                   "precompiling " + hpp);
    }
    if (!why.empty() && !stop_.load()) log(why + "; kernels include the plain header");
  }

  /// Compiles `unit` to `<base>.so` (the lock on `<base>.lock` held); why it could not, or empty.
  std::string compile(const kernel_source& src, const std::string& unit, const std::string& base) {
    ensure_prelude(src);
    const std::string cpp = base + ".cpp";
    std::string why = write_file_atomically(cpp, unit);
    if (!why.empty()) return why;
    const std::string tmp = temporary_name(base + ".so");
    why = run_to(compile_command({"-I" + opts_.dir, "-fPIC", "-shared", "-o", tmp, cpp}), tmp, base + ".so",
                 "compiling " + cpp);
    if (why.empty() && fusegrad::native::log_sources()) log("compiled " + cpp + ":\n" + unit);
    return why;
  }

  options opts_;
  std::mutex m_;                                           // entries_, queue_, busy_, worker_
  std::condition_variable work_;                           // the worker: a request was queued, or stop
  std::condition_variable done_;                           // a kernel finished (sync callers waiting on it)
  std::condition_variable idle_;                           // the worker went idle (wait_idle)
  std::unordered_multimap<std::uint64_t, entry> entries_;  // never erased: queue_ holds pointers into it
  std::deque<entry*> queue_;
  bool busy_ = false;
  std::thread worker_;
  pid_t worker_pid_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> disabled_{false};  // the directory was refused

  std::mutex setup_m_;
  bool set_up_ = false;
  std::string identity_;          // first line of `<compiler> --version`
  std::string compiler_problem_;  // why the compiler does not run, if it does not
  std::mutex prelude_m_;
  std::unordered_set<std::string> preludes_;  // preludes this cache has written (or tried)
  mutable std::atomic<std::uint64_t> tmp_counter_{0};
};

}  // namespace fusegrad::detail::native
