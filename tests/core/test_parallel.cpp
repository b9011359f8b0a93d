// Every core (core/parallel.hpp): the thread controls, the block split, and the claim every
// parallel sum relies on: a sum cut into blocks of 2^j whole chunks, each summed on its own and
// the totals combined by `sum_of_blocks`, gives exactly one thread's bits.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;
namespace fd = fusegrad::detail;

namespace {
/// Values whose sum is sensitive to the order of additions (wide range of magnitudes, signs).
template <class T>
std::vector<T> awkward(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> e(-20, 20);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(std::ldexp(u(rng), e(rng)));
  return v;
}
template <class T>
T serial_sum(const std::vector<T>& v) {
  fd::running_sum<T> s;
  s.add(v.data(), static_cast<fg::index_t>(v.size()));
  return s.total();
}
/// The blocks of `size` values, each summed by a fresh running_sum, combined by sum_of_blocks.
template <class T>
T blocked_sum(const std::vector<T>& v, fg::index_t size) {
  const auto n = static_cast<fg::index_t>(v.size());
  std::vector<T> totals;
  for (fg::index_t b = 0; b < n; b += size) {
    fd::running_sum<T> s;
    s.add(v.data() + b, std::min(size, n - b));
    totals.push_back(s.total());
  }
  return fd::sum_of_blocks(totals.data(), static_cast<fg::index_t>(totals.size()));
}
template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}
}  // namespace

TEST_CASE_TEMPLATE("a sum cut into blocks of 2^j chunks equals one thread's sum, bit for bit", T, float, double) {
  constexpr fg::index_t chunk = fd::sum_chunk<T>;
  int checked = 0, differs_unaligned = 0;
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    // Sizes around block and chunk boundaries and random ones, up to 70 chunks.
    const fg::index_t n = trial < 20 ? chunk * (trial + 1) + (trial % 3 == 0 ? 0 : trial * 7 - 5)
                                     : static_cast<fg::index_t>(rng() % static_cast<std::uint64_t>(70 * chunk)) + 1;
    const auto v = awkward<T>(static_cast<std::size_t>(n), static_cast<std::uint64_t>(trial));
    const T ref = serial_sum(v);
    for (int j = 0; j <= 6; ++j) {
      CHECK_MESSAGE(same_bits(blocked_sum(v, chunk << j), ref), "n = ", n, ", blocks of ", (chunk << j), " values");
      ++checked;
    }
    // Blocks that are not 2^j chunks long do change the bits (the claim is not vacuous).
    if (n > 8 * chunk && !same_bits(blocked_sum(v, 3 * chunk), ref)) ++differs_unaligned;
  }
  CHECK(checked == 60 * 7);
  CHECK(differs_unaligned > 0);
}

#if defined(FUSEGRAD_PRECOMPILED)
// The runtime's TUs and a user's TU compiled `default_threads` with different bodies (OpenMP's
// count in the runtime, a call to the runtime in the user's), and the linker kept the user's:
// the runtime's `runtime_default_threads` called it back, a recursion without end wherever
// the call was not inlined (the Debug + ASan build). One body everywhere now.
TEST_CASE("with the precompiled runtime, the default thread count is the runtime's, in every TU") {
  const int n = fg::detail::runtime_default_threads();
  CHECK(n >= 1);
  CHECK(fg::detail::default_threads() == n);
}
#endif

TEST_CASE("thread controls") {
  const int before = fg::get_num_threads();
  CHECK(before >= 1);
  fg::set_num_threads(3);
  CHECK(fg::get_num_threads() == (fd::parallel_enabled ? 3 : 1));
  CHECK_THROWS_WITH_AS(fg::set_num_threads(0), doctest::Contains("set_num_threads"), fg::error);
  fg::set_num_threads(before);
  CHECK(fg::get_num_threads() == before);
}

TEST_CASE("a small loop is one call on the calling thread; a large one covers every item once") {
  int calls = 0;
  fd::parallel_for(1000, fd::parallel_grain(), [&](fg::index_t b, fg::index_t e) {
    ++calls;
    CHECK(b == 0);
    CHECK(e == 1000);
  });
  CHECK(calls == 1);
  for (int threads : {1, 2, 3, 8}) {
    fg::set_num_threads(threads);
    const fg::index_t n = 1000003;
    std::vector<int> hits(static_cast<std::size_t>(n), 0);
    fd::parallel_for(n, 1000, [&](fg::index_t b, fg::index_t e) {
      for (fg::index_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
    });
    CHECK(std::count(hits.begin(), hits.end(), 1) == n);
    const auto s = fd::split_pow2(n, 512, 1000);
    CHECK(s.count * s.size >= n);
    CHECK((s.count - 1) * s.size < n);
    if (s.count > 1) {  // one block (one thread) is the whole loop
      CHECK(s.size % 512 == 0);
      CHECK(std::has_single_bit(static_cast<std::uint64_t>(s.size / 512)));
    }
    CHECK(s.count ==
          (threads == 1 || !fd::parallel_enabled ? 1 : std::min<fg::index_t>(4 * threads, (n + s.size - 1) / s.size)));
  }
  fg::set_num_threads(2);
}

TEST_CASE("an exception in a block reaches the caller") {
  fg::set_num_threads(2);
  CHECK_THROWS_WITH_AS(fd::parallel_for(100000, 100,
                                        [](fg::index_t, fg::index_t e) {
                                          if (e == 100000) fd::fail("block", "thrown in a block");
                                        }),
                       doctest::Contains("thrown in a block"), fg::error);
}

TEST_CASE_TEMPLATE("sum_contiguous equals one thread's sum for 1, 2, 3 and 8 threads", T, float, double) {
  const auto v = awkward<T>(1234567, 3);
  const T ref = serial_sum(v);
  for (int threads : {1, 2, 3, 8}) {
    fg::set_num_threads(threads);
    CHECK(same_bits(fd::sum_contiguous(v.data(), static_cast<fg::index_t>(v.size())), ref));
  }
  fg::set_num_threads(2);
}
