#pragma once
/// \file fusegrad/kernel/schedule.hpp
/// Fusion groups, decided at compile time (Inductor's scheduler).
///
/// The canonical nodes a program evaluates are assigned to *stages*. Stage s runs the
/// matrix products whose operands are ready, then ONE loop over memory that loads what it
/// needs, evaluates every element-wise node of the stage in registers, stores the values
/// later stages (or the caller) read, and accumulates every reduction of the stage.
/// Element-wise nodes join the stage of their latest operand; a reduction's result, a matrix
/// product and a broadcast of a reduced value (`unreduce`) are available one stage later.

#include <algorithm>
#include <array>
#include <utility>

#include "fusegrad/compile/analysis.hpp"
#include "fusegrad/core/node_kinds.hpp"
#include "fusegrad/expr/expr.hpp"

namespace fusegrad::detail {

template <std::size_t M>
struct schedule {
  std::array<role, M> roles{};
  std::array<int, M> stage{};   ///< loop in which the node is computed / accumulated
  std::array<int, M> avail{};   ///< first loop that can read the value
  std::array<bool, M> store{};  ///< an element-wise value written to memory
  int stages = 0;
};

template <class A, const auto& Active, const auto& Keep>
// NOLINTNEXTLINE(readability-function-cognitive-complexity): one case per node kind, then the stores
constexpr schedule<A::M> make_schedule() {
  constexpr std::size_t M = A::M;
  schedule<M> s{};
  const auto& g = A::cg;
  auto is_mem = [&](std::size_t c) { return s.roles[c] != role::compute; };  // lives in memory
  for (std::size_t c = 0; c < M; ++c) {
    const bool active = Active[c];
    const gkind k = g.kind[c];
    if (!active || k == gkind::input || k == gkind::grad_input) {
      bool used = active || Keep[c];
      for (std::size_t p = c + 1; p < M && !used; ++p)
        if (Active[p])
          for (int ch : g.children[p]) used = used || ch == static_cast<int>(c);
      s.roles[c] = used ? role::leaf : role::none;
      s.stage[c] = 0;
      s.avail[c] = 0;
      continue;
    }
    int in = 0;      // latest stage an operand becomes readable, as a register or from memory
    int in_mem = 0;  // latest stage an operand is readable from memory
    for (int ch : g.children[c]) {
      if (ch < 0) continue;
      const auto u = static_cast<std::size_t>(ch);
      in = std::max(in, s.avail[u]);
      in_mem = std::max(in_mem, is_mem(u) ? s.avail[u] : s.avail[u] + 1);
    }
    s.roles[c] = role_of(k);
    switch (s.roles[c]) {
      case role::compute: s.stage[c] = s.avail[c] = in; break;
      case role::reduce:
        s.stage[c] = in;
        s.avail[c] = in + 1;
        break;
      default:  // unreduce; matmul, which runs before loop `in_mem`
        s.stage[c] = s.avail[c] = in_mem;
        break;
    }
  }
  // Values read from memory must be stored: operands of matmul/unreduce, values read by a
  // later loop, and kept values.
  for (std::size_t c = 0; c < M; ++c) {
    if (s.roles[c] == role::none || s.roles[c] == role::leaf) continue;
    for (int ch : g.children[c]) {
      if (ch < 0) continue;
      const auto u = static_cast<std::size_t>(ch);
      if (s.roles[u] != role::compute) continue;
      const bool later = s.roles[c] == role::compute || s.roles[c] == role::reduce ? s.stage[c] > s.stage[u] : true;
      if (later) s.store[u] = true;
    }
    if (Keep[c] && s.roles[c] == role::compute) s.store[c] = true;
    s.stages = std::max(s.stages, s.stage[c] + 1);
  }
  return s;
}

template <class A, const auto& Active, const auto& Keep>
inline constexpr auto schedule_v = make_schedule<A, Active, Keep>();

/// The forward node whose shape a `sumto` node of type `E` takes (-1: not a `sumto`).
template <class E>
inline constexpr int sumto_source = -1;
template <std::size_t K, class U>
inline constexpr int sumto_source<sumto_expr<K, U>> = static_cast<int>(K);

/// Whether canonical node `c` of `A` is a `sumto` to the shape of a reduction's output.
template <class A>
constexpr bool sums_to_reduced(std::size_t c) {
  constexpr auto sources = []<std::size_t... C>(std::index_sequence<C...>) {
    return std::array<int, A::M>{sumto_source<typename A::template node_t<C>>...};
  }
  (std::make_index_sequence<A::M>{});
  const int k = sources[c];
  return k >= 0 && A::cg.kind[static_cast<std::size_t>(k)] == gkind::reduction;
}

/// Analysis `A` with every `sumto` node read as the identity, as a custom node is (its value
/// is its operand's): the graph a pass runs when no gradient it sums to an operand's shape
/// was broadcast (every `sumto` keeps its operand's shape: the usual case, operands of one
/// shape). Its schedule needs no loop boundary after such a gradient, so the sum of a
/// weight's gradient terms over ten layers is added up in registers in the same loop instead
/// of stored ten times and read back by a second one. The values are those of the general
/// schedule bit for bit: a sum to the same shape copies its operand. A `sumto` to the shape
/// of a reduction's output stays a sum (`sums_to_reduced`): the gradient of a reduced value
/// broadcast back (`e / sum(e, -1, true)`) is a real sum wherever the reduction reduced
/// anything, and kept, it leaves the other sums of the pass (softmax's) free to be the identity.
template <class A>
struct unreduced : A {
  /// The canonical nodes' facts the loops read (kind, operands, cost, sibling), `sumto` made
  /// `custom` but where it sums to a reduction's shape.
  struct graph {
    std::size_t count = A::M;
    std::array<gkind, A::M> kind{};
    std::array<std::array<int, 3>, A::M> children{};
    std::array<int, A::M> cost{};
    std::array<int, A::M> sibling{};
  };
  static constexpr graph cg = [] {
    graph g;
    for (std::size_t c = 0; c < A::M; ++c) {
      g.kind[c] = A::cg.kind[c] == gkind::sumto && !sums_to_reduced<A>(c) ? gkind::custom : A::cg.kind[c];
      g.children[c] = A::cg.children[c];
      g.cost[c] = A::cg.cost[c];
      g.sibling[c] = A::cg.sibling[c];
    }
    return g;
  }();
};

/// Whether pass `Active` of `A` reads a `sumto` node's value in another node (the case where
/// `unreduced<A>` can have fewer loops).
template <class A, const auto& Active>
constexpr bool reads_a_sum_to_shape() {
  for (std::size_t p = 0; p < A::M; ++p)
    if (Active[p])
      for (int ch : A::cg.children[p])
        if (ch >= 0 && A::cg.kind[static_cast<std::size_t>(ch)] == gkind::sumto) return true;
  return false;
}

/// For every stage, which nodes its loop reads from memory: one pass over the graph (asking
/// node by node is quadratic, and was a large part of the compile time of big graphs).
template <class A, const auto& Active, const auto& Keep>
struct stage_loads {
  static constexpr auto& sch = schedule_v<A, Active, Keep>;
  static constexpr auto value = [] {
    std::array<std::array<bool, A::M>, (sch.stages > 0 ? static_cast<std::size_t>(sch.stages) : 1)> l{};
    for (std::size_t p = 0; p < A::M; ++p) {
      const role rp = sch.roles[p];
      if (!(rp == role::compute || rp == role::reduce)) continue;
      const auto S = static_cast<std::size_t>(sch.stage[p]);
      for (int ch : A::cg.children[p]) {
        if (ch < 0) continue;
        const auto c = static_cast<std::size_t>(ch);
        const role r = sch.roles[c];
        if ((r == role::compute && sch.stage[c] == sch.stage[p]) || r == role::none) continue;
        l[S][c] = true;
      }
    }
    return l;
  }();
};

/// The positions where a mask is true, as an array of just that many: `MaskFn` is a
/// captureless lambda returning the mask (a mask is never a template argument by value: see
/// `evaluate_pass` in fusegrad/compile/compiled_graph.hpp).
template <class MaskFn>
constexpr auto index_list(MaskFn) {
  constexpr auto mask = MaskFn{}();
  std::array<std::size_t, static_cast<std::size_t>(std::count(mask.begin(), mask.end(), true))> r{};
  std::size_t n = 0;
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) r[n++] = i;
  return r;
}

}  // namespace fusegrad::detail
