#pragma once
/// \file fusegrad/native/flags.hpp
/// The flags generated code is compiled with by default: those of the library that runs it.

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "fusegrad/core/hash.hpp"

namespace fusegrad::detail::native {

/// The directory holding fusegrad's headers, which generated code includes: `FUSEGRAD_INCLUDE_DIR`
/// when set, else the one this header was found in.
inline std::string include_dir() {
  if (const char* e = std::getenv("FUSEGRAD_INCLUDE_DIR"); e && *e) return e;
  std::string_view here = __FILE__;
  constexpr std::string_view tail = "fusegrad/native/flags.hpp";
  if (here.size() >= tail.size() && here.substr(here.size() - tail.size()) == tail) here.remove_suffix(tail.size());
  // A relative path (the library was built with a relative -I) is taken from the working
  // directory, which then must be the build's.
  const std::string dir = here.empty() ? std::string(".") : std::string(here);
  char abs[PATH_MAX];
  return ::realpath(dir.c_str(), abs) != nullptr ? std::string(abs) : dir;
}

/// A hash of the text of every header under `dir`/fusegrad, in path order: generated code, a
/// cached library and a precompiled prelude are valid only for the headers they were built
/// from, and an upgrade of fusegrad that keeps their file names must not load them.
inline std::string headers_fingerprint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(fs::path(dir) / "fusegrad", ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && it->path().extension() == ".hpp") files.push_back(it->path());
  std::sort(files.begin(), files.end());
  fnv1a h;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    h.mix(f.lexically_relative(dir).string()).mix(text.size()).mix(text);
  }
  return hex64(h.value());
}

/// `a * b + c`, compiled as this library is: with one rounding where the compiler contracts the
/// multiply and the add into a fused multiply-add (GCC does from -O2 unless told
/// -ffp-contract=off; clang within one expression), two where it does not.
[[gnu::noinline]] inline double contraction_probe(double a, double b, double c) noexcept { return a * b + c; }

/// True when this library's code contracts multiplies and adds: (1 + 2^-30)(1 - 2^-30) - 1 is
/// -2^-60 with one rounding and 0 with two. Read at run time, from code built with the very
/// flags of the interpreter's kernels, since no macro tells an -O1 build from an -O2 one.
inline bool library_contracts() noexcept {
  volatile double a = 1 + 0x1p-30, b = 1 - 0x1p-30, c = -1;
  return contraction_probe(a, b, c) != 0;
}

/// The flags generated code is compiled with: this translation unit's language mode, its
/// instruction set (the macros the compiler defines for it) and its assertions, so that the
/// generated code's batches are the interpreter's. `FUSEGRAD_INCLUDE_DIR` aside, the compiler
/// must find what the library found (xsimd on its default include path).
inline std::vector<std::string> library_flags() {
  std::vector<std::string> f;
#if defined(__STRICT_ANSI__)
  f.emplace_back("-std=c++20");
#else
  f.emplace_back("-std=gnu++20");
#endif
  f.emplace_back("-O2");
  // A shared object's functions bind to themselves, so that the compiler inlines across them
  // (the op structs' values) and calls nothing through the PLT; the entry point a caller looks
  // up is marked visible in its source.
  f.emplace_back("-fvisibility=hidden");
  f.emplace_back("-fno-semantic-interposition");
  // Within an op's value, multiplies and adds contract where the library's own kernels contract
  // them (`library_contracts`); across ops never (the generated code's `op_boundary`).
  if (!library_contracts()) f.emplace_back("-ffp-contract=off");
#if defined(NDEBUG)
  f.emplace_back("-DNDEBUG");
#endif
  // Each flag of the instruction sets xsimd can choose, where this TU has it.
#ifdef __SSE4_2__
  f.emplace_back("-msse4.2");
#endif
#ifdef __AVX__
  f.emplace_back("-mavx");
#endif
#ifdef __AVX2__
  f.emplace_back("-mavx2");
#endif
#ifdef __FMA__
  f.emplace_back("-mfma");
#endif
#ifdef __F16C__
  f.emplace_back("-mf16c");
#endif
#ifdef __AVX512F__
  f.emplace_back("-mavx512f");
#endif
#ifdef __AVX512CD__
  f.emplace_back("-mavx512cd");
#endif
#ifdef __AVX512DQ__
  f.emplace_back("-mavx512dq");
#endif
#ifdef __AVX512BW__
  f.emplace_back("-mavx512bw");
#endif
#ifdef __AVX512VL__
  f.emplace_back("-mavx512vl");
#endif
  const std::string dir = include_dir();
  f.emplace_back("-I" + dir);
  // Part of every key and of the prelude's name (the flags are in both): see `headers_fingerprint`.
  f.emplace_back("-DFUSEGRAD_NATIVE_HEADERS=" + headers_fingerprint(dir));
  return f;
}

}  // namespace fusegrad::detail::native
