// Every op of the registry through every path against eager, bit for bit, in float
// (tests/opinfo/paths.hpp).
#include <doctest/doctest.h>

#include "opinfo/paths.hpp"

TEST_CASE("opinfo: every path against eager, bit for bit (float)") { opinfo::all_paths<float>(); }
