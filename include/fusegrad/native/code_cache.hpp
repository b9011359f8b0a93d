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
/// On disk, in the cache directory (native/cache_dir.hpp says which, and what it must be):
///   `<key>.cpp`, `<key>.so`   a kernel's source as compiled, and its library; `<key>` is a
///                             64-bit hash of the prelude, the text, the compiler's identity,
///                             the flags and `FUSEGRAD_NATIVE_ABI_VERSION`;
///   `<key>.lock`              the lock one process holds while it compiles the key (`flock`):
///                             two processes compile a key once;
///   `prelude-<h>.hpp(.gch)`   the prelude and its precompiled header, one per prelude, compiler
///                             and flags, so that a kernel's compile parses none of it.
/// Every file is written under a temporary name and renamed into place. A library is loaded only
/// when it and the directory belong to the user alone, and when the stored `<key>.cpp` equals
/// the requested source byte for byte (a hash collision loads nothing). A directory that fails
/// those checks turns the cache off for the process. Libraries are never unloaded: callers keep
/// the function pointers.

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
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
#define FUSEGRAD_NATIVE_ABI_VERSION "fusegrad-native-1"
#endif

namespace fusegrad::detail::native {

/// One kernel to compile and load.
struct kernel_source {
  std::string prelude;  ///< text of a header every kernel includes (precompiled once per prelude)
  std::string body;     ///< the kernel's translation unit, after the prelude's #include (which the cache adds)
  std::string symbol;   ///< the extern "C" function to look up
};

/// Mixes `s` with its length first, so that the strings of a key cannot run into each other.
inline fnv1a& mix_field(fnv1a& h, std::string_view s) { return h.mix(s.size()).mix(s); }

class code_cache {
 public:
  struct options {
    std::string dir;                 ///< the cache directory (created, mode 0700)
    std::string compiler;            ///< the compiler driver, run without a shell (PATH searched)
    std::vector<std::string> flags;  ///< before `-fPIC -shared -o ...`: standard, optimisation, ISA, -I
    double time_limit_s = 60;        ///< a compile past it is killed (its whole process group)
  };

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

  void work() {
    for (;;) {
      std::unique_lock<std::mutex> lock(m_);
      work_.wait(lock, [&] { return stop_.load() || !queue_.empty(); });
      if (stop_.load()) return;
      entry* e = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      void* fn = nullptr;
      try {
        fn = build(e->src);
      } catch (...) {  // no memory for a path or a log line: the kernel fails
      }
      run_waiters(finish(e, fn), fn);
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

  /// The text compiled as `<key>.cpp`: a comment naming what the key covers besides the text
  /// (so that the byte-for-byte check covers it too), the prelude's #include, the body.
  std::string translation_unit(const kernel_source& src) const {
    return "// fusegrad native kernel; " FUSEGRAD_NATIVE_ABI_VERSION "; compiler: " + identity_ +
           "; flags: " + flags_text() + "\n#include \"" + prelude_name(src) + "\"\n" + src.body;
  }

  std::string disk_key(const std::string& unit, const kernel_source& src) const {
    fnv1a h;
    mix_field(mix_field(h, unit), src.prelude);
    return hex64(h.value());
  }

  void* build(const kernel_source& src) {
    if (!set_up()) return nullptr;
    if (!compiler_problem_.empty()) return fail_kernel(src, compiler_problem_);
    const std::string unit = translation_unit(src);
    const std::string base = opts_.dir + "/" + disk_key(unit, src);
    std::string why;
    if (void* fn = load_existing(base, unit, src.symbol, why); fn != nullptr || !why.empty())
      return fn != nullptr ? fn : fail_kernel(src, why);
    file_lock lock;
    why = lock.open(base + ".lock");
    if (why.empty()) why = wait_for(lock, base + ".lock");
    if (!why.empty()) return fail_kernel(src, why);
    // Another process may have compiled it while this one waited for the lock.
    if (void* fn = load_existing(base, unit, src.symbol, why); fn != nullptr || !why.empty())
      return fn != nullptr ? fn : fail_kernel(src, why);
    why = compile(src, unit, base);
    if (!why.empty()) return fail_kernel(src, why);
    void* fn = load(base, unit, src.symbol, why);
    if (fn == nullptr) return fail_kernel(src, why);
    bump(counters().compiles);
    return fn;
  }

  /// The function from `<base>.so` where that library exists (a disk hit), else nullptr with
  /// `why` empty; nullptr with `why` set where it exists but is refused or does not load.
  void* load_existing(const std::string& base, const std::string& unit, const std::string& symbol, std::string& why) {
    if (!file_exists(base + ".so")) return nullptr;
    void* fn = load(base, unit, symbol, why);
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
