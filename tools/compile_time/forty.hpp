// The 40-node function of tests/compile/test_compile_40.cpp, shared by the compile-time probes.
#pragma once
#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

inline auto forty = [](auto x, auto y, auto z) {
  auto a = fg::sin(x) * y + z;
  auto b = fg::exp(-a * 0.5) + fg::cos(y);
  auto c = fg::tanh(a * b) - x / (fg::abs(z) + 1.0);
  auto d = fg::sigmoid(c) * fg::log(b + 2.0);
  auto e = fg::sqrt(fg::relu(d) + 1.0) * a;
  auto f = fg::maximum(e, c) + fg::pow(b, 2.0);
  auto g = fg::sin(f * y) + fg::cos(e - z);
  auto h = g * d + f / (b + 3.0);
  return fg::sum((h * x + fg::tanh(g) * 0.25) / 2.0);
};
