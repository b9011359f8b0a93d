#pragma once
// The user ops the fuzzer's programs draw, written as a user writes them (a struct applied with
// fg::apply_op, an fg::function), so every run-time path meets ops that are not in fusegrad's
// op table. One macro holds them, so a reproducer prints the very definitions it was run with.
#include <string_view>

#include <fusegrad/fusegrad.hpp>

// softsign(x) = x / (1 + |x|); fuzz_bilinear(a, b) = a b + s a, with one scalar of state;
// softclip, the same function as softsign written as an fg::function with its own backward.
#define FUZZ_USER_OPS                                                                           \
  struct fuzz_softsign_op {                                                                     \
    static constexpr std::string_view name = "fuzz_softsign", grad_fn = "FuzzSoftsignBackward"; \
    template <class V>                                                                          \
    V value(const V& x) const {                                                                 \
      using std::abs;                                                                           \
      using xsimd::abs;                                                                         \
      return x / (abs(x) + V(1));                                                               \
    }                                                                                           \
    template <class V>                                                                          \
    auto derivative(const V& x, const V&, const V& g) const {                                   \
      const auto d = fusegrad::abs(x) + 1.0;                                                    \
      return g / (d * d);                                                                       \
    }                                                                                           \
  };                                                                                            \
  struct fuzz_bilinear_op {                                                                     \
    double s;                                                                                   \
    static constexpr std::string_view name = "fuzz_bilinear", grad_fn = "FuzzBilinearBackward"; \
    template <class V>                                                                          \
    V value(const V& a, const V& b) const {                                                     \
      return a * b + V(s) * a;                                                                  \
    }                                                                                           \
    template <class V>                                                                          \
    auto da(const V&, const V& b, const V&, const V& g) const {                                 \
      return g * (b + s);                                                                       \
    }                                                                                           \
    template <class V>                                                                          \
    auto db(const V& a, const V&, const V&, const V& g) const {                                 \
      return g * a;                                                                             \
    }                                                                                           \
  };                                                                                            \
  struct fuzz_softclip_fn {                                                                     \
    static constexpr std::string_view name = "FuzzSoftclipBackward";                            \
    static auto forward(const auto& x) { return x / (fusegrad::abs(x) + 1.0); }                 \
    static auto backward(const auto& saved, const auto& grad) {                                 \
      const auto& [x] = saved;                                                                  \
      const auto d = fusegrad::abs(x) + 1.0;                                                    \
      return grad / (d * d);                                                                    \
    }                                                                                           \
  };

namespace fuzz {
FUZZ_USER_OPS
}  // namespace fuzz

#define FUZZ_STRINGIFY_(...) #__VA_ARGS__
#define FUZZ_STRINGIFY(...) FUZZ_STRINGIFY_(__VA_ARGS__)
namespace fuzz {
/// The source of FUZZ_USER_OPS, for reproducers.
inline constexpr std::string_view user_ops_source = FUZZ_STRINGIFY(FUZZ_USER_OPS);
}  // namespace fuzz
