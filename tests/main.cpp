// doctest's main(), compiled once (object library fusegrad_doctest_main) and
// linked into every test executable (tests/<folder>/test_*).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
