// Every op of the registry through every path against eager, bit for bit, in double
// (tests/opinfo/paths.hpp).
#include <doctest/doctest.h>

#include "opinfo/paths.hpp"

TEST_CASE("opinfo: every path against eager, bit for bit (double)") { opinfo::all_paths<double>(); }
