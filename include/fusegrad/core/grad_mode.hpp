#pragma once
/// \file fusegrad/core/grad_mode.hpp
/// Thread-local grad mode and the RAII scopes that switch it (`no_grad`, `enable_grad`).

namespace fusegrad {
namespace detail {
inline bool& grad_mode_flag() noexcept {
  thread_local bool enabled = true;
  return enabled;
}
}  // namespace detail

/// Whether ops on this thread record autograd nodes (true unless inside `no_grad`).
inline bool is_grad_enabled() noexcept { return detail::grad_mode_flag(); }
inline void set_grad_enabled(bool on) noexcept { detail::grad_mode_flag() = on; }

/// RAII scope in which no op records a graph, like `torch.no_grad()`.
class no_grad {
 public:
  no_grad() noexcept : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~no_grad() { set_grad_enabled(prev_); }
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;

 private:
  bool prev_;
};

/// RAII scope that turns grad mode back on inside a `no_grad` scope.
class enable_grad {
 public:
  enable_grad() noexcept : prev_(is_grad_enabled()) { set_grad_enabled(true); }
  ~enable_grad() { set_grad_enabled(prev_); }
  enable_grad(const enable_grad&) = delete;
  enable_grad& operator=(const enable_grad&) = delete;

 private:
  bool prev_;
};

}  // namespace fusegrad
