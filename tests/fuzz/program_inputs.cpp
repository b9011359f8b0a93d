// Run-time programs: op names, sizes, inputs and loss weights, and the shape sets a program
// runs with (see program.hpp).
#include "program_internal.hpp"

namespace fuzz {

namespace {

// clang-format off
constexpr const char* op_names[] = {
  "neg", "abs", "sqrt", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu",
  "tan", "atan", "sinh", "asinh", "softplus", "silu", "gelu", "erf", "log1p", "expm1", "square", "reciprocal", "rsqrt",
  "user_softsign", "user_function",
  "step", "sign",
  "add_s", "sub_s", "rsub_s", "mul_s", "div_s", "rdiv_s", "pow_s",
  "add", "sub", "mul", "div", "maximum", "pow", "minimum", "atan2", "hypot", "user_bilinear", "gt", "ge", "lt", "le", "eq", "ne",
  "sum_all", "mean_all", "max_all", "sum_dims", "mean_dims", "max_dims",
  "softmax_dim", "log_softmax_dim", "logsumexp_dim", "layer_norm_last", "rms_norm_last",
  "reshape_flat", "reshape_merge", "view_flat", "expand_as", "permute", "transpose", "select", "slice", "unsqueeze",
  "squeeze", "contiguous", "clone", "cat", "detach",
  "matmul", "mm", "bmm", "linear",
  "branch", "graph_break", "hook", "retain_grad", "input",
  "bad_reshape", "bad_select", "bad_dim", "bad_permute", "bad_item", "bad_expand", "bad_hook", "bad_sum_dup", "bad_view",
};
// clang-format on
static_assert(std::size(op_names) == static_cast<std::size_t>(op::count_));

}  // namespace

const char* op_name(op k) { return k < op::count_ ? op_names[static_cast<std::size_t>(k)] : "?"; }

const symshape& program::shape_of(int v) const { return code[static_cast<std::size_t>(v)].shape; }
bool program::rg_of(int v) const { return code[static_cast<std::size_t>(v)].rg; }
bool program::exact_of(int v) const { return code[static_cast<std::size_t>(v)].exact; }

fg::index_t size_of(const program& p, const shape_set& ss, int sym) {
  if (sym == lit1) return 1;
  const symbol& s = p.syms[static_cast<std::size_t>(sym)];
  switch (s.kind) {
    case symbol::free: return ss[static_cast<std::size_t>(sym)];
    case symbol::plus: return size_of(p, ss, s.base) + s.add;
    case symbol::product: {
      fg::index_t n = 1;
      for (int f : s.of) n *= size_of(p, ss, f);
      return n;
    }
    case symbol::sliced: {  // Python slice semantics, as fg::slice
      const fg::index_t n = size_of(p, ss, s.base);
      auto clamp = [n](fg::index_t v) { return std::clamp<fg::index_t>(v < 0 ? v + n : v, 0, n); };
      const fg::index_t b = clamp(s.start), e = std::max(clamp(s.stop), b);
      return (e - b + s.step - 1) / s.step;
    }
    case symbol::sum: return size_of(p, ss, s.of[0]) + size_of(p, ss, s.of[1]);
  }
  return 0;
}
fg::shape concrete(const program& p, const shape_set& ss, const symshape& s) {
  fg::shape r;
  for (int d : s) r.push_back(size_of(p, ss, d));
  return r;
}

std::uint64_t input_seed(const program& p, std::size_t i, int set_index) {
  return (p.seed * 1000003u + i * 7919u + static_cast<std::uint64_t>(set_index) * 104729u) % 1000000007u;
}

std::vector<D> make_inputs(const program& p, const shape_set& ss, int set_index) {
  std::vector<D> r;
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    const input& in = p.inputs[i];
    D t = fg::randn<double>(concrete(p, ss, in.shape), input_seed(p, i, set_index));
    const fg::index_t n = t.numel();
    if (n > 0)
      for (const auto& [pos, v] : in.specials) t.data()[special_index(pos, n)] = v;
    if (in.rg) t.requires_grad(true);
    r.push_back(t);
  }
  return r;
}

D loss_weight(const program& p, std::size_t i, const fg::shape& s) {
  return fg::randn<double>(s, (p.seed * 31u + i * 977u + 5u) % 1000000007u);
}

std::vector<shape_set> make_shape_sets(const program& p) {
  rng r(p.seed ^ 0xABCDEF12345ull);
  const std::size_t n = p.syms.size();
  auto draw = [&](bool big_ok) -> fg::index_t {
    const int w = r.below(100);
    if (w < 4) return 0;
    if (w < 16) return 1;
    if (w < 60) return 2 + r.below(4);
    if (w < 90 || !big_ok) return 6 + r.below(6);
    static constexpr fg::index_t big[] = {17, 33, 64, 100, 257, 300};
    return r.pick(big);
  };
  std::vector<shape_set> sets(3, shape_set(n, 0));
  const int big_sym = r.chance(0.3) ? r.below(static_cast<int>(std::max<std::size_t>(n, 1))) : -1;
  for (std::size_t s = 0; s < n; ++s) sets[0][s] = draw(static_cast<int>(s) == big_sym);
  for (int k = 1; k < 3; ++k) {
    for (std::size_t s = 0; s < n; ++s) {
      const int w = r.below(100);
      fg::index_t v = sets[static_cast<std::size_t>(k) - 1][s];
      if (w < 45) v = std::max<fg::index_t>(2, draw(static_cast<int>(s) == big_sym));  // a new size >= 2: dynamic
      else if (w < 52) v = r.below(2);                                                 // 0 or 1: specialised
      sets[static_cast<std::size_t>(k)][s] = v;
    }
  }
  // At most 2^18 elements in any value: halve the largest size until that holds.
  for (shape_set& ss : sets) {
    for (int guard = 0; guard < 64; ++guard) {
      double most = 0;
      for (const instr& i : p.code) {
        double n = 1;
        for (int d : i.shape) n *= static_cast<double>(size_of(p, ss, d));
        most = std::max(most, n);
      }
      if (most <= double(1 << 18)) break;
      std::size_t big = 0;
      for (std::size_t s = 0; s < n; ++s)
        if (p.syms[s].kind == symbol::free && ss[s] > ss[big]) big = s;
      ss[big] = std::max<fg::index_t>(2, ss[big] / 2);
    }
  }
  return sets;
}

}  // namespace fuzz
