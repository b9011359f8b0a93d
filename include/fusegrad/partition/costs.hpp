#pragma once
/// \file fusegrad/partition/costs.hpp
/// The memory side of the cost-based save/recompute plan (`policy_kind::cost`, plan.hpp): what
/// a load and a store of one element cost, in the unit of the ops' declared costs
/// (`cost_units_per_load`: 1/16 of a load streamed from memory), for the two size classes a
/// compiled function plans for. The numbers are ratios measured by `bench/bench_op_costs.cpp`
/// on a Zen 3 core (docs/performance.md, "Costs of the cost-based plan"); what matters is their
/// order against the ops' costs, not their last digit.

#include <cstddef>

#include "fusegrad/ops/op.hpp"
#include "fusegrad/partition/plan.hpp"

namespace fusegrad::partition {

/// The size classes of a call: its values fit in the cache (L2: a saved value is written and
/// read back at cache speed), or they stream from memory.
enum class size_class : unsigned char { cached, streamed };

/// A load or a store of an L2-resident element: about a third of a streamed load.
inline constexpr memory_costs cached_costs{6, 5};
/// A streamed load (the unit), and a streamed store of a fresh buffer (its write and, for a
/// buffer the allocator hands back from the OS, a share of its page faults).
inline constexpr memory_costs streamed_costs{fusegrad::detail::cost_units_per_load, 24};

/// The costs of size class `c`.
constexpr memory_costs costs_of(size_class c) { return c == size_class::cached ? cached_costs : streamed_costs; }

/// The `cost` policy for size class `c`.
constexpr policy cost_policy(size_class c) { return policy{policy_kind::cost, 0, costs_of(c)}; }

}  // namespace fusegrad::partition
