#pragma once
/// \file fusegrad/native/compiler.hpp
/// Running the C++ compiler for the native cache: an argument vector (no shell, so no quoting
/// and nothing a path could inject), in a process group of its own, with a time limit. Past the
/// limit, or when the caller asks it to stop (the cache's worker at process exit), the whole
/// group is killed: a compiler driver's children (cc1plus, as, ld, or a wrapper script's) go
/// with it. What the compiler writes to its standard output and error is kept, for the log line
/// of a failure.

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it in no header

namespace fusegrad::detail::native {

/// How a child process ended.
struct process_result {
  std::string spawn_error;  ///< non-empty: the program could not be started (missing, not executable)
  bool timed_out = false;   ///< killed at the time limit
  bool stopped = false;     ///< killed because the caller asked it to stop
  int exit_status = -1;     ///< its exit status, where it exited
  int signal = 0;           ///< the signal that ended it, where one did
  std::string output;       ///< its standard output and error, interleaved (at most `max_output` bytes)

  static constexpr std::size_t max_output = std::size_t{64} * 1024;

  [[nodiscard]] bool ok() const noexcept {
    return spawn_error.empty() && !timed_out && !stopped && signal == 0 && exit_status == 0;
  }
  /// How it ended, in words ("exit status 1", "killed at the time limit of 60 s", ...).
  [[nodiscard]] std::string describe(double time_limit_s) const {
    if (!spawn_error.empty()) return "could not be started: " + spawn_error;
    if (timed_out) return "killed at the time limit of " + std::to_string(time_limit_s) + " s";
    if (stopped) return "killed: the process is exiting";
    if (signal != 0) return "killed by signal " + std::to_string(signal);
    return "exit status " + std::to_string(exit_status);
  }
};

/// Starts `argv` with its standard output and error into `out_fd`, standard input from
/// /dev/null, its own process group, no blocked signals. Returns its pid, or -1 with `error` set.
inline pid_t spawn_in_own_group(const std::vector<std::string>& argv, int out_fd, std::string& error) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  ::posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  ::posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  ::posix_spawnattr_destroy(&attr);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    error = argv[0] + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

/// Appends what `fd` has to `out` (up to the cap) without blocking; false once it is at its end.
inline bool drain_available(int fd, std::string& out) {
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    const std::size_t room = process_result::max_output - std::min(out.size(), process_result::max_output);
    out.append(buf, std::min(room, static_cast<std::size_t>(n)));
  }
}

/// Kills the process group `pid` leads (the driver and every child it started), then reaps `pid`.
inline void kill_group_and_reap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
}

/// Waits for `pid` (the leader of its own group) while reading `fd`, killing the group at
/// `time_limit_s` or as soon as `*stop` is set.
inline void wait_with_limit(pid_t pid, int fd, double time_limit_s, const std::atomic<bool>* stop, process_result& r) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(time_limit_s);
  bool open = true;
  for (;;) {
    // Short waits, so that a stop request or the deadline is seen within 20 ms.
    pollfd p{fd, POLLIN, 0};
    if (open && ::poll(&p, 1, 20) > 0) open = drain_available(fd, r.output);
    if (!open) ::usleep(2000);
    int status = 0;
    const pid_t waited = ::waitpid(pid, &status, WNOHANG);
    if (waited < 0 && errno == ECHILD) {  // the host ignores SIGCHLD: children are reaped unseen
      r.spawn_error = "its exit status is lost (this process ignores SIGCHLD)";
      return;
    }
    if (waited == pid) {
      if (open) drain_available(fd, r.output);  // what it wrote last; a grandchild may hold the pipe open
      r.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      return;
    }
    r.stopped = stop != nullptr && stop->load(std::memory_order_relaxed);
    r.timed_out = !r.stopped && clock::now() >= deadline;
    if (r.stopped || r.timed_out) return kill_group_and_reap(pid);
  }
}

/// Runs `argv` to its end, within `time_limit_s` seconds (see this header's comment).
inline process_result run_process(const std::vector<std::string>& argv, double time_limit_s,
                                  const std::atomic<bool>* stop = nullptr) {
  process_result r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    r.spawn_error = "pipe: " + std::string(std::strerror(errno));
    return r;
  }
  const pid_t pid = spawn_in_own_group(argv, fds[1], r.spawn_error);
  ::close(fds[1]);
  if (pid > 0) wait_with_limit(pid, fds[0], time_limit_s, stop, r);
  ::close(fds[0]);
  return r;
}

/// The first line of what `cxx --version` prints: the compiler's identity in the cache's keys
/// (a compiler upgraded in place must not load libraries its predecessor built). Empty, with
/// `why` set, when the compiler does not run.
inline std::string compiler_identity(const std::string& cxx, double time_limit_s, const std::atomic<bool>* stop,
                                     std::string& why) {
  const process_result r = run_process({cxx, "--version"}, time_limit_s, stop);
  if (!r.ok()) {
    why = "`" + cxx + " --version` " + r.describe(time_limit_s) +
          (r.output.empty() ? std::string() : ": " + r.output.substr(0, 300));
    return {};
  }
  std::string line = r.output.substr(0, r.output.find('\n'));
  if (line.empty()) line = cxx;  // a compiler that prints nothing: its path stands for it
  return line;
}

}  // namespace fusegrad::detail::native
