#pragma once
/// \file fusegrad/partition/costs.hpp
/// The memory side of the cost-based save/recompute plan (`policy_kind::cost`, plan.hpp): what
/// a load and a store of one element cost, in the unit of the ops' declared costs
/// (`cost_units_per_load`: 1/16 of a load streamed from memory), for the two size classes a
/// compiled function plans for. The numbers are ratios measured on a Zen 3 core
/// (docs/performance.md, "The cost-based plan"); what matters is their order against the ops'
/// costs, not their last digit.

#include <cstddef>

#include "fusegrad/ops/op.hpp"
#include "fusegrad/partition/plan.hpp"

namespace fusegrad::partition {

/// The size classes of a call: its values fit in the cache (L2: a saved value is written and
/// read back at cache speed), or they stream from memory.
enum class size_class : unsigned char { cached, streamed };

/// A load or a store of an element inside a fused loop (8 to 12 streams, the loop computing
/// too), from the hand loops of `cos(cos(x)) * y` that save or recompute `cos(x)` and
/// `cos(cos(x))` (bench/bench_plans.cpp): four more streams cost what 0.9 of a `cos` costs in
/// cache (half a streamed load each) and what 2.3 of them cost at 2^24 floats (1.9 streamed
/// loads each: memory overlaps with computation, so an access costs less than a lone stream's
/// latency-bound load in a loop that computes, more than a single-stream bench says once the
/// streams compete for bandwidth).
inline constexpr memory_costs cached_costs{8, 8};
inline constexpr memory_costs streamed_costs{30, 30};

/// The costs of size class `c`.
constexpr memory_costs costs_of(size_class c) { return c == size_class::cached ? cached_costs : streamed_costs; }

/// The `cost` policy for size class `c`.
constexpr policy cost_policy(size_class c) { return policy{policy_kind::cost, 0, costs_of(c)}; }

}  // namespace fusegrad::partition
