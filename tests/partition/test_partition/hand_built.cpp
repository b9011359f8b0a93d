// test_partition: the hand-built joint graphs, their plans checked in constant evaluation and
// by the runtime checker; reductions; uniform costs; malformed graphs.
#include "checker.hpp"

namespace {

// ---------------------------------------------------------------------------------------------
// cos(cos(x)); backward gx = g * -sin(cos(x)) * -sin(x).
//   B = {4..9}; needed = {1 (child of sin(c1)), 0 (child of sin(x))}.
//   min_cut: one flow path source->x->{c1, sink}: cut {x}, recompute c1 = cos(x).
// ---------------------------------------------------------------------------------------------
constexpr joint_graph<10> coscos{{
    in(),             // 0 x
    pw(0),            // 1 c1 = cos(x)
    froot(pw(1)),     // 2 c2 = cos(c1)
    gin(),            // 3 g
    pw(1),            // 4 s1 = sin(c1)
    pw(4),            // 5 n1 = -s1
    pw(3, 5),         // 6 m1 = g * n1
    pw(0),            // 7 s0 = sin(x)
    pw(7),            // 8 n0 = -s0
    broot(pw(6, 8)),  // 9 gx = m1 * n0
}};

static_assert(saves(make_plan(coscos, save_all), {0, 1}),
              "save_all on cos(cos(x)) saves x and cos(x), the two values the backward reads.");
static_assert(saves(make_plan(coscos, min_cut), {0}), "min_cut on cos(cos(x)) saves only x.");
static_assert(recomputes(make_plan(coscos, min_cut), {1}), "min_cut on cos(cos(x)) recomputes cos(x) in the backward.");
static_assert(saves(make_plan(coscos, recompute_all), {0}), "recompute_all on cos(cos(x)) saves only the input x.");
static_assert(saves(make_plan(coscos, budget(1)), {0}) &&
                  same_plan(make_plan(coscos, budget(1)), make_plan(coscos, min_cut)),
              "A budget of 1 rejects save_all (2 tensors) and takes the min_cut plan.");
static_assert(same_plan(make_plan(coscos, budget(2)), make_plan(coscos, save_all)),
              "A budget of 2 fits save_all, which recomputes least.");
static_assert(same_plan(make_plan(coscos, budget(0)), make_plan(coscos, recompute_all)),
              "When no plan fits the budget, memory_budget falls back to recompute_all.");
static_assert(make_plan(coscos, min_cut).forward[2] && !make_plan(coscos, min_cut).forward[3] &&
                  make_plan(coscos, min_cut).backward[4] && !make_plan(coscos, min_cut).backward[1],
              "The forward/backward regions of cos(cos(x)) are those derived by hand.");
static_assert(make_plan(coscos, policy{}).saved_count == 1, "The default policy is min_cut.");

// The cost policy on cos(cos(x)), cos costing 1.5 streamed loads (24 units): streaming, saving
// x (a load: 16) and recomputing cos(x) (24) costs 40 against 16 + 32 for saving cos(x) as well;
// in cache (a load or store costs 2) recomputing is the expensive choice: 2 + 24 against 2 + 4.
constexpr joint_graph<10> coscos_costed = [] {
  joint_graph<10> g = coscos;
  for (int k : {1, 2}) g.nodes[k].cost = 24;       // cos
  for (int k : {4, 7}) g.nodes[k].cost = 24;       // sin
  for (int k : {5, 6, 8, 9}) g.nodes[k].cost = 1;  // neg, mul
  return g;
}();
constexpr policy streaming{policy_kind::cost, 0, {16, 16}};
constexpr policy in_cache{policy_kind::cost, 0, {2, 2}};
static_assert(saves(make_plan(coscos_costed, streaming), {0}) && recomputes(make_plan(coscos_costed, streaming), {1}),
              "Streaming from memory, the cost policy saves x and recomputes cos(x) (as min_cut does).");
static_assert(saves(make_plan(coscos_costed, in_cache), {0, 1}) &&
                  recomputes_nothing(make_plan(coscos_costed, in_cache)),
              "In cache, the cost policy saves cos(x) too: recomputing a cos costs more than a store and a load.");
// What a whole call costs by the same measures (estimated_cost), by hand. Streaming, saving x:
// x loaded and saved (16 + 16, no store: an input is in memory), cos(x) computed and
// recomputed (24 + 24), cos(cos(x)) computed and stored as the output (24 + 16), g loaded (16),
// the backward's sin, neg, mul, sin, neg, mul (24 + 1 + 1 + 24 + 1 + 1) and gx stored (16):
// 204; saving cos(x) as well trades the recomputation (24) for a store and a load (32): 212.
// In cache: 4 + 48 + 26 + 2 + 54 = 134 against 4 + 28 + 26 + 2 + 54 = 114.
// Siblings: cos(x) (node 1) and the backward's sin(x) (node 7) come out of one reduction of x,
// as do cos(c1) (node 2) and sin(c1) (node 4). With the links and a sibling costing 2 units
// beside the other, recomputing cos(x) in the backward costs 2: in cache the plan that saved
// cos(x) (a store and a load, 4) now recomputes it; streaming it recomputes it as before.
constexpr joint_graph<10> coscos_siblings = [] {
  joint_graph<10> g = coscos_costed;
  for (auto [a, b] : {std::pair{1, 7}, std::pair{2, 4}}) {
    g.nodes[a].sibling = b, g.nodes[b].sibling = a;
    g.nodes[a].sibling_cost = g.nodes[b].sibling_cost = 2;
  }
  return g;
}();
static_assert(saves(make_plan(coscos_siblings, in_cache), {0}) && recomputes(make_plan(coscos_siblings, in_cache), {1}),
              "In cache, cos(x) beside the backward's sin(x) is cheaper to recompute than to save.");
static_assert(saves(make_plan(coscos_siblings, streaming), {0}) &&
                  recomputes(make_plan(coscos_siblings, streaming), {1}),
              "Streaming, the plan is min_cut's, as without siblings.");
// The call in cache, by hand: 134 above with the recomputation at 2 instead of 24: 112; the
// plan without the links (saving cos(x)) is 114 by the same count.
static_assert(fusegrad::partition::estimated_cost(coscos_siblings, make_plan(coscos_siblings, in_cache),
                                                  in_cache.mem) == 112 &&
                  fusegrad::partition::estimated_cost(coscos_siblings, make_plan(coscos_costed, in_cache),
                                                      in_cache.mem) == 114,
              "In cache, the call under each plan costs what the hand count says.");

using fusegrad::partition::estimated_cost;
static_assert(estimated_cost(coscos_costed, make_plan(coscos_costed, streaming), streaming.mem) == 204 &&
                  estimated_cost(coscos_costed, make_plan(coscos_costed, in_cache), streaming.mem) == 212,
              "Streaming, the call under each plan costs what the hand count says.");
static_assert(estimated_cost(coscos_costed, make_plan(coscos_costed, streaming), in_cache.mem) == 134 &&
                  estimated_cost(coscos_costed, make_plan(coscos_costed, in_cache), in_cache.mem) == 114,
              "In cache, the call under each plan costs what the hand count says.");
static_assert(same_plan(make_plan(coscos, uniform), make_plan(coscos, min_cut)),
              "With uniform costs the cost policy is min_cut.");

// ---------------------------------------------------------------------------------------------
// cos(cos(a+b+c+d)): every gradient ga..gd is gs (one backward root).
//   needed = {s (child of sin(s)), c1 (child of sin(c1))}; all flow passes through s.
// ---------------------------------------------------------------------------------------------
constexpr joint_graph<17> coscos4{{
    in(),           // 0 a
    in(),           // 1 b
    in(),           // 2 c
    in(),           // 3 d
    pw(0, 1),       // 4 s1 = a + b
    pw(4, 2),       // 5 s2 = s1 + c
    pw(5, 3),       // 6 s = s2 + d
    pw(6),          // 7 c1 = cos(s)
    froot(pw(7)),   // 8 c2 = cos(c1)
    gin(),          // 9 g
    pw(7),          // 10 sin(c1)
    pw(10),         // 11 neg
    pw(9, 11),      // 12 mul
    pw(6),          // 13 sin(s)
    pw(13),         // 14 neg
    pw(12, 14),     // 15 mul
    broot(pw(15)),  // 16 gs (= ga = gb = gc = gd)
}};

static_assert(saves(make_plan(coscos4, min_cut), {6}), "min_cut on cos(cos(a+b+c+d)) saves only the sum s.");
static_assert(recomputes(make_plan(coscos4, min_cut), {7}), "min_cut on cos(cos(a+b+c+d)) recomputes cos(s).");
static_assert(saves(make_plan(coscos4, save_all), {6, 7}), "save_all on cos(cos(a+b+c+d)) saves s and cos(s).");
static_assert(saves(make_plan(coscos4, recompute_all), {0, 1, 2, 3}),
              "recompute_all on cos(cos(a+b+c+d)) saves the four inputs.");
static_assert(recomputes(make_plan(coscos4, recompute_all), {4, 5, 6, 7}),
              "recompute_all on cos(cos(a+b+c+d)) recomputes the sums and cos(s).");

// ---------------------------------------------------------------------------------------------
// Softmax-like: m = max(x), e = exp(x - m), z = sum(e), y = e / z.
// Backward (made up, reads e and z): gx = (g/z - sum(g*e/(z*z))) * e.
//   needed = {e, z}. min_cut: z must be saved (a reduction the sink reads directly), and one of
//   e, x-m, {x, m}: the cut closest to the sink saves e.
// ---------------------------------------------------------------------------------------------
constexpr joint_graph<15> softmax{{
    in(),             // 0 x
    red(0),           // 1 m = max(x)
    pw(0, 1),         // 2 d = x - m
    pw(2),            // 3 e = exp(d)
    red(3),           // 4 z = sum(e)
    froot(pw(3, 4)),  // 5 y = e / z
    gin(),            // 6 g
    pw(6, 4),         // 7 g / z
    pw(6, 3),         // 8 g * e
    pw(4, 4),         // 9 z * z
    pw(8, 9),         // 10 (g*e) / (z*z)
    red(10),          // 11 sum(...)          (a reduction in the backward region)
    pw(7, 11),        // 12 g/z - sum(...)
    pw(12, 3),        // 13 (...) * e
    broot(pw(13)),    // 14 gx
}};

static_assert(saves(make_plan(softmax, save_all), {3, 4}), "save_all on softmax saves exp(x - max x) and its sum.");
static_assert(saves(make_plan(softmax, min_cut), {3, 4}) && recomputes_nothing(make_plan(softmax, min_cut)),
              "min_cut on softmax saves e and z (the sum can never be recomputed) and recomputes nothing.");
static_assert(saves(make_plan(softmax, recompute_all), {0, 1, 4}),
              "recompute_all on softmax saves x and both reductions.");
static_assert(recomputes(make_plan(softmax, recompute_all), {2, 3}),
              "recompute_all on softmax recomputes x - m and exp, never a reduction.");
static_assert(make_plan(softmax, min_cut).backward[11] && !make_plan(softmax, min_cut).forward[11],
              "A reduction over gradients belongs to the backward region.");

// A reduction feeding a pointwise op the backward reads: saving the later pointwise value is
// as cheap as saving the reduction, and the sink-side tie-break prefers it.
//   x, s = sum(x), t = sin(s) (root); backward gx = g * cos(t) (reads t only).
constexpr joint_graph<6> reduce_then_pointwise{{
    in(),             // 0 x
    red(0),           // 1 s = sum(x)
    froot(pw(1)),     // 2 t = sin(s)
    gin(),            // 3 g
    pw(2),            // 4 cos(t)
    broot(pw(3, 4)),  // 5 gx
}};
static_assert(saves(make_plan(reduce_then_pointwise, min_cut), {2}),
              "min_cut saves the output t rather than the reduction below it.");
static_assert(saves(make_plan(reduce_then_pointwise, recompute_all), {1}) &&
                  recomputes(make_plan(reduce_then_pointwise, recompute_all), {2}),
              "recompute_all saves the reduction (not the input below it) and recomputes sin.");

// An extern op (matmul) in the forward: h = x @ w, y = tanh(h) root; backward reads y, x, w.
//   needed = {y, x, w}: three separate sources, min cut 3.
constexpr joint_graph<10> linear_tanh{{
    in(),              // 0 x
    in(),              // 1 w
    ext(0, 1),         // 2 h = x @ w
    froot(pw(2)),      // 3 y = tanh(h)
    gin(),             // 4 g
    pw(3, 3),          // 5 y * y
    pw(4, 5),          // 6 gh = g * (1 - y*y)
    broot(ext(6, 1)),  // 7 gx = gh @ w^T
    broot(ext(0, 6)),  // 8 gw = x^T @ gh
    cst(),             // 9 unused
}};
static_assert(saves(make_plan(linear_tanh, min_cut), {0, 1, 3}),
              "min_cut on linear+tanh saves x, w and tanh's output.");
static_assert(saves(make_plan(linear_tanh, recompute_all), {0, 1, 2}) &&
                  recomputes(make_plan(linear_tanh, recompute_all), {3}),
              "recompute_all keeps the matmul result (never recomputed) and recomputes tanh.");

// ---------------------------------------------------------------------------------------------
// tanh: y = tanh(x); backward gx = g * (1 - y*y) reads the forward output itself.
// ---------------------------------------------------------------------------------------------
constexpr joint_graph<7> tanh_graph{{
    in(),             // 0 x
    froot(pw(0)),     // 1 y = tanh(x)
    gin(),            // 2 g
    pw(1, 1),         // 3 y * y
    cst(),            // 4 literal 1
    pw(4, 3),         // 5 1 - y*y
    broot(pw(2, 5)),  // 6 gx
}};
static_assert(saves(make_plan(tanh_graph, min_cut), {1}) && recomputes_nothing(make_plan(tanh_graph, min_cut)),
              "min_cut on tanh saves the output y (the latest value), not x.");
static_assert(saves(make_plan(tanh_graph, save_all), {1}), "save_all on tanh saves y and never the constant 1.");
static_assert(saves(make_plan(tanh_graph, recompute_all), {0}) && recomputes(make_plan(tanh_graph, recompute_all), {1}),
              "recompute_all on tanh saves x and recomputes y.");

// ---------------------------------------------------------------------------------------------
// Diamond: a = sin(x), b = cos(x), y = a * b; backward reads a and b:
//   gx = (g*b) * b + (g*a) * (-a)   (cos(x) = b, -sin(x) = -a). min_cut: {x}.
// ---------------------------------------------------------------------------------------------
constexpr joint_graph<10> diamond{{
    in(),             // 0 x
    pw(0),            // 1 a = sin(x)
    pw(0),            // 2 b = cos(x)
    froot(pw(1, 2)),  // 3 y = a * b
    gin(),            // 4 g
    pw(4, 2),         // 5 ga = g * b
    pw(4, 1),         // 6 gb = g * a
    pw(1),            // 7 -a
    pw(5, 2, 6),      // 8 ga * b + ...  (three operands)
    broot(pw(8, 7)),  // 9 gx
}};
static_assert(saves(make_plan(diamond, min_cut), {0}) && recomputes(make_plan(diamond, min_cut), {1, 2}),
              "min_cut on the diamond saves x and recomputes both branches.");
static_assert(saves(make_plan(diamond, save_all), {1, 2}), "save_all on the diamond saves both branches.");
static_assert(saves(make_plan(diamond, recompute_all), {0}), "recompute_all on the diamond saves x.");

// ---------------------------------------------------------------------------------------------
// Nothing needed: y = a + b; ga = gb = g.
// ---------------------------------------------------------------------------------------------
constexpr joint_graph<4> add_only{{in(), in(), froot(pw(0, 1)), broot(gin())}};
static_assert(saves_nothing(make_plan(add_only, min_cut)) && saves_nothing(make_plan(add_only, save_all)) &&
                  saves_nothing(make_plan(add_only, recompute_all)) && saves_nothing(make_plan(add_only, budget(0))),
              "An add needs nothing saved under any policy.");
static_assert(recomputes_nothing(make_plan(add_only, min_cut)) && make_plan(add_only, min_cut).backward[3] &&
                  !make_plan(add_only, min_cut).forward[3],
              "An add recomputes nothing; the gradient input is in the backward region.");

// ---------------------------------------------------------------------------------------------
// Constants: y = x * 2 (backward gx = g * 2 reads only the constant) and
// z = sin(x) + 3 (backward reads x). Constants are never saved.
// ---------------------------------------------------------------------------------------------
constexpr joint_graph<5> scale_by_const{{in(), cst(), froot(pw(0, 1)), gin(), broot(pw(3, 1))}};
static_assert(saves_nothing(make_plan(scale_by_const, min_cut)) && saves_nothing(make_plan(scale_by_const, save_all)) &&
                  saves_nothing(make_plan(scale_by_const, recompute_all)),
              "A constant the backward reads is never saved.");
constexpr joint_graph<7> sin_plus_const{{in(), cst(), pw(0), froot(pw(2, 1)), gin(), pw(0), broot(pw(4, 5))}};
static_assert(saves(make_plan(sin_plus_const, min_cut), {0}) && saves(make_plan(sin_plus_const, save_all), {0}) &&
                  saves(make_plan(sin_plus_const, recompute_all), {0}),
              "sin(x) + 3 saves x under every policy, never the constant.");

// ---------------------------------------------------------------------------------------------
// Extensions documented in the header.
// ---------------------------------------------------------------------------------------------
// A forward value that is itself a backward root must be available to the backward.
constexpr joint_graph<3> fwd_value_as_grad{{in(), pw(0), broot(froot(pw(1)))}};
static_assert(saves(make_plan(fwd_value_as_grad, min_cut), {2}) && make_plan(fwd_value_as_grad, min_cut).forward[2] &&
                  saves(make_plan(fwd_value_as_grad, recompute_all), {0}),
              "A forward node marked backward_root is needed; min_cut saves the latest value.");
// An input that only the backward reads is still an input: it is saved, never "computed".
constexpr joint_graph<6> input_only_in_backward{{in(), froot(pw(0)), in(), gin(), pw(3, 2), broot(pw(4, 0))}};
static_assert(make_plan(input_only_in_backward, min_cut).forward[2] &&
                  !make_plan(input_only_in_backward, min_cut).backward[2] &&
                  saves(make_plan(input_only_in_backward, min_cut), {0, 2}),
              "An input read only by the backward is a forward value and gets saved.");

// ---------------------------------------------------------------------------------------------
// Larger graphs in constant evaluation (compile-time cost).
// ---------------------------------------------------------------------------------------------
// A chain x -> c1 -> ... -> c31 (root); the backward multiplies the derivatives of every step,
// each reading the previous chain value: all of x, c1..c30 are needed; min_cut saves only x.
constexpr joint_graph<64> make_chain64() {
  joint_graph<64> g{};
  g.nodes[0] = in();
  for (int i = 1; i < 32; ++i) g.nodes[i] = pw(i - 1);
  g.nodes[31].forward_root = true;
  g.nodes[32] = gin();
  for (int i = 33; i < 64; ++i) g.nodes[i] = pw(i - 1, i - 33);  // b_k = b_{k-1} * f'(c_{k-1})
  g.nodes[63].backward_root = true;
  return g;
}
constexpr joint_graph<64> chain64 = make_chain64();
static_assert(saves(make_plan(chain64, min_cut), {0}), "min_cut on a 31-step chain saves only its input.");
static_assert(make_plan(chain64, save_all).saved_count == 31,
              "save_all on a 31-step chain saves every value the backward reads.");

constexpr joint_graph<256> big = random_graph<256>(42, 3, 120, 130);
static_assert(make_plan(big, min_cut).saved_count <= make_plan(big, save_all).saved_count &&
                  make_plan(big, min_cut).saved_count <= make_plan(big, recompute_all).saved_count,
              "On a 256-node random graph min_cut saves no more than either fixed policy.");

}  // namespace

TEST_CASE("partition: hand-built graphs satisfy every invariant and min_cut is minimal") {
  SUBCASE("cos(cos(x))") { check_all_policies(coscos); }
  SUBCASE("cos(cos(a+b+c+d))") { check_all_policies(coscos4); }
  SUBCASE("softmax") { check_all_policies(softmax); }
  SUBCASE("reduction then pointwise") { check_all_policies(reduce_then_pointwise); }
  SUBCASE("linear + tanh") { check_all_policies(linear_tanh); }
  SUBCASE("tanh") { check_all_policies(tanh_graph); }
  SUBCASE("diamond") { check_all_policies(diamond); }
  SUBCASE("add only") { check_all_policies(add_only); }
  SUBCASE("constants") {
    check_all_policies(scale_by_const);
    check_all_policies(sin_plus_const);
  }
  SUBCASE("extensions") {
    check_all_policies(fwd_value_as_grad);
    check_all_policies(input_only_in_backward);
  }
}

TEST_CASE("partition: the runtime results equal the compile-time ones") {
  constexpr auto cut = make_plan(coscos4, min_cut);
  const joint_graph<17> runtime_graph = coscos4;
  CHECK(same_plan(make_plan(runtime_graph, min_cut), cut));
  // The 256-node graph: the runtime plans satisfy every invariant (no brute force: F is large).
  const rt_graph big_rt = to_rt(big);
  const regions_rt r = regions_of(big_rt);
  const rt_plan big_cut = to_rt(make_plan(big, min_cut));
  const rt_plan big_all = to_rt(make_plan(big, save_all));
  const rt_plan big_rec = to_rt(make_plan(big, recompute_all));
  check_plan(big_rt, r, big_cut);
  check_plan(big_rt, r, big_all);
  check_plan(big_rt, r, big_rec);
  CHECK(big_cut.saved_count <= big_all.saved_count);
  CHECK(big_cut.saved_count <= big_rec.saved_count);
  MESSAGE("256-node graph: save_all " << big_all.saved_count << ", min_cut " << big_cut.saved_count
                                      << ", recompute_all " << big_rec.saved_count);
}

TEST_CASE("partition: reductions are saved when needed and never recomputed") {
  for (const policy p : {min_cut, save_all, recompute_all}) {
    const auto plan_ = make_plan(softmax, p);
    CHECK(plan_.saved[4]);       // z = sum(e), read by the backward
    CHECK(!plan_.recompute[1]);  // m = max(x)
    CHECK(!plan_.recompute[4]);
    CHECK(!plan_.saved[11]);  // a backward reduction is computed by the backward
  }
}

TEST_CASE("partition: the cost policy agrees with min_cut on the hand-built graphs when costs are uniform") {
  CHECK(same_plan(make_plan(coscos4, uniform), make_plan(coscos4, min_cut)));
  CHECK(same_plan(make_plan(softmax, uniform), make_plan(softmax, min_cut)));
  CHECK(same_plan(make_plan(linear_tanh, uniform), make_plan(linear_tanh, min_cut)));
  CHECK(same_plan(make_plan(diamond, uniform), make_plan(diamond, min_cut)));
  CHECK(same_plan(make_plan(big, uniform), make_plan(big, min_cut)));
}

TEST_CASE("partition: malformed graphs are rejected") {
  // A forward root that reaches a gradient input.
  const joint_graph<3> grad_in_forward{{in(), gin(), froot(pw(0, 1))}};
  CHECK_THROWS_AS(make_plan(grad_in_forward, min_cut), fusegrad::error);
  // A child index not smaller than the node's own index.
  const joint_graph<2> not_topological{{froot(pw(1)), in()}};
  CHECK_THROWS_AS(make_plan(not_topological, save_all), fusegrad::error);
  // An input with an operand.
  const joint_graph<2> input_with_child{{in(), froot(mk(node_kind::input, 0))}};
  CHECK_THROWS_AS(make_plan(input_with_child, recompute_all), fusegrad::error);
  // An out-of-range negative index.
  const joint_graph<2> negative{{in(), froot(pw(-2))}};
  CHECK_THROWS_AS(make_plan(negative, min_cut), fusegrad::error);
  // A sibling that is the node itself, or out of range.
  joint_graph<3> own_sibling{{in(), pw(0), froot(pw(1))}};
  own_sibling.nodes[1].sibling = 1;
  CHECK_THROWS_AS(make_plan(own_sibling, min_cut), fusegrad::error);
  own_sibling.nodes[1].sibling = 3;
  CHECK_THROWS_AS(make_plan(own_sibling, min_cut), fusegrad::error);
  // An unknown policy kind.
  CHECK_THROWS_AS(make_plan(coscos, policy{static_cast<policy_kind>(9), 0}), fusegrad::error);
  try {
    make_plan(grad_in_forward, min_cut);
  } catch (const fusegrad::error& e) {
    CHECK(std::string(e.what()).find("partition::make_plan") != std::string::npos);
    CHECK(std::string(e.what()).find("grad_input") != std::string::npos);
  }
}
