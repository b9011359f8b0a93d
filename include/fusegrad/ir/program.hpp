#pragma once
/// \file fusegrad/ir/program.hpp
/// A compiled IR graph: a tile program (the run-time counterpart of the fused backend).
///
/// Nodes are grouped into loops: a loop is one pass over memory for the nodes of one stage
/// that share an iteration shape (a reduction's result is readable one stage later). A loop
/// walks its space in tiles of `tile` elements; each instruction runs one op over a whole
/// tile with the op struct's own SIMD `value`, reading operands straight from inputs or from
/// small tile registers that stay in L1. Dispatch is per instruction and tile, never per
/// element, and every op's kernel is compiled once for all graphs.

#include <algorithm>
#include <array>
#include <bit>
#include <limits>

#include "fusegrad/eager/factories.hpp"
#include "fusegrad/ir/graph.hpp"
#include "fusegrad/kernel/tile.hpp"

namespace fusegrad::ir {

namespace detail {
using fusegrad::detail::type_list;

/// Runs op `Op` (its constant `s`) over `n` elements with the tile kernel the compile-time
/// fused backend uses.
template <class Op, Element T>
void op_kernel(T s, const T* a, const T* b, T* out, index_t n) {
  if constexpr (std::is_empty_v<Op>) fusegrad::detail::tile_op(Op{}, a, b, out, n);
  else fusegrad::detail::tile_op(std::bit_cast<Op>(s), a, b, out, n);
}

template <Element T>
using kernel_fn = void (*)(T, const T*, const T*, T*, index_t);

template <Element T, class... Ops>
constexpr std::array<kernel_fn<T>, sizeof...(Ops)> kernel_table(type_list<Ops...>) {
  return {&op_kernel<Ops, T>...};
}
}  // namespace detail

/// A graph lowered to loops of tile instructions; run it on input tensors.
template <Element T>
class program {
 public:
  static constexpr index_t tile = fusegrad::detail::tile_elems;  ///< elements per tile

  /// Compiles the nodes `outputs` of `g` need. Supported broadcasting: operands of one
  /// shape, and operands with one element (scalars, reduction results).
  program(const graph<T>& g, std::vector<int> outputs) : g_(g), outputs_(std::move(outputs)) { lower(); }

  /// Runs the program: one tensor per output, in order.
  std::vector<tensor<T>> run(const std::vector<tensor<T>>& inputs) const {
    if (static_cast<int>(inputs.size()) != g_.num_inputs())
      fusegrad::detail::fail("ir::program", "expected ", g_.num_inputs(), " inputs, got ", inputs.size());
    std::vector<tensor<T>> vals(g_.size());
    for (std::size_t k = 0; k < g_.size(); ++k) {
      const auto& n = g_.nodes()[k];
      if (n.kind != node_kind::input || !need_[k]) continue;
      const tensor<T>& x = inputs[static_cast<std::size_t>(n.index)];
      if (x.shape() != n.sizes)
        fusegrad::detail::fail("ir::program", "input ", n.index, " has shape ", fusegrad::to_string(x.shape()), "; the program was compiled for ",
             fusegrad::to_string(n.sizes));
      vals[k] = x.is_contiguous() ? x : fusegrad::detail::contiguous_copy(x);
    }
    for (const auto& l : loops_) run_loop(l, vals);
    std::vector<tensor<T>> out;
    for (int o : outputs_) out.push_back(vals[static_cast<std::size_t>(o)]);
    return out;
  }

  /// The loops and their instructions, readable (what `FUSEGRAD_LOGS=output_code` prints).
  [[nodiscard]] std::string to_string() const {
    std::string s;
    for (std::size_t l = 0; l < loops_.size(); ++l) {
      s += "loop " + std::to_string(l) + " over " + fusegrad::to_string(loops_[l].space) + ":";
      for (const auto& in : loops_[l].code) s += " %" + std::to_string(in.node);
      s += "\n";
    }
    return s;
  }
  [[nodiscard]] std::size_t num_loops() const noexcept { return loops_.size(); }

 private:
  struct instr {
    int node;
    int reg = -1;  ///< tile register (-1: written to the node's tensor)
  };
  struct loop {
    shape space;
    std::vector<instr> code;  ///< pointwise/expand nodes in order, then reductions
    int registers = 0;
  };

  void lower() {
    const auto& ns = g_.nodes();
    const std::size_t N = ns.size();
    need_.assign(N, false);
    for (int o : outputs_) need_.at(static_cast<std::size_t>(o)) = true;
    for (std::size_t k = N; k-- > 0;)
      if (need_[k]) {
        if (ns[k].a >= 0) need_[static_cast<std::size_t>(ns[k].a)] = true;
        if (ns[k].b >= 0) need_[static_cast<std::size_t>(ns[k].b)] = true;
      }
    // Stages: element-wise nodes join their latest operand; a reduction is readable later.
    std::vector<int> stage(N, 0), avail(N, 0);
    for (std::size_t k = 0; k < N; ++k) {
      if (!need_[k] || ns[k].kind == node_kind::input) continue;
      int in = 0;
      for (int c : {ns[k].a, ns[k].b})
        if (c >= 0) in = std::max(in, avail[static_cast<std::size_t>(c)]);
      stage[k] = in;
      const bool red = ns[k].kind == node_kind::sum || ns[k].kind == node_kind::mean || ns[k].kind == node_kind::max;
      avail[k] = red ? in + 1 : in;
    }
    // Loops: (stage, iteration shape); one-element values get a loop of their own shape.
    auto space_of = [&](std::size_t k) -> const shape& {
      const bool red = ns[k].kind == node_kind::sum || ns[k].kind == node_kind::mean || ns[k].kind == node_kind::max;
      return red ? ns[static_cast<std::size_t>(ns[k].a)].sizes : ns[k].sizes;
    };
    std::vector<int> loop_of(N, -1);
    std::vector<std::pair<int, shape>> keys;
    for (std::size_t k = 0; k < N; ++k) {
      if (!need_[k] || ns[k].kind == node_kind::input) continue;
      const shape& sp = space_of(k);
      int found = -1;
      for (std::size_t q = 0; q < keys.size(); ++q)
        if (keys[q].first == stage[k] && keys[q].second == sp) found = static_cast<int>(q);
      if (found < 0) {
        found = static_cast<int>(keys.size());
        keys.emplace_back(stage[k], sp);
      }
      loop_of[k] = found;
    }
    // Order loops so that every loop runs after the loops it reads (stage order, and within
    // a stage a one-element loop before the loops that broadcast its values).
    const std::size_t L = keys.size();
    std::vector<std::vector<bool>> dep(L, std::vector<bool>(L, false));
    for (std::size_t k = 0; k < N; ++k)
      if (loop_of[k] >= 0)
        for (int c : {ns[k].a, ns[k].b})
          if (c >= 0 && loop_of[static_cast<std::size_t>(c)] >= 0 && loop_of[static_cast<std::size_t>(c)] != loop_of[k])
            dep[static_cast<std::size_t>(loop_of[k])][static_cast<std::size_t>(loop_of[static_cast<std::size_t>(c)])] = true;
    std::vector<int> order;
    std::vector<bool> placed(L, false);
    while (order.size() < L) {
      int pick = -1;
      for (std::size_t q = 0; q < L; ++q) {
        if (placed[q]) continue;
        bool ready = true;
        for (std::size_t r = 0; r < L; ++r) ready = ready && (!dep[q][r] || placed[r]);
        if (ready && (pick < 0 || keys[q].first < keys[static_cast<std::size_t>(pick)].first)) pick = static_cast<int>(q);
      }
      placed[static_cast<std::size_t>(pick)] = true;
      order.push_back(pick);
    }
    store_.assign(N, false);
    for (int o : outputs_) store_[static_cast<std::size_t>(o)] = true;
    for (std::size_t k = 0; k < N; ++k) {
      if (!need_[k] || ns[k].kind == node_kind::input) continue;
      const bool red = ns[k].kind == node_kind::sum || ns[k].kind == node_kind::mean || ns[k].kind == node_kind::max;
      if (red) store_[k] = true;
      for (int c : {ns[k].a, ns[k].b}) {
        if (c < 0) continue;
        const auto u = static_cast<std::size_t>(c);
        if (ns[u].kind != node_kind::input && loop_of[u] != loop_of[k]) store_[u] = true;
        const shape& cs = ns[u].sizes;
        if (ns[k].kind == node_kind::pointwise && numel(cs) != 1 && cs != ns[k].sizes)
          fusegrad::detail::fail("ir::program", "broadcasting ", fusegrad::to_string(cs), " to ", fusegrad::to_string(ns[k].sizes),
               " is not supported by the tile interpreter yet; expected equal shapes or one element");
      }
    }
    // Instructions and tile registers (reused once their last reader in the loop has run).
    for (int q : order) {
      loop l;
      l.space = keys[static_cast<std::size_t>(q)].second;
      std::vector<int> members;
      for (std::size_t k = 0; k < N; ++k)
        if (loop_of[k] == q) members.push_back(static_cast<int>(k));
      std::vector<int> last_use(N, -1);
      for (std::size_t p = 0; p < members.size(); ++p)
        for (int c : {ns[static_cast<std::size_t>(members[p])].a, ns[static_cast<std::size_t>(members[p])].b})
          if (c >= 0) last_use[static_cast<std::size_t>(c)] = static_cast<int>(p);
      std::vector<int> reg(N, -1), free_regs;
      for (std::size_t p = 0; p < members.size(); ++p) {
        const auto k = static_cast<std::size_t>(members[p]);
        instr in{members[p]};
        const bool red = ns[k].kind == node_kind::sum || ns[k].kind == node_kind::mean || ns[k].kind == node_kind::max;
        if (!red && !store_[k]) {
          if (free_regs.empty()) free_regs.push_back(l.registers++);
          in.reg = free_regs.back();
          free_regs.pop_back();
          reg[k] = in.reg;
        }
        for (int c : {ns[k].a, ns[k].b})
          if (c >= 0 && reg[static_cast<std::size_t>(c)] >= 0 && last_use[static_cast<std::size_t>(c)] == static_cast<int>(p))
            free_regs.push_back(reg[static_cast<std::size_t>(c)]);
        l.code.push_back(in);
      }
      loops_.push_back(std::move(l));
    }
  }

  void run_loop(const loop& l, std::vector<tensor<T>>& vals) const {
    const auto& ns = g_.nodes();
    static constexpr auto kernels = detail::kernel_table<T>(op_table<T>{});
    const index_t total = numel(l.space);
    for (const auto& in : l.code) {
      const auto& n = ns[static_cast<std::size_t>(in.node)];
      if (in.reg < 0 && n.kind != node_kind::sum && n.kind != node_kind::mean && n.kind != node_kind::max)
        vals[static_cast<std::size_t>(in.node)] = fusegrad::detail::empty<T>(n.sizes);
    }
    thread_local std::vector<T> regbuf;  // grows only: no allocation per run
    const auto need = static_cast<std::size_t>(std::max(l.registers, 1) * tile);
    if (regbuf.size() < need) regbuf.resize(need);
    T* const regs = regbuf.data();
    std::vector<T> acc(l.code.size());
    for (std::size_t p = 0; p < l.code.size(); ++p) {
      const auto kind = ns[static_cast<std::size_t>(l.code[p].node)].kind;
      acc[p] = kind == node_kind::max ? -std::numeric_limits<T>::infinity() : T(0);
    }
    // One-element operands read from outside the loop are splatted into a tile once.
    std::vector<std::vector<T>> splats(ns.size());
    auto splat = [&](std::size_t c) -> const T* {
      if (splats[c].empty()) splats[c].assign(static_cast<std::size_t>(tile), vals[c].data_ptr()[0]);
      return splats[c].data();
    };
    std::vector<const T*> where(ns.size(), nullptr);  // current tile of each in-loop value
    for (index_t t0 = 0; t0 < std::max<index_t>(total, 0); t0 += tile) {
      const index_t n = std::min(tile, total - t0);
      auto src = [&](int c) -> const T* {
        const auto u = static_cast<std::size_t>(c);
        if (where[u]) return where[u];
        if (vals[u].numel() == 1 && total != 1) return splat(u);
        return vals[u].data_ptr() + t0;
      };
      for (std::size_t p = 0; p < l.code.size(); ++p) {
        const instr& in = l.code[p];
        const auto k = static_cast<std::size_t>(in.node);
        const auto& nd = ns[k];
        T* dst = in.reg >= 0 ? regs + in.reg * tile : nullptr;
        switch (nd.kind) {
          case node_kind::pointwise: {
            if (!dst) dst = vals[k].data_ptr() + t0;
            kernels[static_cast<std::size_t>(nd.op)](nd.scalar, src(nd.a), nd.b >= 0 ? src(nd.b) : nullptr, dst, n);
            where[k] = dst;
            break;
          }
          case node_kind::expand: {
            if (!dst) dst = vals[k].data_ptr() + t0;
            std::fill(dst, dst + n, vals[static_cast<std::size_t>(nd.a)].data_ptr()[0]);
            where[k] = dst;
            break;
          }
          case node_kind::sum:
          case node_kind::mean: {
            const T* s = src(nd.a);
            T a = acc[p];
            for (index_t i = 0; i < n; ++i) a += s[i];
            acc[p] = a;
            break;
          }
          case node_kind::max: {
            const T* s = src(nd.a);
            T a = acc[p];
            for (index_t i = 0; i < n; ++i) a = lanes::max(a, s[i]);
            acc[p] = a;
            break;
          }
          case node_kind::input: break;
        }
      }
      for (const auto& in : l.code) where[static_cast<std::size_t>(in.node)] = nullptr;
    }
    for (std::size_t p = 0; p < l.code.size(); ++p) {
      const auto k = static_cast<std::size_t>(l.code[p].node);
      const auto kind = ns[k].kind;
      if (kind != node_kind::sum && kind != node_kind::mean && kind != node_kind::max) continue;
      if (kind == node_kind::max && total == 0) fusegrad::detail::fail("max", "max of an empty tensor has no value");
      T r = acc[p];
      if (kind == node_kind::mean) r = total == 0 ? std::numeric_limits<T>::quiet_NaN() : r / static_cast<T>(total);
      vals[k] = fusegrad::full<T>(shape{}, r);
    }
  }

  graph<T> g_;
  std::vector<int> outputs_;
  std::vector<bool> need_, store_;
  std::vector<loop> loops_;
};

/// Reverse mode on an IR graph, at run time, with each op's own derivative rule: appends
/// to `g` the backward of `output` seeded by a new input (the output's gradient) and returns
/// the node of each of `wrt`'s gradients (-1: no path).
template <Element T>
std::vector<int> backward(graph<T>& g, int output, const std::vector<int>& wrt) {
  const std::size_t N = g.size();
  std::vector<int> adj(N, -1);
  adj[static_cast<std::size_t>(output)] = g.add_input(g.at(output).sizes);
  auto add_to = [&](int k, int contribution) {
    // Sum a broadcast contribution down to the operand's shape (one-element operands only).
    if (g.at(contribution).sizes != g.at(k).sizes) {
      if (numel(g.at(k).sizes) != 1)
        fusegrad::detail::fail("ir::backward", "summing a gradient of shape ", fusegrad::to_string(g.at(contribution).sizes), " to ",
             fusegrad::to_string(g.at(k).sizes), " is not supported yet");
      contribution = g.add_reduction(node_kind::sum, contribution);
      if (!g.at(k).sizes.empty()) contribution = g.add_expand(contribution, g.at(k).sizes);
    }
    auto& a = adj[static_cast<std::size_t>(k)];
    a = a < 0 ? contribution : (value<T>{&g, a} + value<T>{&g, contribution}).id;
  };
  for (std::size_t k = N; k-- > 0;) {
    const int gk = adj[k];
    if (gk < 0) continue;
    const node<T> n = g.at(static_cast<int>(k));  // a copy: appending may reallocate
    const value<T> gv{&g, gk}, y{&g, static_cast<int>(k)};
    switch (n.kind) {
      case node_kind::input: break;
      case node_kind::pointwise:
        [&]<class... Ops>(fusegrad::detail::type_list<Ops...>) {
          int i = 0;
          (
              [&] {
                if (i++ != n.op) return;
                const Ops op = [&] {
                  if constexpr (std::is_empty_v<Ops>) return Ops{};
                  else return std::bit_cast<Ops>(n.scalar);
                }();
                const value<T> x0{&g, n.a};
                if constexpr (fusegrad::detail::has_unary_derivative<Ops, value<T>>) {
                  add_to(n.a, op.derivative(x0, y, gv).id);
                } else if constexpr (fusegrad::detail::has_binary_derivative<Ops, value<T>>) {
                  const value<T> x1{&g, n.b};
                  const int da = op.da(x0, x1, y, gv).id;
                  const int db = op.db(x0, x1, y, gv).id;
                  add_to(n.a, da);
                  add_to(n.b, db);
                }
              }(),
              ...);
        }(op_table<T>{});
        break;
      case node_kind::sum: add_to(n.a, g.add_expand(gk, g.at(n.a).sizes)); break;
      case node_kind::mean: {
        const T cnt = static_cast<T>(std::max<index_t>(numel(g.at(n.a).sizes), 1));
        add_to(n.a, g.add_expand((gv / cnt).id, g.at(n.a).sizes));
        break;
      }
      case node_kind::max: {
        const value<T> x{&g, n.a};
        const value<T> ye{&g, g.add_expand(static_cast<int>(k), g.at(n.a).sizes)};
        const value<T> mask = eq(x, ye);
        const value<T> count{&g, g.add_expand(sum(mask).id, g.at(n.a).sizes)};
        const value<T> ge{&g, g.add_expand(gk, g.at(n.a).sizes)};
        add_to(n.a, (ge * mask / count).id);
        break;
      }
      case node_kind::expand: add_to(n.a, sum(gv).id); break;
    }
  }
  std::vector<int> out;
  for (int w : wrt) out.push_back(adj.at(static_cast<std::size_t>(w)));
  return out;
}

}  // namespace fusegrad::ir
