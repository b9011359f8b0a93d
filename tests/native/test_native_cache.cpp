// fusegrad/native: the native code cache. Real kernels compiled with g++ into a fresh directory
// per test: sync and async requests, memory and disk hits, batches of queued kernels built in
// one compiler run, every way native code fails (no
// compiler, a failing one, one past its time limit, a corrupt library), the ownership and
// symlink checks, two processes racing on one key, and a process that exits mid-compile.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fusegrad/compiled_autograd/options.hpp>
#include <fusegrad/native/code_cache.hpp>

namespace fs = std::filesystem;
namespace native = fusegrad::native;
using fusegrad::detail::native::code_cache;
using fusegrad::detail::native::kernel_source;

namespace {

bool have_gxx() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  for (std::size_t start = 0; start <= dirs.size();) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    if (::access((dirs.substr(start, end - start) + "/g++").c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

#define REQUIRE_GXX()                                                  \
  do {                                                                 \
    if (!have_gxx()) {                                                 \
      MESSAGE("g++ is not on PATH: the native cache test is skipped"); \
      return;                                                          \
    }                                                                  \
  } while (false)

struct temp_dir {
  std::string path;
  temp_dir() {
    char buf[] = "/tmp/fg_native_XXXXXX";
    REQUIRE(::mkdtemp(buf) != nullptr);
    path = buf;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

/// Captures the native log lines while it lives.
struct captured_log {
  std::mutex m;
  std::vector<std::string> lines;
  captured_log() {
    native::set_log_sink([this](std::string_view l) {
      const std::lock_guard<std::mutex> lock(m);
      lines.emplace_back(l);
    });
  }
  ~captured_log() { native::set_log_sink({}); }
  captured_log(const captured_log&) = delete;
  captured_log& operator=(const captured_log&) = delete;
  std::size_t count(const std::string& part) {
    const std::lock_guard<std::mutex> lock(m);
    std::size_t n = 0;
    for (const auto& l : lines) n += l.find(part) != std::string::npos ? 1 : 0;
    return n;
  }
  std::size_t size() {
    const std::lock_guard<std::mutex> lock(m);
    return lines.size();
  }
};

kernel_source answer_kernel() {
  return {"#include <cstdint>\n", "extern \"C\" int fg_answer() { return 41 + 1; }\n", "fg_answer"};
}

code_cache::options options_for(const std::string& dir, const std::string& compiler = "g++", double limit = 60) {
  return {dir, compiler, {"-std=c++20", "-O1"}, limit};
}

int call(void* fn) { return reinterpret_cast<int (*)()>(fn)(); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string write_script(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << text << "\n";
  ::chmod(path.c_str(), 0700);
  return path;
}

/// The kernel library (`<16 hex digits>.so`) in `dir`.
std::string library_in(const std::string& dir) {
  for (const auto& f : fs::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name.size() == 19 && name.ends_with(".so")) return f.path().string();
  }
  return {};
}

/// Compiles the answer kernel into `dir` in a child process, so that this process never loads
/// the library (dlopen would answer a later load of the same path from its own list).
void compile_in_child(const std::string& dir) {
  std::fflush(nullptr);  // nothing buffered is written twice, by the child too
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    code_cache c(options_for(dir));
    void* fn = c.get(answer_kernel(), native::mode::sync);
    ::_exit(fn != nullptr && call(fn) == 42 ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(!library_in(dir).empty());
}

bool loaded_here(const std::string& path) { return ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD) != nullptr; }

/// Waits for `pid` at most `limit_s` seconds; its wait status, or -1 if it still runs (then killed).
int wait_at_most(pid_t pid, double limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (seconds_since(t0) < limit_s) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

/// Whether the process whose pid `pid_file` holds still runs (a zombie does not: killed, it
/// waits for a parent that may never reap it in a container).
bool process_alive(const std::string& pid_file) {
  std::ifstream in(pid_file);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const std::size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

/// Whether the process named in `pid_file` is still alive `patience_s` seconds from now,
/// returning as soon as it is gone.
bool alive_after(const std::string& pid_file, double patience_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (process_alive(pid_file)) {
    if (seconds_since(t0) > patience_s) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST_CASE("native: sync compiles and loads; then a memory hit; a new cache on the directory loads from disk") {
  REQUIRE_GXX();
  temp_dir t;
  const std::string dir = t.path + "/a/b";  // made with its parents, mode 0700
  captured_log log;
  native::reset_counters();
  {
    code_cache c(options_for(dir));
    void* fn = c.get(answer_kernel(), native::mode::sync);
    REQUIRE(fn != nullptr);
    CHECK(call(fn) == 42);
    CHECK(native::counters().compiles == 1);
    CHECK(native::counters().disk_hits == 0);
    CHECK(c.get(answer_kernel(), native::mode::sync) == fn);
    CHECK(c.get(answer_kernel(), native::mode::async) == fn);
    CHECK(native::counters().memory_hits == 2);
    CHECK(native::counters().compiles == 1);
  }
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat((t.path + "/a").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  const std::string so = library_in(dir);
  REQUIRE(!so.empty());
  CHECK(fs::exists(so.substr(0, so.size() - 3) + ".cpp"));
  bool gch = false;
  for (const auto& f : fs::directory_iterator(dir)) gch = gch || f.path().string().ends_with(".hpp.gch");
  CHECK(gch);

  native::reset_counters();
  code_cache again(options_for(dir));
  void* fn = again.get(answer_kernel(), native::mode::sync);
  REQUIRE(fn != nullptr);
  CHECK(call(fn) == 42);
  CHECK(native::counters().disk_hits == 1);
  CHECK(native::counters().compiles == 0);
  CHECK(native::counters().failures == 0);
  CHECK(log.size() == 0);
}

TEST_CASE("native: async returns at once; on_ready fires on the worker for every merged request") {
  REQUIRE_GXX();
  temp_dir t;
  native::reset_counters();
  code_cache c(options_for(t.path));
  std::mutex m;
  std::vector<void*> ready;
  auto on_ready = [&](void* fn) {
    const std::lock_guard<std::mutex> lock(m);
    ready.push_back(fn);
  };
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(c.get(answer_kernel(), native::mode::async, on_ready) == nullptr);
  CHECK(c.get(answer_kernel(), native::mode::async, on_ready) == nullptr);  // merged with the first
  CHECK(seconds_since(t0) < 0.1);
  c.wait_idle();
  REQUIRE(ready.size() == 2);
  REQUIRE(ready[0] != nullptr);
  CHECK(ready[1] == ready[0]);
  CHECK(call(ready[0]) == 42);
  CHECK(native::counters().compiles == 1);
  CHECK(c.get(answer_kernel(), native::mode::async) == ready[0]);
}

/// A kernel answering `n`: the same symbol as every other, a text of its own.
kernel_source numbered_kernel(int n, const std::string& expr = "") {
  return {"#include <cstdint>\n",
          "extern \"C\" int fg_answer() { return " + (expr.empty() ? std::to_string(n) : expr) + "; }\n", "fg_answer"};
}

/// A compiler that appends its command line to `log_path`, then runs g++.
std::string counting_compiler(const std::string& dir, const std::string& log_path) {
  return write_script(dir, "counting-cxx", "echo \"$*\" >> " + log_path + "\nexec g++ \"$@\"");
}

/// The lines of `path` that contain `part`.
std::size_t lines_with(const std::string& path, const std::string& part) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(part) != std::string::npos ? 1 : 0;
  return n;
}

TEST_CASE("native: the worker builds the kernels queued while it compiles in one compiler run") {
  REQUIRE_GXX();
  temp_dir t;
  native::reset_counters();
  const std::string runs = t.path + "/runs.txt";
  code_cache c(options_for(t.path + "/cache", counting_compiler(t.path, runs)));
  std::mutex m;
  std::vector<void*> ready(5, nullptr);
  for (int n = 0; n < 5; ++n)  // the first starts the worker; the others queue while it compiles
    CHECK(c.get(numbered_kernel(n), native::mode::async, [&, n](void* fn) {
      const std::lock_guard<std::mutex> lock(m);
      ready[static_cast<std::size_t>(n)] = fn;
    }) == nullptr);
  c.wait_idle();
  for (int n = 0; n < 5; ++n) {
    CAPTURE(n);
    REQUIRE(ready[static_cast<std::size_t>(n)] != nullptr);
    CHECK(call(ready[static_cast<std::size_t>(n)]) == n);
  }
  CHECK(native::counters().compiles == 5);
  // One run for all five, or the first alone (the worker took it before the others were
  // queued) and the other four in one.
  const std::size_t kernel_runs = lines_with(runs, "-shared");
  CHECK(kernel_runs >= 1);
  CHECK(kernel_runs <= 2);
  // A batch's kernels share one library, linked under each key; no batch's file is left.
  std::vector<struct stat> libraries;
  for (const auto& f : fs::directory_iterator(t.path + "/cache")) {
    const std::string name = f.path().filename().string();
    CHECK(name.find("batch") == std::string::npos);
    struct stat st {};
    if (name.ends_with(".so") && ::stat(f.path().c_str(), &st) == 0) libraries.push_back(st);
  }
  REQUIRE(libraries.size() == 5);
  std::size_t batched = 0;
  for (const struct stat& st : libraries) batched += st.st_nlink >= 4 ? 1 : 0;
  CHECK(batched >= 4);
  // A new cache on the directory loads every kernel from disk, batched or not.
  native::reset_counters();
  code_cache again(options_for(t.path + "/cache"));
  for (int n = 0; n < 5; ++n) {
    void* fn = again.get(numbered_kernel(n), native::mode::sync);
    REQUIRE(fn != nullptr);
    CHECK(call(fn) == n);
  }
  CHECK(native::counters().disk_hits == 5);
  CHECK(native::counters().compiles == 0);
}

TEST_CASE("native: a kernel that does not compile fails alone; the rest of its batch loads") {
  REQUIRE_GXX();
  temp_dir t;
  captured_log log;
  native::reset_counters();
  code_cache c(options_for(t.path));
  CHECK(c.get(numbered_kernel(0), native::mode::async) == nullptr);
  CHECK(c.get(numbered_kernel(1), native::mode::async) == nullptr);
  CHECK(c.get(numbered_kernel(2, "no_such_name"), native::mode::async) == nullptr);
  CHECK(c.get(numbered_kernel(3), native::mode::async) == nullptr);
  c.wait_idle();
  for (int n : {0, 1, 3}) {
    CAPTURE(n);
    void* fn = c.get(numbered_kernel(n), native::mode::async);
    REQUIRE(fn != nullptr);
    CHECK(call(fn) == n);
  }
  CHECK(c.get(numbered_kernel(2, "no_such_name"), native::mode::sync) == nullptr);
  CHECK(native::counters().compiles == 3);
  CHECK(native::counters().failures == 1);
  CHECK(log.count("kernel fg_answer failed") == 1);
  CHECK(log.count("no_such_name") == 1);
}

TEST_CASE("native: mode off compiles nothing; log_sources logs the source and its file") {
  REQUIRE_GXX();
  temp_dir t;
  captured_log log;
  native::reset_counters();
  code_cache c(options_for(t.path));
  CHECK(c.get(answer_kernel(), native::mode::off) == nullptr);
  CHECK(fs::is_empty(t.path));
  native::set_log_sources(true);
  void* fn = c.get(answer_kernel(), native::mode::sync);
  native::set_log_sources(false);
  REQUIRE(fn != nullptr);
  CHECK(log.count("compiled " + t.path + "/") == 1);
  CHECK(log.count("return 41 + 1;") == 1);
  CHECK(c.get(answer_kernel(), native::mode::off) == nullptr);
  native::note_fallback();
  CHECK(native::counters().fallbacks == 1);
}

TEST_CASE("native: a missing compiler, a failing one, a compile error: nullptr, logged once, never retried") {
  temp_dir t;
  const std::string failing = write_script(t.path, "failing-cxx",
                                           "if [ \"$1\" = --version ]; then echo fake-cxx 1.0; exit 0; fi\n"
                                           "echo 'error: the kernel is broken' >&2; exit 1");
  for (const std::string& compiler : {std::string("/nonexistent/c++"), std::string("/bin/false"), failing}) {
    CAPTURE(compiler);
    temp_dir d;
    captured_log log;
    native::reset_counters();
    code_cache c(options_for(d.path, compiler));
    CHECK(c.get(answer_kernel(), native::mode::sync) == nullptr);
    CHECK(c.get(answer_kernel(), native::mode::sync) == nullptr);
    CHECK(c.get(answer_kernel(), native::mode::async) == nullptr);
    CHECK(native::counters().failures == 1);
    CHECK(native::counters().compiles == 0);
    // One line for the kernel; the failing script also fails to precompile the prelude (logged
    // once, not a failure: kernels would include the plain header).
    CHECK(log.count("kernel fg_answer failed") == 1);
    if (compiler == failing) {
      CHECK(log.size() == 2);
      CHECK(log.count("kernel fg_answer failed, the interpreter runs it: compiling ") == 1);
      CHECK(log.count("exit status 1: error: the kernel is broken") == 2);
      CHECK(log.count("kernels include the plain header") == 1);
    } else {
      CHECK(log.size() == 1);
      CHECK(log.count(compiler) == 1);
    }
  }
}

TEST_CASE("native: a compiler past its time limit is killed with its children; get returns at once") {
  temp_dir t;
  captured_log log;
  native::reset_counters();
  const std::string pid_file = t.path + "/sleeper.pid";
  // The sleep is the script's child: killing the script alone would leave it running.
  const std::string slow = write_script(t.path, "slow-cxx", "sleep 30 & echo $! > " + pid_file + "\nwait");
  code_cache c(options_for(t.path + "/cache", slow, 1.0));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(c.get(answer_kernel(), native::mode::async) == nullptr);
  CHECK(seconds_since(t0) < 0.1);
  c.wait_idle();
  const double took = seconds_since(t0);
  CHECK(took > 0.9);
  CHECK(took < 5);
  CHECK(log.count("time limit") == 1);
  CHECK(native::counters().failures == 1);
  // SIGKILL reaches the group at once but a grandchild dies asynchronously (the driver, reaped
  // by us, is already gone): give it a moment, far below the 30 s it would sleep if missed.
  CHECK_FALSE(alive_after(pid_file, 2.0));
}

TEST_CASE("native: a process that exits while its worker compiles does not hang") {
  temp_dir t;
  const std::string pid_file = t.path + "/sleeper.pid";
  const std::string slow = write_script(t.path, "slow-cxx", "sleep 30 & echo $! > " + pid_file + "\nwait");
  std::fflush(nullptr);  // nothing buffered is written twice, by the child too
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // A static cache, destroyed by exit() like the global one: its destructor kills the compiler.
    static code_cache c(options_for(t.path + "/cache", slow, 60));
    c.get(answer_kernel(), native::mode::async);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::exit(0);
  }
  const int status = wait_at_most(pid, 5);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(alive_after(pid_file, 2.0));
}

TEST_CASE("native: a corrupt library is logged once, fails its key, and nothing crashes") {
  REQUIRE_GXX();
  temp_dir t;
  compile_in_child(t.path);
  const std::string so = library_in(t.path);
  std::ofstream(so, std::ios::trunc) << "this is not an ELF file";
  captured_log log;
  native::reset_counters();
  code_cache c(options_for(t.path));
  CHECK(c.get(answer_kernel(), native::mode::sync) == nullptr);
  CHECK(c.get(answer_kernel(), native::mode::sync) == nullptr);
  CHECK(log.size() == 1);
  CHECK(log.count("cannot load " + so) == 1);
  CHECK(native::counters().failures == 1);
  CHECK(native::counters().compiles == 0);
}

TEST_CASE("native: a stored source that differs from the request is never loaded") {
  REQUIRE_GXX();
  temp_dir t;
  compile_in_child(t.path);
  const std::string so = library_in(t.path);
  std::ofstream(so.substr(0, so.size() - 3) + ".cpp", std::ios::app) << "// another kernel of the same hash\n";
  captured_log log;
  native::reset_counters();
  code_cache c(options_for(t.path));
  CHECK(c.get(answer_kernel(), native::mode::sync) == nullptr);
  CHECK(log.count("differs from the requested source") == 1);
  CHECK_FALSE(loaded_here(so));
}

TEST_CASE("native: a directory of another owner, or writable by others, turns the cache off") {
  REQUIRE_GXX();
  for (const bool foreign : {true, false}) {
    CAPTURE(foreign);
    if (foreign && ::geteuid() != 0) {
      MESSAGE("not root: the foreign-owner case is skipped (it needs chown)");
      continue;
    }
    temp_dir t;
    compile_in_child(t.path);
    const std::string so = library_in(t.path);
    if (foreign) {
      REQUIRE(::chown(t.path.c_str(), 65534, 65534) == 0);
    } else {
      REQUIRE(::chmod(t.path.c_str(), 0777) == 0);
    }
    captured_log log;
    native::reset_counters();
    code_cache c(options_for(t.path));
    CHECK(c.get(answer_kernel(), native::mode::sync) == nullptr);
    CHECK(c.get(answer_kernel(), native::mode::async) == nullptr);
    kernel_source other = answer_kernel();
    other.body += "// another kernel\n";
    CHECK(c.get(other, native::mode::sync) == nullptr);
    CHECK(log.size() == 1);
    CHECK(log.count("cache directory refused") == 1);
    CHECK(log.count(foreign ? "is owned by uid 65534" : "writable by its group or by others") == 1);
    CHECK(native::counters().failures == 1);
    CHECK(native::counters().disk_hits == 0);
    CHECK_FALSE(loaded_here(so));
  }
}

TEST_CASE("native: a symlinked or world-writable library is refused") {
  REQUIRE_GXX();
  temp_dir a, b;
  compile_in_child(a.path);
  const std::string so = library_in(a.path);
  const std::string name = fs::path(so).filename().string();
  const std::string stem = name.substr(0, name.size() - 3);
  fs::copy_file(a.path + "/" + stem + ".cpp", b.path + "/" + stem + ".cpp");
  ::chmod((b.path + "/" + stem + ".cpp").c_str(), 0600);
  fs::create_symlink(so, b.path + "/" + name);
  captured_log log;
  native::reset_counters();
  {
    code_cache c(options_for(b.path));
    CHECK(c.get(answer_kernel(), native::mode::sync) == nullptr);
    CHECK(log.count("is a symbolic link") == 1);
  }
  REQUIRE(::chmod(so.c_str(), 0666) == 0);
  {
    code_cache c(options_for(a.path));
    CHECK(c.get(answer_kernel(), native::mode::sync) == nullptr);
    CHECK(log.count(so + " is writable by its group or by others") == 1);
  }
  CHECK(native::counters().failures == 2);
  CHECK_FALSE(loaded_here(so));
}

TEST_CASE("native: two processes racing on one key compile it once") {
  REQUIRE_GXX();
  temp_dir t;
  const std::string counter = t.path + "/compiles.txt";
  const std::string wrapper = write_script(
      t.path, "counting-cxx", "case \"$*\" in *-shared*) echo compile >> " + counter + ";; esac\nexec g++ \"$@\"");
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  pid_t kids[2];
  for (pid_t& kid : kids) {
    std::fflush(nullptr);
    kid = ::fork();
    REQUIRE(kid >= 0);
    if (kid == 0) {
      ::close(gate[1]);
      char c;
      (void)::read(gate[0], &c, 1);  // both start when the parent closes the gate
      code_cache cache(options_for(t.path + "/cache", wrapper));
      void* fn = cache.get(answer_kernel(), native::mode::sync);
      ::_exit(fn != nullptr && call(fn) == 42 ? 0 : 1);
    }
  }
  ::close(gate[0]);
  ::close(gate[1]);
  for (const pid_t kid : kids) {
    const int status = wait_at_most(kid, 120);
    REQUIRE(status != -1);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  std::ifstream in(counter);
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  CHECK(lines == 1);
}

TEST_CASE("native: options from the environment; bad options are errors") {
  ::setenv("FUSEGRAD_CACHE_DIR", "/tmp/fg_env_dir", 1);
  ::setenv("CXX", "my-c++", 1);
  ::setenv("FUSEGRAD_NATIVE_FLAGS", "-std=c++20  -O3 -mavx2", 1);
  ::setenv("FUSEGRAD_NATIVE_TIMEOUT", "2.5", 1);
  auto o = code_cache::options_from_environment();
  CHECK(o.dir == "/tmp/fg_env_dir");
  CHECK(o.compiler == "my-c++");
  CHECK(o.flags == std::vector<std::string>{"-std=c++20", "-O3", "-mavx2"});
  CHECK(o.time_limit_s == 2.5);
  ::unsetenv("FUSEGRAD_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  CHECK(code_cache::options_from_environment().dir == "/x/fusegrad");
  ::unsetenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (home != nullptr) CHECK(code_cache::options_from_environment().dir == std::string(home) + "/.cache/fusegrad");
  ::unsetenv("CXX");
  ::unsetenv("FUSEGRAD_NATIVE_FLAGS");
  {
    captured_log log;
    ::setenv("FUSEGRAD_NATIVE_TIMEOUT", "soon", 1);
    o = code_cache::options_from_environment();
    CHECK(o.time_limit_s == 60);
    CHECK(log.count("FUSEGRAD_NATIVE_TIMEOUT=soon") == 1);
  }
  ::unsetenv("FUSEGRAD_NATIVE_TIMEOUT");
  CHECK(o.compiler == "c++");
  CHECK(o.flags == fusegrad::detail::native::library_flags());  // unset: the library's own
  CHECK_THROWS_AS(code_cache(options_for("/tmp", "g++", 0)), fusegrad::error);
  CHECK_THROWS_AS(code_cache(options_for("/tmp", "")), fusegrad::error);
  const native::mode before = native::current_mode();
  native::set_mode(native::mode::sync);
  CHECK(native::current_mode() == native::mode::sync);
  // fg::config()'s switch is the same mode, as compiled autograd's is its own.
  fusegrad::config().native = native::mode::off;
  CHECK(native::current_mode() == native::mode::off);
  native::set_mode(native::mode::async);
  CHECK(fusegrad::config().native == native::mode::async);
  native::set_mode(before);
}

TEST_CASE("native: the headers' fingerprint changes with any header's text, so an upgrade loads nothing stale") {
  temp_dir a, b;
  for (const temp_dir* t : {&a, &b}) {
    std::filesystem::create_directories(t->path + "/fusegrad/ops");
    std::ofstream(t->path + "/fusegrad/ops/x.hpp") << "struct x_op {};\n";
    std::ofstream(t->path + "/fusegrad/y.hpp") << "// y\n";
  }
  const std::string fa = fusegrad::detail::native::headers_fingerprint(a.path);
  CHECK(fa.size() == 16);
  CHECK(fa == fusegrad::detail::native::headers_fingerprint(b.path));  // same text, another place
  std::ofstream(b.path + "/fusegrad/ops/x.hpp") << "struct x_op { int changed; };\n";
  CHECK(fa != fusegrad::detail::native::headers_fingerprint(b.path));
  // the flags carry it, and the flags are part of every key and of the prelude's name
  bool carried = false;
  for (const std::string& f : fusegrad::detail::native::library_flags())
    carried = carried || f.rfind("-DFUSEGRAD_NATIVE_HEADERS=", 0) == 0;
  CHECK(carried);
}
