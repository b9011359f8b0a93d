// The partial batches of core/simd.hpp at whatever width this TU is compiled for (AVX2: 8 floats
// or 4 doubles; AVX-512: 16 or 8; SSE2: 4 or 2): `load_head` and `store_head` at every n from 1
// to the batch's size touch p[0, n) and nothing else, and `running_sum::fold_registers` folds
// in registers with the additions of the pairwise fold. CI builds this test with the default
// flags and again with -march=native where the machine has AVX-512 (the `native` preset).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#if defined(__unix__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <fusegrad/core/accumulate.hpp>
#include <fusegrad/core/simd.hpp>

namespace fd = fusegrad::detail;

namespace {
template <class T>
using V = fusegrad::simd<T>;
template <class T>
constexpr std::int64_t width = static_cast<std::int64_t>(V<T>::size);

/// A value no load or store of the test produces: what a sentinel holds.
template <class T>
constexpr T sentinel = T(-12345.5);

/// The lanes of `v`.
template <class T>
std::vector<T> lanes_of(const V<T>& v) {
  std::vector<T> out(static_cast<std::size_t>(width<T>));
  v.store_unaligned(out.data());
  return out;
}

/// `load_head<PadFirst>` of `n` elements with sentinels on both sides: lanes [0, n) are the
/// elements, the others the padding (`p[0]` or zero), never a sentinel.
template <bool PadFirst, class T>
void check_load_head(std::int64_t n) {
  std::vector<T> buf(static_cast<std::size_t>(3 * width<T>), sentinel<T>);
  T* p = buf.data() + width<T>;
  for (std::int64_t l = 0; l < n; ++l) p[l] = T(l + 1);
  const auto got = lanes_of<T>(fd::load_head<PadFirst>(p, n));
  for (std::int64_t l = 0; l < width<T>; ++l) {
    const T want = l < n ? T(l + 1) : PadFirst ? T(1) : T(0);
    CHECK_MESSAGE(got[static_cast<std::size_t>(l)] == want, "n = ", n, ", lane ", l);
  }
}

/// `store_head` of `n` lanes into a buffer of sentinels: [0, n) written, everything around kept.
template <class T>
void check_store_head(std::int64_t n) {
  std::vector<T> buf(static_cast<std::size_t>(3 * width<T>), sentinel<T>);
  T* p = buf.data() + width<T>;
  std::vector<T> src(static_cast<std::size_t>(width<T>));
  for (std::int64_t l = 0; l < width<T>; ++l) src[static_cast<std::size_t>(l)] = T(100 + l);
  fd::store_head(p, V<T>::load_unaligned(src.data()), n);
  for (std::int64_t k = -width<T>; k < 2 * width<T>; ++k) {
    const T want = k >= 0 && k < n ? T(100 + k) : sentinel<T>;
    CHECK_MESSAGE(p[k] == want, "n = ", n, ", element ", k);
  }
}

template <class T>
void check_heads() {
  for (std::int64_t n = 1; n <= width<T>; ++n) {
    check_load_head<false, T>(n);
    check_load_head<true, T>(n);
    check_store_head<T>(n);
  }
}

#if defined(__unix__)
/// Two pages, the second inaccessible: `n` elements that end where the first page does. A
/// load or store past them faults (the test dies) instead of reading or writing a neighbour.
template <class T>
class guarded_end {
 public:
  guarded_end() {
    page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    base_ = static_cast<char*>(m);
    REQUIRE(mprotect(base_ + page_, page_, PROT_NONE) == 0);
  }
  ~guarded_end() { munmap(base_, 2 * page_); }
  guarded_end(const guarded_end&) = delete;
  guarded_end& operator=(const guarded_end&) = delete;
  /// The first of `n` elements that end at the guard page.
  T* last(std::int64_t n) const { return reinterpret_cast<T*>(base_ + page_) - n; }

 private:
  std::size_t page_ = 0;
  char* base_ = nullptr;
};

template <bool PadFirst, class T>
void check_heads_at_guard(const guarded_end<T>& g, std::int64_t n) {
  T* p = g.last(n);
  for (std::int64_t l = 0; l < n; ++l) p[l] = T(l + 1);
  const auto got = lanes_of<T>(fd::load_head<PadFirst>(p, n));
  for (std::int64_t l = 0; l < width<T>; ++l)
    CHECK(got[static_cast<std::size_t>(l)] == (l < n ? T(l + 1) : PadFirst ? T(1) : T(0)));
  fd::store_head(p, V<T>(T(7)), n);
  for (std::int64_t l = 0; l < n; ++l) CHECK(p[l] == T(7));
}
#endif
}  // namespace

TEST_CASE_TEMPLATE("load_head and store_head touch exactly the first n elements, at every n up to the batch's size", T,
                   float, double) {
  check_heads<T>();
}

#if defined(__unix__)
TEST_CASE_TEMPLATE("load_head and store_head of elements that end at an inaccessible page do not fault", T, float,
                   double) {
  const guarded_end<T> g;
  for (std::int64_t n = 1; n <= width<T>; ++n) {
    check_heads_at_guard<false>(g, n);
    check_heads_at_guard<true>(g, n);
  }
}
#endif

TEST_CASE_TEMPLATE("fold_registers folds a chunk's accumulators with the pairwise fold's additions, at any width", T,
                   float, double) {
  using S = fd::running_sum<T>;
  constexpr auto lanes = static_cast<std::size_t>(S::lanes);
  constexpr auto W = static_cast<std::size_t>(width<T>);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> e(-30, 30);
  for (int round = 0; round < 200; ++round) {
    std::vector<T> a(lanes);
    for (auto& x : a) x = static_cast<T>(std::ldexp(u(rng), e(rng)));
    std::vector<V<T>> regs(lanes / W);
    for (std::size_t r = 0; r < regs.size(); ++r) regs[r] = V<T>::load_unaligned(a.data() + r * W);
    for (std::size_t half = lanes / 2; half >= 1; half /= 2)  // the reference: halves, one by one
      for (std::size_t i = 0; i < half; ++i) a[i] = a[i] + a[i + half];
    const T got = S::fold_registers(regs.data());
    CHECK(std::memcmp(&got, a.data(), sizeof(T)) == 0);
  }
}

TEST_CASE_TEMPLATE("sum_contiguous gives a running_sum's bits at every length up to past a chunk", T, float, double) {
  using S = fd::running_sum<T>;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> e(-30, 30);
  const auto n_max = static_cast<std::size_t>(S::chunk + 2 * S::lanes + 3);
  std::vector<T> x(n_max);
  for (auto& v : x) v = static_cast<T>(std::ldexp(u(rng), e(rng)));
  const std::vector<T> zeros(n_max, T(-0.0));  // a sum of -0 values is -0, as a running sum's
  for (const std::vector<T>* values : std::initializer_list<const std::vector<T>*>{&x, &zeros})
    for (std::size_t n = 0; n <= n_max; ++n) {
      CAPTURE(n);
      S s;
      s.add(values->data(), static_cast<std::int64_t>(n));
      const T want = s.total(), got = S::sum_contiguous(values->data(), static_cast<std::int64_t>(n));
      CHECK(std::memcmp(&got, &want, sizeof(T)) == 0);
    }
}
