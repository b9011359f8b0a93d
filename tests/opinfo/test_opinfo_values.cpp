// Generated from the op registry (tests/opinfo/registry.hpp), for every entry, in float and
// double: eager values against the reference per element over every shape class (0-d, one
// element, vector, matrix, broadcast, empty, non-contiguous); edge values against PyTorch's;
// and the same bits for an element wherever it sits and whatever shares its SIMD batch.
#include <doctest/doctest.h>

#include <fusegrad/fusegrad.hpp>

#include "opinfo/harness.hpp"

namespace {
using namespace opinfo;

template <class E, class Info>
void check_values(const Info& e) {
  const double tol = std::is_same_v<E, float> ? e.tol_float : e.tol_double;
  const auto f = fn_of<E>(e);
  for (int layout = 0; layout < 2; ++layout) {
    for (const auto& ss : shape_classes<Info::arity>()) {
      const std::string shapes_ = str(ss) + (layout ? " (non-contiguous)" : "");
      CAPTURE(shapes_);
      const auto x = inputs<E>(e, ss, 5, layout == 1);
      const fg::tensor<E> y = call(f, x);
      fg::shape out;
      const auto idx = broadcast_index(ss, out);
      REQUIRE(str(y.shape()) == str(out));
      std::array<std::vector<E>, Info::arity> xv;
      for (std::size_t k = 0; k < Info::arity; ++k) xv[k] = x[k].to_vector();
      const auto yv = y.to_vector();
      for (std::size_t i = 0; i < idx.size(); ++i) {
        std::array<long double, Info::arity> a{};
        for (std::size_t k = 0; k < Info::arity; ++k) a[k] = xv[k][static_cast<std::size_t>(idx[i][k])];
        const long double want = call(e.ref, a);
        if (!matches<E>(yv[i], want, tol)) {
          std::ostringstream os;
          os.precision(17);
          os << "element " << i << ": got " << yv[i] << ", expected " << static_cast<double>(want) << " (input";
          for (auto v : a) os << " " << static_cast<double>(v);
          os << ")";
          FAIL_CHECK(os.str());
          break;
        }
      }
    }
  }
}

template <class E, class Info>
void check_specials(const Info& e) {
  const double tol = std::is_same_v<E, float> ? e.tol_float : e.tol_double;
  const auto f = fn_of<E>(e);
  for (const auto& s : e.specials) {
    tensors<E, Info::arity> x;
    for (std::size_t k = 0; k < Info::arity; ++k) x[k] = fg::scalar_tensor<E>(static_cast<E>(s.x[k]));
    const E got = call(f, x).item();
    const E want = static_cast<E>(s.want);
    const bool ok = want == 0 ? got == 0 && std::signbit(got) == std::signbit(want) : matches<E>(got, s.want, tol);
    if (!ok) {
      std::ostringstream os;
      os.precision(17);
      os << "at (" << s.x[0];
      for (std::size_t k = 1; k < Info::arity; ++k) os << ", " << s.x[k];
      os << "): got " << got << ", expected " << want;
      FAIL_CHECK(os.str());
    }
  }
}

/// The op on the mixed values (one vector), on the vector reversed, and on each row alone (a
/// one-element tensor): every element the same bits in all three.
template <class E, class Info>
void check_neighbours(const Info& e) {
  const auto f = fn_of<E>(e);
  auto rows = mixed_values(e);
  const auto whole = call(f, columns<E>(rows)).to_vector();
  std::vector<E> alone;
  for (const auto& r : rows) alone.push_back(call(f, columns<E>(std::vector{r})).to_vector().at(0));
  CHECK_MESSAGE(first_bit_diff(whole, alone).empty(),
                "whole vector vs each element alone: " << first_bit_diff(whole, alone));
  std::reverse(rows.begin(), rows.end());
  auto rev = call(f, columns<E>(rows)).to_vector();
  std::reverse(rev.begin(), rev.end());
  CHECK_MESSAGE(first_bit_diff(whole, rev).empty(), "vector vs reversed vector: " << first_bit_diff(whole, rev));
}

template <class E>
void all_values() {
  for_each(registry(), [](const auto& e) {
    const std::string op(e.name);
    CAPTURE(op);
    check_values<E>(e);
    check_specials<E>(e);
    check_neighbours<E>(e);
  });
}
}  // namespace

TEST_CASE("opinfo: eager values, edge values and neighbour independence (float)") { all_values<float>(); }
TEST_CASE("opinfo: eager values, edge values and neighbour independence (double)") { all_values<double>(); }

TEST_CASE("opinfo: entry names are unique") {
  std::vector<std::string_view> names;
  for_each(registry(), [&](const auto& e) { names.push_back(e.name); });
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
}
