#pragma once
/// \file fusegrad/native/cache_dir.hpp
/// Where the native cache keeps its files, and the checks that make loading them safe.
///
/// A shared library in the cache directory is code this process will run, so the directory and
/// every file loaded from it must be the current user's alone: owned by the effective user, not
/// writable by the group or others, and (for files) not a symbolic link, which could point
/// anywhere. Each check returns the reason it refuses, or an empty string.
///
/// Files are written to a temporary name in the same directory and renamed into place, so a
/// reader (another process included) sees the whole file or none of it.

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fusegrad::detail::native {

/// `FUSEGRAD_CACHE_DIR`, else `$XDG_CACHE_HOME/fusegrad`, else `$HOME/.cache/fusegrad`; empty
/// when none of them is set (the cache is then off).
inline std::string default_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  if (auto d = env("FUSEGRAD_CACHE_DIR"); !d.empty()) return d;
  if (auto d = env("XDG_CACHE_HOME"); !d.empty()) return d + "/fusegrad";
  if (auto d = env("HOME"); !d.empty()) return d + "/.cache/fusegrad";
  return {};
}

inline std::string errno_text(int e) { return std::string(std::strerror(e)); }

/// The reason `st` (of `path`) may not be trusted, or empty: another owner, or writable by others.
inline std::string ownership_problem(const std::string& path, const struct stat& st) {
  if (st.st_uid != ::geteuid())
    return path + " is owned by uid " + std::to_string(st.st_uid) + ", not by this process's (" +
           std::to_string(::geteuid()) + ")";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return path + " is writable by its group or by others";
  return {};
}

/// Creates `path` and its missing parents, each with mode 0700 (no-op where they exist).
/// Returns the reason it could not, or empty.
inline std::string make_private_dirs(const std::string& path) {
  if (path.empty()) return "no cache directory (set FUSEGRAD_CACHE_DIR, XDG_CACHE_HOME or HOME)";
  for (std::size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      return "cannot create " + prefix + ": " + errno_text(errno);
  }
  return {};
}

/// Why the directory `path` may not hold code this process loads, or empty. It may itself be
/// reached through a symbolic link (a home directory on another disk): what counts is the
/// directory it leads to.
inline std::string directory_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "cannot stat " + path + ": " + errno_text(errno);
  if (!S_ISDIR(st.st_mode)) return path + " is not a directory";
  return ownership_problem(path, st);
}

/// Why the file `path` may not be loaded, or empty: a symbolic link, not a regular file, or not
/// the current user's alone.
inline std::string file_problem(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "cannot stat " + path + ": " + errno_text(errno);
  if (S_ISLNK(st.st_mode)) return path + " is a symbolic link";
  if (!S_ISREG(st.st_mode)) return path + " is not a regular file";
  return ownership_problem(path, st);
}

inline bool file_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

/// Reads the whole of `path` into `out`, refusing a symbolic link or a file not the user's
/// alone. Returns the reason it could not, or empty.
inline std::string read_private_file(const std::string& path, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "cannot open " + path + ": " + errno_text(errno);
  struct stat st {};
  std::string problem = ::fstat(fd, &st) != 0  ? "cannot stat " + path + ": " + errno_text(errno)
                        : !S_ISREG(st.st_mode) ? path + " is not a regular file"
                                               : ownership_problem(path, st);
  out.clear();
  char buf[16384];
  while (problem.empty()) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) problem = "cannot read " + path + ": " + errno_text(errno);
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return problem;
}

/// Writes `text` to `path` whole: into a new temporary file beside it (mode 0600), then renamed
/// over `path`. Returns the reason it could not, or empty.
inline std::string write_file_atomically(const std::string& path, std::string_view text) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return "cannot create a file beside " + path + ": " + errno_text(errno);
  std::string problem;
  for (std::size_t done = 0; done < text.size() && problem.empty();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno != EINTR) problem = "cannot write " + tmp + ": " + errno_text(errno);
    if (n > 0) done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && problem.empty()) problem = "cannot write " + tmp + ": " + errno_text(errno);
  if (problem.empty() && ::rename(tmp.c_str(), path.c_str()) != 0)
    problem = "cannot rename " + tmp + " to " + path + ": " + errno_text(errno);
  if (!problem.empty()) ::unlink(tmp.c_str());
  return problem;
}

/// An exclusive `flock` on a lock file, released when this object goes (or the process dies,
/// so a killed compiler never leaves a key locked).
class file_lock {
 public:
  file_lock() = default;
  file_lock(const file_lock&) = delete;
  file_lock& operator=(const file_lock&) = delete;
  ~file_lock() {
    if (fd_ >= 0) ::close(fd_);
  }
  /// Opens (creating) `path`; returns the reason it could not, or empty.
  std::string open(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    return fd_ < 0 ? "cannot open " + path + ": " + errno_text(errno) : std::string();
  }
  /// Takes the lock if it is free; false while another holder has it.
  bool try_lock() noexcept { return ::flock(fd_, LOCK_EX | LOCK_NB) == 0; }

 private:
  int fd_ = -1;
};

}  // namespace fusegrad::detail::native
