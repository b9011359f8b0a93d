// An invalid FUSEGRAD_NUM_THREADS (CTest runs this test with FUSEGRAD_NUM_THREADS=lots) is a
// clear error wherever the thread count is needed, never a silent default, and
// fg::set_num_threads overrides it.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include <fusegrad/fusegrad.hpp>

namespace fg = fusegrad;

TEST_CASE("an invalid FUSEGRAD_NUM_THREADS is an error that set_num_threads overrides") {
  const char* e = std::getenv("FUSEGRAD_NUM_THREADS");
  REQUIRE_MESSAGE(e != nullptr, "run through CTest, which sets FUSEGRAD_NUM_THREADS=lots");
  REQUIRE(std::string(e) == "lots");
  if (fg::detail::parallel_enabled) {
    CHECK_THROWS_WITH_AS((void)fg::get_num_threads(),
                         doctest::Contains("FUSEGRAD_NUM_THREADS: value 'lots'; expected a whole number from 1 to 4096 "
                                           "(or call fg::set_num_threads(n), which overrides it)"),
                         fg::error);
    // A loop large enough to be cut among threads reports it too, every time.
    const auto x = fg::ones<float>({1 << 18});
    CHECK_THROWS_WITH_AS((void)fg::exp(x), doctest::Contains("FUSEGRAD_NUM_THREADS"), fg::error);
    CHECK_THROWS_WITH_AS((void)fg::exp(x), doctest::Contains("FUSEGRAD_NUM_THREADS"), fg::error);
  }
  fg::set_num_threads(2);
  CHECK(fg::get_num_threads() == (fg::detail::parallel_enabled ? 2 : 1));
  const auto y = fg::exp(fg::zeros<float>({1 << 18}));
  CHECK(fg::sum(y).item() == static_cast<float>(1 << 18));
  CHECK_THROWS_WITH_AS(fg::set_num_threads(0), doctest::Contains("set_num_threads: n = 0; expected a whole number"),
                       fg::error);
}
