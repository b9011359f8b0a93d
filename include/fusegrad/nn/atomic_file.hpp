#pragma once
/// \file fusegrad/nn/atomic_file.hpp
/// Replacing a file so that neither a failed write nor a crash loses its old content (for
/// `nn::save`). The data goes to a new temporary file beside the target,
/// `<dir>/.<name>.tmp.<pid>.<n>`; every write is checked, the file is flushed to the disk
/// (`fsync`) and closed, renamed over the target (one atomic step on POSIX file systems) and
/// the directory is flushed so that the rename survives a power cut too. Until the rename the
/// target is untouched: any failure removes the temporary and throws `fusegrad::error` with
/// the path and the system's reason. A process killed mid-write leaves its temporary behind
/// (nothing runs to remove it); the name says whose it was.
///
/// The target keeps its permission bits (not its owner); a new file gets 0666 minus the
/// umask, like any other. A symbolic link is followed: the file it names is replaced (a link
/// to nothing is refused). A path that exists and is not a regular file (a device such as
/// /dev/full, a directory, a FIFO) is refused: renaming over it would replace the device
/// node, not write to it. An existing file the caller may not write is refused too, as
/// opening it for writing would be.
///
/// Without POSIX (<unistd.h>), the same steps run through the standard library, without the
/// flushes to the disk.
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "fusegrad/core/error.hpp"

#if __has_include(<unistd.h>)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#define FUSEGRAD_POSIX_FILES 1
#else
#include <filesystem>
#include <fstream>
#define FUSEGRAD_POSIX_FILES 0
#endif

namespace fusegrad::nn::detail {

/// The name of the temporary for `path`: `<dir>/.<name>.tmp.<pid>.<n>`, `n` counting the
/// temporaries of this process (so two threads saving the same path do not collide).
inline std::string temp_name_beside(const std::string& path, long pid) {
  static std::atomic<unsigned long> counter{0};
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return dir + "." + name + ".tmp." + std::to_string(pid) + "." + std::to_string(counter.fetch_add(1));
}

#if FUSEGRAD_POSIX_FILES

/// One save: the constructor creates the temporary, `write` appends to it, `commit` puts it in
/// place; destroyed without `commit`, it removes the temporary.
class atomic_file {
 public:
  explicit atomic_file(const std::string& path) : shown_(path), path_(resolve(path)) {
    keep_mode_ = existing_mode();
    // A throw from here on runs no destructor: nothing is open or created until the file is.
    for (int attempt = 0; fd_ < 0; ++attempt) {
      tmp_ = temp_name_beside(path_, static_cast<long>(::getpid()));
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      // EEXIST: a temporary a killed process with the same pid left behind; take the next name.
      if (fd_ < 0 && errno != EINTR && (errno != EEXIST || attempt == 100))
        raise("cannot create a temporary file beside it");
    }
  }
  ~atomic_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;

  /// Appends `n` bytes: retries interrupted and short writes, throws on any other failure.
  void write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ::ssize_t w = ::write(fd_, p, n < (std::size_t{1} << 30) ? n : std::size_t{1} << 30);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (w == 0) errno = EIO;
        raise("writing failed");
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }

  /// Flushes and closes the temporary, renames it over the target and flushes the directory.
  void commit() {
    if (keep_mode_ >= 0 && ::fchmod(fd_, static_cast<mode_t>(keep_mode_)) != 0)
      raise("giving it the old file's permissions failed");
    int r;
    while ((r = ::fsync(fd_)) != 0 && errno == EINTR) {}
    if (r != 0) raise("flushing to the disk failed");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) raise("closing failed");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) raise("renaming the temporary over it failed");
    committed_ = true;
    sync_directory();
  }

 private:
  /// A symbolic link resolved to the file it names (a save replaces that file, not the link).
  static std::string resolve(const std::string& path) {
    struct stat st {};
    if (path.empty() || path.back() == '/')
      fusegrad::detail::fail("nn::save", "the path '", path, "' names a directory; expected a file's path");
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
    char* real = ::realpath(path.c_str(), nullptr);
    if (real == nullptr)
      fusegrad::detail::fail("nn::save", "cannot resolve the symbolic link ", path, ": ",
                             std::generic_category().message(errno),
                             "; expected a link to an existing file (a dangling link is not followed)");
    std::string r(real);
    std::free(real);
    return r;
  }

  /// The permission bits of the target, or -1 for a new file (which gets 0666 minus the umask
  /// from open). Refuses a target that is not a regular file or not writable.
  int existing_mode() const {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) return -1;
    if (!S_ISREG(st.st_mode)) {
      const char* kind = S_ISDIR(st.st_mode)   ? "a directory"
                         : S_ISCHR(st.st_mode) ? "a character device"
                         : S_ISBLK(st.st_mode) ? "a block device"
                                               : "not a regular file";
      fusegrad::detail::fail("nn::save", shown_, " is ", kind, "; expected a regular file or a new path");
    }
    if (::access(path_.c_str(), W_OK) != 0) raise("the existing file is not writable");
    return static_cast<int>(st.st_mode & 07777);
  }

  void sync_directory() {
    const auto slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    // EINVAL: a file system that cannot flush a directory; the rename is as durable as it gets.
    const bool ok = fd >= 0 && (::fsync(fd) == 0 || errno == EINVAL);
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (!ok)
      fusegrad::detail::fail("nn::save", "wrote ", shown_, ", but flushing its directory ", dir,
                             " failed: ", std::generic_category().message(err),
                             "; expected the new file to survive a power cut");
  }

  /// Throws for the last system call's errno; the destructor then removes the temporary.
  [[noreturn]] void raise(std::string_view what) const {
    const int err = errno;
    fusegrad::detail::fail("nn::save", "cannot save ", shown_, tmp_.empty() ? "" : " (temporary ", tmp_,
                           tmp_.empty() ? "" : ")", ": ", what, ": ", std::generic_category().message(err),
                           "; the file at that path is unchanged");
  }

  std::string shown_, path_, tmp_;
  int fd_ = -1;
  int keep_mode_ = -1;
  bool committed_ = false;
};

#else

/// Without POSIX: a temporary through std::ofstream, renamed over the target with
/// std::filesystem (no flush to the disk).
class atomic_file {
 public:
  explicit atomic_file(const std::string& path)
      : path_(path), tmp_(temp_name_beside(path, 0)), f_(tmp_, std::ios::binary) {
    if (!f_)
      fusegrad::detail::fail("nn::save", "cannot create the temporary ", tmp_, " beside ", path_,
                             "; the file at that path is unchanged");
  }
  ~atomic_file() {
    if (committed_) return;
    f_.close();
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;

  void write(const void* data, std::size_t n) {
    if (!f_.write(static_cast<const char*>(data), static_cast<std::streamsize>(n)))
      fusegrad::detail::fail("nn::save", "cannot save ", path_, ": writing ", tmp_,
                             " failed; the file at that path is unchanged");
  }
  void commit() {
    f_.close();
    std::error_code ec;
    if (!f_ || (std::filesystem::rename(tmp_, path_, ec), ec))
      fusegrad::detail::fail("nn::save", "cannot save ", path_, ": closing or renaming ", tmp_,
                             " failed; the file at that path is unchanged");
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  std::ofstream f_;
  bool committed_ = false;
};

#endif

}  // namespace fusegrad::nn::detail
