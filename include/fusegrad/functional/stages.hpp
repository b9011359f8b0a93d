#pragma once
/// \file fusegrad/functional/stages.hpp
/// Which subexpressions of an element-wise part the span engine computes a tile ahead: the
/// operand of a slow op (a transcendental function, `slow_op`) that holds a slow op itself, on
/// no path more than one.
/// Evaluated batch by batch in one body, `cos(cos(x))` makes every batch wait on two slow ops
/// in turn; computed over a tile first (its value trees into an L1 buffer), the inner `cos`
/// runs one batch after another with nothing to wait on, and the outer one reads its trees
/// back. The same ops on the same lanes: the same bits. In a longer chain only the innermost
/// such operand is staged: a stage holding another would copy the inner one's tree into its
/// own, and on a Zen 4 core those stores cost more than the wait they save (three `tanh` with
/// two nested stages ran slower than none; with the inner one alone, faster).

#include <algorithm>
#include <array>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "fusegrad/core/simd.hpp"
#include "fusegrad/core/type_list.hpp"
#include "fusegrad/functional/eval.hpp"
#include "fusegrad/functional/values.hpp"
#include "fusegrad/ops/op.hpp"

namespace fusegrad::detail::fn {

/// Subexpression `S` of an element-wise part: its first mark `B` (`fwd<B>` evaluates it), and
/// the reduction whose part holds it (`R`; -1 for an element-wise output).
template <int B, class S, int R>
struct stage {
  static constexpr int base = B, red = R;
  using type = S;
};

/// Whether `E` is a node the span engine's batches compute (not a leaf, a hoisted
/// subexpression or a reduction's value).
template <class E>
inline constexpr bool computed_in_batch_v = !is_arg_v<E> && !is_constant_v<E> && !hoistable_v<E> && !is_element_v<E> &&
                                            !is_real_reduction_v<E> && !is_range_stat_v<E>;

/// Whether node `E` computes a slow op.
template <class E>
constexpr bool slow_node() {
  if constexpr (requires { std::declval<const E&>().op; })
    return slow_op<std::remove_cvref_t<decltype(std::declval<const E&>().op)>>();
  else return false;
}

/// The most slow ops on one path from `E` down to its leaves, inside an element-wise part.
template <class E>
constexpr int slow_depth() {
  if constexpr (!computed_in_batch_v<E>) {
    return 0;
  } else {
    return int{slow_node<E>()} + [&]<std::size_t... J>(std::index_sequence<J...>) {
      return std::max({0, slow_depth<child_t<E, J>>()...});
    }
    (std::make_index_sequence<arity_v<E>>{});
  }
}

/// How many times type `S` occurs in `E`'s tree. A stage is found by its type: one that
/// occurs twice (`cos(x * c)` with two constants) is not staged.
template <class S, class E>
constexpr int occurrences() {
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return (int{std::is_same_v<S, E>} + ... + occurrences<S, child_t<E, J>>());
  }
  (std::make_index_sequence<arity_v<E>>{});
}

/// Whether child `J` of `E` is a stage: `E` is slow and the child holds a slow op, on no path
/// more than one (no stage inside it).
template <class E, std::size_t J>
inline constexpr bool staged_child_v = slow_node<E>() && (slow_depth<child_t<E, J>>() == 1);
/// Child `J` of `E` (first mark `B`, in the part of reduction `R`) as a list of its stage, if it is one.
template <int B, int R, class E, std::size_t J>
using child_stage =
    std::conditional_t<staged_child_v<E, J>, type_list<stage<child_base<E, J>(B), child_t<E, J>, R>>, type_list<>>;

/// The stages inside `E` (first mark `B`, in the part of reduction `R`), in the order of the
/// walk: each child of a slow node that holds one slow op on its longest path.
template <int B, int R, class E>
constexpr auto stages_in() {
  if constexpr (slow_depth<E>() < 2) {
    return type_list<>{};
  } else {
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return (type_list<>{} + ... + (stages_in<child_base<E, J>(B), R, child_t<E, J>>() + child_stage<B, R, E, J>{}));
    }
    (std::make_index_sequence<arity_v<E>>{});
  }
}
/// The stages of every element-wise part of `E` (first mark `B`).
template <int B, class E>
constexpr auto part_stages() {
  if constexpr (info<E>::elementwise) return stages_in<B, -1, E>();
  else if constexpr (is_real_reduction_v<E>) return stages_in<B + 1, B, child_t<E, 0>>();
  else return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return (type_list<>{} + ... + part_stages<child_base<E, J>(B), child_t<E, J>>());
    }
  (std::make_index_sequence<arity_v<E>>{});
}
/// Those whose type occurs once in `E`.
template <class E, class... S>
constexpr auto unique_stages(type_list<S...>) {
  return (type_list<>{} + ... +
          std::conditional_t<occurrences<typename S::type, E>() == 1, type_list<S>, type_list<>>{});
}

/// Node `S` of `e`'s tree (which holds one).
template <class S, class E>
constexpr const S* find_node(const E& e) {
  if constexpr (std::is_same_v<S, E>) {
    return &e;
  } else {
    const S* p = nullptr;
    [&]<std::size_t... J>(std::index_sequence<J...>) { ((p = p ? p : find_node<S>(child<J>(e))), ...); }
    (std::make_index_sequence<arity_v<E>>{});
    return p;
  }
}

/// The most bytes a tile's staged value trees may take: well within L1, beside the tile's
/// buffer of sums and the operands' lines.
inline constexpr std::size_t stage_buffer_bytes = std::size_t{16} * 1024;

/// No stages: every node computed in the batch.
struct no_stages {
  static constexpr int count = 0;
  template <class E>
  static constexpr int index = -1;
};

/// The value trees of stages `S...` for one tile of `Vs` batches, each computed in context `Ctx`
/// (the engine's batch context that stages nothing): raw storage, as a tree's values would be
/// zeroed first (`num`'s member initialiser); a stage's batch is written (`put`) before it is
/// read (`get`).
template <class Vs, class Ctx, class... S>
struct stage_buffers {
  static constexpr int count = static_cast<int>(sizeof...(S));
  static constexpr std::size_t batches = static_cast<std::size_t>(tile_elems) / simd<typename kind<Vs>::elem>::size;
  template <class St>
  using tree = decltype(fwd<St::base>(std::declval<const Ctx&>(), std::declval<const typename St::type&>()));
  /// Which stage node type `E` is (-1: none).
  template <class E>
  static constexpr int index = type_index<E>(type_list<typename S::type...>{});
  /// Stage `K`'s trees.
  template <int K>
  using stage_at = std::tuple_element_t<static_cast<std::size_t>(K), std::tuple<S...>>;

  /// Stage `K`'s tree at batch `b` of the tile, `make()`'s (built in place: a tree built first
  /// and copied in went through the stack): written, then read.
  template <int K, class Make>
  [[gnu::always_inline]] void put(std::size_t b, const Make& make) {
    using Tree = tree<stage_at<K>>;
    static_assert(std::is_same_v<decltype(make()), Tree> && std::is_trivially_copyable_v<Tree>,
                  "fusegrad (internal): a stage's value tree is the type its context computes");
    ::new (static_cast<void*>(bytes + offset<K> + b * sizeof(Tree))) Tree(make());
  }
  template <int K>
  const auto& get(std::size_t b) const {
    return std::launder(reinterpret_cast<const tree<stage_at<K>>*>(bytes + offset<K>))[b];
  }

 private:
  /// Where stage `K`'s trees start: each stage's trees after the last's, each aligned as a batch.
  static constexpr std::size_t align = alignof(simd<typename kind<Vs>::elem>);
  static constexpr std::array<std::size_t, sizeof...(S) + 1> offsets = [] {
    std::array<std::size_t, sizeof...(S) + 1> o{};
    std::size_t k = 0;
    ((o[k + 1] = o[k] + (sizeof(tree<S>) * batches + align - 1) / align * align, ++k), ...);
    return o;
  }();
  template <int K>
  static constexpr std::size_t offset = offsets[static_cast<std::size_t>(K)];
  alignas(align) unsigned char bytes[offsets.back()];
};

}  // namespace fusegrad::detail::fn
