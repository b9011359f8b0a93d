#pragma once
// Generated from the op registry (tests/opinfo/registry.hpp): every entry through every path
// against eager (test_opinfo_paths_double.cpp and test_opinfo_paths_float.cpp, one element
// type each so that the two compile side by side), the same bits for values and gradients: fg::jit (its
// traced forward and its derived backward), compiled autograd (the eager tape's backward
// captured and compiled), and fg::compile (the fused backend). Inputs: the entry's mixed
// values (edge values, zeros, infinities, NaN, tiny and huge magnitudes beside samples) and,
// for ops with several operands, broadcast operands.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include "harness.hpp"

namespace opinfo {

template <class E, std::size_t N>
struct run_result {
  fg::tensor<E> y;
  std::array<fg::tensor<E>, N> grads;
};

/// Fresh leaves (mask operands need no grad), `fn` on them, backward of sum(y * w).
template <class E, std::size_t N, class Info, class Fn>
run_result<E, N> run(const Info& e, const tensors<E, N>& x0, Fn&& fn) {
  tensors<E, N> x;
  for (std::size_t k = 0; k < N; ++k) x[k] = x0[k].detach().clone().requires_grad(!e.dom[k].mask);
  run_result<E, N> r;
  r.y = fg::tensor<E>(call(fn, x));
  if (r.y.requires_grad()) {
    const auto w = fg::rand<E>(r.y.shape(), 5, E(0.5), E(1.5));
    fg::sum(r.y * w).backward();
  }
  for (std::size_t k = 0; k < N; ++k) r.grads[k] = x[k].grad();
  return r;
}

/// Values the same bits; gradients too, except where an operand is broadcast: a compiled
/// backward may add the contributions of several uses (a composite such as `where`) at the
/// broadcast shape and sum once, where the tape sums each down first (rounding differs).
template <class E, std::size_t N>
void same(std::string path, const run_result<E, N>& want, const run_result<E, N>& got) {
  CAPTURE(path);
  CHECK_MESSAGE(first_bit_diff(want.y.to_vector(), got.y.to_vector()).empty(),
                "values: " << first_bit_diff(want.y.to_vector(), got.y.to_vector()));
  for (std::size_t k = 0; k < N; ++k) {
    CAPTURE(k);
    REQUIRE(want.grads[k].defined() == got.grads[k].defined());
    if (!want.grads[k].defined()) continue;
    const auto a = want.grads[k].to_vector(), b = got.grads[k].to_vector();
    if (want.grads[k].shape() == want.y.shape())
      CHECK_MESSAGE(first_bit_diff(a, b).empty(), "gradient: " << first_bit_diff(a, b));
    else
      CHECK_MESSAGE(normwise(a, b) <= (std::is_same_v<E, float> ? 1e-6 : 1e-15),
                    "gradient of a broadcast operand: " << first_bit_diff(a, b));
  }
}

template <class E, class Info>
void check_paths(const Info& e) {
  constexpr std::size_t N = Info::arity;
  const auto f = fn_of<E>(e);
  std::vector<tensors<E, N>> cases{columns<E>(mixed_values(e))};
  shapes<N> mat;
  mat.fill(fg::shape{5, 37});
  cases.push_back(inputs<E>(e, mat, 8));
  if constexpr (N >= 2) {
    shapes<N> bc = shape_classes<N>()[6];  // [5, 1] with [1, 37] (with [])
    cases.push_back(inputs<E>(e, bc, 9));
  }
  for (const auto& x : cases) {
    const std::string shapes_ = str(x[0].shape()) + (N > 1 ? " with " + str(x[1].shape()) : std::string());
    CAPTURE(shapes_);
    const auto eager = run<E, N>(e, x, f);
    {
      auto jf = fg::jit(f);
      same("fg::jit", eager, run<E, N>(e, x, jf));
      same("fg::jit (cache hit)", eager, run<E, N>(e, x, jf));
    }
    {
      fg::compiled_autograd::enable on;
      same("compiled autograd", eager, run<E, N>(e, x, f));
    }
    auto cf = fg::compile(e.f);
    same("fg::compile", eager, run<E, N>(e, x, cf));
  }
}

template <class E>
void all_paths() {
  for_each(registry(), [](const auto& e) {
    const std::string op(e.name);
    CAPTURE(op);
    check_paths<E>(e);
  });
}
}  // namespace opinfo
