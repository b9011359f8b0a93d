// The floor of compile time: only what fusegrad's headers include from outside fusegrad (the
// standard library and xsimd). tools/compile_ratios.sh measures TUs against it. Keep the list
// equal to `grep -rh '#include <' include | sort -u`, less the optional ones (Eigen, oneTBB,
// OpenMP's omp.h, <thread> under them) and those that xsimd includes (immintrin.h).
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

int main() {}
