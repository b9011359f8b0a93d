#pragma once

// Compiled autograd: gradients of captured backwards equal the eager engine's on 1,000 random
// tapes (eager ops with broadcasting and reductions, jitted functions, tensor hooks: opaque
// call_hook nodes, generic hooks traced, hooks reading values), and the
// cache key behaves: same structure hits, a new node kind misses, changed sizes go dynamic.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include <fusegrad/fusegrad.hpp>

#include "compare.hpp"

namespace fg = fusegrad;
using fusegrad_test::max_normwise;

namespace {

struct ca_off {  // every test starts and ends with compiled autograd off
  ca_off() { fg::config().compiled_autograd = false; }
  ~ca_off() { fg::config().compiled_autograd = false; }
};

/// For its scope, loops stream from memory (a last-level cache of one byte), so that a long
/// loop walks its space in tiles of up to `program::max_tile` elements.
struct long_tiles {
  long_tiles() { fg::set_last_cache_bytes(1); }
  ~long_tiles() { fg::set_last_cache_bytes(0); }
  long_tiles(const long_tiles&) = delete;
  long_tiles& operator=(const long_tiles&) = delete;
};

/// The leaves' gradients, left by a captured backward of `loss`, equal those of an eager
/// backward of it (run with the gradients cleared; `loss`'s tape must have been retained).
inline void check_matches_eager(const fg::tensor<double>& loss, std::vector<fg::tensor<double>> leaves) {
  std::vector<fg::tensor<double>> captured;
  for (auto& l : leaves) {
    captured.push_back(l.grad());
    l.zero_grad();
  }
  {
    fg::compiled_autograd::disable eager;
    loss.backward();
  }
  for (std::size_t i = 0; i < leaves.size(); ++i) CHECK(max_normwise(leaves[i].grad(), captured[i]) < 1e-12);
}

/// Builds a random tape from `leaves` (its choices drawn from `seed`) and returns the loss.
inline fg::tensor<double> random_tape(const std::vector<fg::tensor<double>>& leaves, std::uint64_t seed) {
  static const auto jitted = fg::jit([](auto a, auto b) { return fg::cos(a) * b + a; }, {.recompile_limit = 64});
  static const auto compiled = fg::compile([](auto a, auto b) { return fg::exp(a * 0.5) * b - fg::sum(a); });
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  std::vector<fg::tensor<double>> vals(leaves.begin(), leaves.end());
  const int steps = 3 + pick(6);
  for (int s = 0; s < steps; ++s) {
    const fg::tensor<double>& a = vals[static_cast<std::size_t>(pick(static_cast<int>(vals.size())))];
    const fg::tensor<double>& b = vals[static_cast<std::size_t>(pick(static_cast<int>(vals.size())))];
    fg::tensor<double> r;
    switch (pick(13)) {
      case 0: r = fg::cos(a); break;
      case 1: r = fg::exp(a * 0.1); break;
      case 2: r = fg::tanh(a) * 2.0; break;
      case 3: r = fg::sigmoid(a) - a; break;
      case 4: r = a + b; break;  // broadcasting where shapes differ
      case 5: r = a * b; break;
      case 6: r = a / (fg::abs(b) + 1.0); break;
      case 7: r = a - b * 0.5; break;
      case 8: r = fg::sum(a, -1, true) + a; break;
      case 9: r = a * fg::mean(b); break;
      case 10: r = a.shape() == b.shape() ? jitted(a, b) : fg::maximum(a, b); break;
      case 11: r = a.shape() == b.shape() ? compiled(a, b) : fg::maximum(b, a); break;
      default: {
        r = fg::sin(a) + 1.0;
        const double k = static_cast<double>(pick(3) + 1);
        switch (pick(3)) {
          case 0: r.register_hook([k](const fg::tensor<double>& g) { return g * k; }); break;  // call_hook
          case 1: r.register_hook([k](auto g) { return g * k; }); break;                       // traced
          default:  // reads the gradient's values (a call_hook runs on computed values)
            r.register_hook([k](const fg::tensor<double>& g) { return g.to_vector().front() > 1e300 ? g : g * k; });
            break;
        }
        break;
      }
    }
    vals.push_back(r);
  }
  fg::tensor<double> loss = fg::sum(vals.back() * vals.back());
  for (std::size_t i = leaves.size(); i + 1 < vals.size(); i += 2) loss = loss + fg::mean(vals[i]);
  return loss;
}

}  // namespace

/// `loss.backward()` under compiled autograd (`compiled`) or on the eager engine.
template <class L>
void backward_with(bool compiled, const L& loss) {
  if (!compiled) return loss.backward();
  fg::compiled_autograd::enable on;
  loss.backward();
}
