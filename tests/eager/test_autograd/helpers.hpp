#pragma once

// Tests of fusegrad's eager tensors and tape autograd: factories, storage sharing, grad_fn
// names, the backward engine, hooks, custom functions, gradcheck and nn::linear training.
//
// Every expected gradient below is derived by hand (and written as literals or as plain
// std:: math), never produced by the code under test.

#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace fg = fusegrad;

namespace {

/// Checks `t` holds exactly `expected` (row-major), element by element, within `eps`.
template <class T>
void check_values(const fg::tensor<T>& t, const std::vector<T>& expected, double eps = 1e-5) {
  REQUIRE(t.defined());
  const std::vector<T> got = t.to_vector();
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(eps));
  }
}

/// Checks every element of `t` equals `v`.
template <class T>
void check_all(const fg::tensor<T>& t, T v, double eps = 1e-5) {
  REQUIRE(t.defined());
  for (T g : t.to_vector()) CHECK(g == doctest::Approx(v).epsilon(eps));
}

inline fg::shape shp(std::initializer_list<fg::index_t> s) { return fg::shape(s); }

}  // namespace
