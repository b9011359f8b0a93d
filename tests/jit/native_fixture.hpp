#pragma once
// What a test of generated code needs first: a code cache of its own (a fresh directory, set
// before the cache is first used) and a system compiler to build into it.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace native_test {

/// A fresh cache directory for this process, set before the code cache is first used.
struct fresh_cache_dir {
  std::string dir;
  fresh_cache_dir() {
    char tmpl[] = "/tmp/fusegrad_native_test_XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    dir = d;
    ::setenv("FUSEGRAD_CACHE_DIR", d, 1);
  }
  // Destroyed after the code cache's worker has stopped (constructed before the cache).
  ~fresh_cache_dir() { std::filesystem::remove_all(dir); }
};
inline const fresh_cache_dir& cache_dir() {
  static const fresh_cache_dir d;
  return d;
}

inline bool have_compiler() { return std::system("c++ --version > /dev/null 2>&1") == 0; }

}  // namespace native_test
