#pragma once
/// \file fusegrad/compiled_autograd/options.hpp
/// Compiled autograd's switches: `fg::config().compiled_autograd` (beside `fg::config()`'s
/// other process-wide switch, `native`), the `enable` / `disable` scopes of a thread and the
/// options they carry (see compiled_autograd.hpp for what a captured backward does).

#include <atomic>
#include <concepts>
#include <optional>
#include <vector>

#include "fusegrad/compile/backend.hpp"
#include "fusegrad/jit/options.hpp"
#include "fusegrad/kernel/fused.hpp"
#include "fusegrad/native/options.hpp"

namespace fusegrad {

namespace compiled_autograd::detail {
/// Installs compiled autograd's backward runner into the engine (idempotent). A template, so
/// that only the translation units that turn compiled autograd on instantiate the capture
/// machinery: installed from a static initializer, it was compiled into every TU that
/// includes this header, and was the largest part of such a TU's compile time.
template <class Tag>
void install() noexcept;
}  // namespace compiled_autograd::detail

/// The `compiled_autograd` switch of `fg::config()`: a `bool` that installs compiled autograd
/// when set to true.
class compiled_autograd_switch {
 public:
  template <std::same_as<bool> B>
  compiled_autograd_switch& operator=(B on) noexcept {
    store(on);
    return *this;
  }
  template <std::same_as<bool> B>
  void store(B on, std::memory_order order = std::memory_order_seq_cst) noexcept {
    if (on) compiled_autograd::detail::install<B>();
    on_.store(on, order);
  }
  [[nodiscard]] bool load(std::memory_order order = std::memory_order_seq_cst) const noexcept {
    return on_.load(order);
  }
  operator bool() const noexcept { return load(); }  // NOLINT(google-explicit-constructor): reads like the bool it is

 private:
  std::atomic<bool> on_{false};
};

/// The `native` switch of `fg::config()`: how run-time programs get native code, the mode
/// that `FUSEGRAD_NATIVE` sets at start and `fg::native::set_mode` sets from code.
class native_mode_switch {
 public:
  native_mode_switch& operator=(native::mode m) noexcept {
    native::set_mode(m);
    return *this;
  }
  // NOLINTNEXTLINE(google-explicit-constructor): reads like the mode it is
  operator native::mode() const noexcept { return native::current_mode(); }
};

/// Process-wide switches (like `torch._dynamo.config`).
struct config_t {
  compiled_autograd_switch compiled_autograd;  ///< capture every backward (see compiled_autograd.hpp)
  native_mode_switch native;                   ///< native code for run-time programs (docs/jit.md)
};
inline config_t& config() noexcept {
  static config_t c;
  return c;
}

namespace compiled_autograd {

/// How captured backwards run.
struct options {
  jit_backend backend = jit_backend::fused;
  bool fullgraph = false;  ///< a graph break in the backward throws
};

namespace detail {
/// The scopes of this thread, innermost last (nullopt: a `disable` scope).
inline std::vector<std::optional<options>>& scopes() {
  thread_local std::vector<std::optional<options>> s;
  return s;
}
/// The options in effect on this thread, or null when compiled autograd is off.
inline const options* current() {
  static const options global{};
  if (!scopes().empty()) return scopes().back() ? &*scopes().back() : nullptr;
  return config().compiled_autograd.load(std::memory_order_relaxed) ? &global : nullptr;
}
}  // namespace detail

/// Turns compiled autograd on for this thread until the scope ends (PyTorch's context
/// manager). Use it as `enable`; it is a template only so that the capture machinery is
/// instantiated where a scope is made, not in every TU that includes this header.
template <class Tag = void>
class basic_enable {
 public:
  basic_enable() : basic_enable(options{}) {}
  explicit basic_enable(options o) {
    detail::install<Tag>();
    detail::scopes().push_back(o);
  }
  explicit basic_enable(backend::fused b) : basic_enable(options{jit_backend::fused, b.fullgraph}) {}
  explicit basic_enable(backend::aot_eager b) : basic_enable(options{jit_backend::eager, b.fullgraph}) {}
  explicit basic_enable(backend::eager b) : basic_enable(options{jit_backend::eager, b.fullgraph}) {}
  basic_enable(const basic_enable&) = delete;
  basic_enable& operator=(const basic_enable&) = delete;
  ~basic_enable() { detail::scopes().pop_back(); }
};
using enable = basic_enable<>;

/// Turns compiled autograd off for this thread until the scope ends.
class disable {
 public:
  disable() { detail::scopes().emplace_back(std::nullopt); }
  disable(const disable&) = delete;
  disable& operator=(const disable&) = delete;
  ~disable() { detail::scopes().pop_back(); }
};
}  // namespace compiled_autograd
}  // namespace fusegrad
