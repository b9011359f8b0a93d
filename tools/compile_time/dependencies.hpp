#pragma once
// What fusegrad's headers include from outside fusegrad: the standard headers and xsimd. Keep
// the list equal to `grep -rh '#include <' include | sort -u`, less the optional ones (Eigen,
// oneTBB, OpenMP's omp.h, MPI, <thread> under them) and those that xsimd includes
// (immintrin.h). The floor of compile time (floor.cpp) includes it, and the per-header check
// (tests/CMakeLists.txt) precompiles it: each header is then compiled on its own against
// the same dependencies, without parsing them again per header.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <numbers>
#include <numeric>
#include <optional>
#include <ostream>
#include <queue>
#include <ranges>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unistd.h>
#include <utility>
#include <vector>
#include <xsimd/xsimd.hpp>
