// doctest's main(), compiled once (object library fusegrad_doctest_main) and
// linked into every tests/test_*.cpp executable.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
