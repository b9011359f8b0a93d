#pragma once
/// \file fusegrad/partition/costs.hpp
/// The memory side of the cost-based save/recompute plan (`policy_kind::cost`, plan.hpp): what
/// a load and a store of one element cost, in the unit of the ops' declared costs
/// (`cost_units_per_load`: 1/16 of a load streamed from memory), for the two size classes a
/// compiled function plans for, and which class a call falls in (`size_class_of`). The numbers
/// are ratios measured on a Zen 3 core (docs/performance.md, "The cost-based plan"); what
/// matters is their order against the ops' costs, not their last digit.

#include <cstddef>

#include "fusegrad/core/machine.hpp"
#include "fusegrad/ops/op.hpp"
#include "fusegrad/partition/plan.hpp"

namespace fusegrad::partition {

/// The size classes of a call: its values fit in the cache (L2: a saved value is written and
/// read back at cache speed), or they stream from memory.
enum class size_class : unsigned char { cached, streamed };

/// The size class of a call whose values take `bytes`: cached when they fit in
/// `fg::cache_bytes()`. The one rule of both compilers; each counts the bytes it can see
/// (`compiled_function::size_class_for`: inputs, outputs and what the cached plan saves; the
/// jit's `size_class_of`: the forward's values, as if all were saved).
inline size_class size_class_of(std::size_t bytes) noexcept {
  return bytes <= cache_bytes() ? size_class::cached : size_class::streamed;
}

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

/// The least estimated gain, in percent of a call, for which a compiled function holds the
/// plans of both size classes. The costs above are ratios measured on one core type; the cost
/// model's estimate of a large graph is good to a few percent (the 40-node test function's
/// plans differ by 2-3% in its estimate, and for streamed values the plan it ranks second runs
/// as fast: docs/compile.md).
inline constexpr long second_plan_gain_percent = 5;

/// Whether the plans of the two size classes, `cached` and `streamed` (of the same graph),
/// differ enough to hold both: in one class or the other, the other class's plan is estimated
/// to cost at least `second_plan_gain_percent` more.
template <std::size_t N>
constexpr bool worth_a_second_plan(const joint_graph<N>& g, const plan<N>& cached, const plan<N>& streamed) {
  auto worse = [&](const plan<N>& own, const plan<N>& other, memory_costs mem) {
    const long a = estimated_cost(g, own, mem), b = estimated_cost(g, other, mem);
    return (b - a) * 100 >= second_plan_gain_percent * a;
  };
  return worse(cached, streamed, cached_costs) || worse(streamed, cached, streamed_costs);
}

}  // namespace fusegrad::partition
