#pragma once
/// \file fusegrad/ops/unary_common.hpp
/// Shared includes of the op headers. Each op header holds one op: its scalar and SIMD value,
/// its derivative rule (written over any algebra of values), and its public functions.

#include <cmath>
#include <string_view>

#include "fusegrad/core/simd.hpp"
#include "fusegrad/eager/pointwise.hpp"
