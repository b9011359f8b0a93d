// Run-time programs: generator, interpreter, printer (see program.hpp).
#include "program.hpp"
#include "user_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

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
  "reshape_flat", "reshape_merge", "view_flat", "expand_as", "permute", "transpose", "select", "slice", "unsqueeze",
  "squeeze", "contiguous", "clone", "cat", "detach",
  "matmul", "mm", "bmm", "linear",
  "branch", "graph_break", "hook", "retain_grad", "input",
  "bad_reshape", "bad_select", "bad_dim", "bad_permute", "bad_item", "bad_expand", "bad_hook", "bad_sum_dup", "bad_view",
};
// clang-format on
static_assert(std::size(op_names) == static_cast<std::size_t>(op::count_));

bool is_unary(op k) { return k <= op::sign; }
bool is_scalar(op k) { return k >= op::add_s && k <= op::pow_s; }
bool is_binary(op k) { return k >= op::add && k <= op::ne; }
bool is_compare(op k) { return k >= op::gt && k <= op::ne; }
bool no_grad_op(op k) { return k == op::step || k == op::sign || is_compare(k) || k == op::detach; }

constexpr int lit1 = -1;
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

namespace {
fg::index_t special_index(double pos, fg::index_t n) {
  return std::min<fg::index_t>(n - 1, static_cast<fg::index_t>(pos * static_cast<double>(n)));
}
}  // namespace

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

// ---------------------------------------------------------------------------------------
// The interpreter
// ---------------------------------------------------------------------------------------
namespace {
D unary(op k, const D& x, double s) {
  switch (k) {
    case op::neg: return -x;
    case op::abs: return fg::abs(x);
    case op::sqrt: return fg::sqrt(x);
    case op::exp: return fg::exp(x);
    case op::log: return fg::log(x);
    case op::sin: return fg::sin(x);
    case op::cos: return fg::cos(x);
    case op::tanh: return fg::tanh(x);
    case op::sigmoid: return fg::sigmoid(x);
    case op::relu: return fg::relu(x);
    case op::tan: return fg::tan(x);
    case op::atan: return fg::atan(x);
    case op::sinh: return fg::sinh(x);
    case op::asinh: return fg::asinh(x);
    case op::softplus: return fg::softplus(x);
    case op::silu: return fg::silu(x);
    case op::gelu: return fg::gelu(x);
    case op::erf: return fg::erf(x);
    case op::log1p: return fg::log1p(x);
    case op::expm1: return fg::expm1(x);
    case op::square: return fg::square(x);
    case op::reciprocal: return fg::reciprocal(x);
    case op::rsqrt: return fg::rsqrt(x);
    case op::step: return fg::step(x);
    case op::sign: return fg::sign(x);
    case op::add_s: return x + s;
    case op::sub_s: return x - s;
    case op::rsub_s: return s - x;
    case op::mul_s: return x * s;
    case op::div_s: return x / s;
    case op::rdiv_s: return s / x;
    case op::pow_s: return fg::pow(x, s);
    case op::user_softsign: return fg::apply_op(fuzz_softsign_op{}, x);
    case op::user_function: return fg::function<fuzz_softclip_fn>::apply(x);
    default: break;
  }
  fg::detail::fail("fuzz", "not a one-operand op: ", op_name(k));
}
D binary(op k, const D& a, const D& b) {
  switch (k) {
    case op::add: return a + b;
    case op::sub: return a - b;
    case op::mul: return a * b;
    case op::div: return a / b;
    case op::maximum: return fg::maximum(a, b);
    case op::pow: return fg::pow(a, b);
    case op::minimum: return fg::minimum(a, b);
    case op::atan2: return fg::atan2(a, b);
    case op::hypot: return fg::hypot(a, b);
    case op::user_bilinear: return fg::apply_op(fuzz_bilinear_op{0.75}, a, b);
    case op::gt: return fg::gt(a, b);
    case op::ge: return fg::ge(a, b);
    case op::lt: return fg::lt(a, b);
    case op::le: return fg::le(a, b);
    case op::eq: return fg::eq(a, b);
    case op::ne: return fg::ne(a, b);
    default: break;
  }
  fg::detail::fail("fuzz", "not a two-operand op: ", op_name(k));
}

double grad_sum(const D& g) {
  double s = 0;
  for (double e : g.to_vector()) s += e;
  return s;
}

void add_hook(const instr& in, D t, const std::shared_ptr<hook_log>& log) {
  const double k = in.s;
  switch (in.hk) {
    case hook_kind::scale: t.register_hook([k](const D& g) { return g * k; }); break;
    case hook_kind::scale_generic: t.register_hook([k](auto g) { return g * k; }); break;
    case hook_kind::observe:
    case hook_kind::removed: {
      std::weak_ptr<hook_log> w = log;
      const int slot = in.slot;
      const auto id = t.register_hook([w, slot](const D& g) {
        if (auto l = w.lock()) l->observed[static_cast<std::size_t>(slot)].push_back(grad_sum(g));
      });
      if (in.hk == hook_kind::removed) t.remove_hook(id);
      break;
    }
  }
}
}  // namespace

/// The comparisons: 0/1 steps in their operands' difference.
bool is_comparison(op k) {
  return k == op::gt || k == op::ge || k == op::lt || k == op::le || k == op::eq || k == op::ne;
}

/// Ops whose double result goes flat (to a bound, or to 0) for operands far from 0: a finite
/// difference across such a value sees steps of rounding, not the derivative.
bool saturates(op k) {
  switch (k) {
    case op::tanh:
    case op::sigmoid:
    case op::erf:
    case op::softplus:
    case op::silu:
    case op::gelu:
    case op::exp:
    case op::expm1:
    case op::sinh: return true;
    default: return false;
  }
}

std::vector<D> interpret(const program& p, const std::vector<D>& in, const std::shared_ptr<hook_log>& log) {
  std::vector<D> v;
  std::vector<D> retained(static_cast<std::size_t>(p.retained));
  v.reserve(static_cast<std::size_t>(p.n_values()));
  std::uint32_t& f = log->features;
  auto reduction = [&](const D& x, const std::vector<fg::index_t>& dims) {
    fg::index_t n = 1;
    const auto r = static_cast<fg::index_t>(x.dim());
    for (std::size_t d = 0; d < x.dim(); ++d) {
      bool reduced = dims.empty();
      for (fg::index_t k : dims)
        reduced = reduced || k == static_cast<fg::index_t>(d) || k + r == static_cast<fg::index_t>(d);
      if (reduced) n *= x.shape()[d];
    }
    if (n <= 1) f |= n == 0 ? f_reduce_empty : f_reduce_trivial;
  };
  for (const instr& i : p.code) {
    const D A = i.a >= 0 ? v[static_cast<std::size_t>(i.a)] : D{};
    const D B = i.b >= 0 ? v[static_cast<std::size_t>(i.b)] : D{};
    const D C = i.c >= 0 ? v[static_cast<std::size_t>(i.c)] : D{};
    switch (i.k) {
      case op::sum_all:
      case op::mean_all:
      case op::max_all: reduction(A, {}); break;
      case op::sum_dims:
      case op::mean_dims:
      case op::max_dims: reduction(A, i.dims); break;
      case op::branch: reduction(B, {}); break;
      case op::hook:
      case op::retain_grad:
        f |= p.code[static_cast<std::size_t>(i.a)].k == op::input ? f_hook_leaf : f_hook_nonleaf;
        break;
      default: break;
    }
    D r;
    if (is_unary(i.k) || is_scalar(i.k)) {
      r = unary(i.k, A, i.s);
    } else if (is_binary(i.k)) {
      r = binary(i.k, A, B);
      // Equal operands of a comparison sit on its step (two inputs drawn from different seeds
      // can hold one equal value): a finite difference there sees the other side of the step.
      if (log->read_values && r.defined() && is_comparison(i.k) && fg::sum(fg::eq(A.detach(), B.detach())).item() > 0)
        f |= f_on_a_step;
    } else {
      switch (i.k) {
        case op::sum_all: r = fg::sum(A); break;
        case op::mean_all: r = fg::mean(A); break;
        case op::max_all: r = fg::max(A); break;
        case op::sum_dims: r = fg::sum(A, i.dims, i.keepdim); break;
        case op::mean_dims: r = fg::mean(A, i.dims, i.keepdim); break;
        case op::max_dims: r = fg::max(A, i.dims, i.keepdim); break;
        case op::reshape_flat: r = A.reshape({-1}); break;
        case op::reshape_merge: {
          fg::shape s = A.shape();
          const auto d = static_cast<std::size_t>(i.i0);
          s[d] *= s[d + 1];
          s.erase(s.begin() + static_cast<std::ptrdiff_t>(d) + 1);
          r = A.reshape(s);
          break;
        }
        case op::view_flat: r = A.view({-1}); break;
        case op::expand_as: r = A.expand(B.shape()); break;
        case op::permute: r = A.permute(i.dims); break;
        case op::transpose: r = A.transpose(i.i0, i.i1); break;
        case op::select: r = A.select(i.i0, i.i1); break;
        case op::slice: r = A.slice(i.i0, i.i1, i.i2, i.i3); break;
        case op::unsqueeze: r = A.unsqueeze(i.i0); break;
        case op::squeeze: r = A.squeeze(i.i0); break;
        case op::contiguous: r = A.contiguous(); break;
        case op::clone: r = A.clone(); break;
        case op::cat: r = fg::cat(std::vector<D>{A, B}, i.i0); break;
        case op::detach: r = A.detach(); break;
        case op::matmul: r = fg::matmul(A, B); break;
        case op::mm: r = fg::mm(A, B); break;
        case op::bmm: r = fg::bmm(A, B); break;
        case op::linear: r = C.defined() ? fg::linear(A, B, C) : fg::linear(A, B); break;
        case op::branch: r = fg::mean(B).item() > i.s ? unary(i.u0, A, 0.5) : unary(i.u1, A, 0.5); break;
        case op::graph_break:
          fg::graph_break();
          r = A;
          break;
        case op::hook:
          add_hook(i, A, log);
          r = A;
          break;
        case op::retain_grad: {
          D t = A;
          t.retain_grad();
          retained[static_cast<std::size_t>(i.slot)] = t;
          r = A;
          break;
        }
        case op::input: r = in[static_cast<std::size_t>(i.slot)]; break;
        case op::bad_reshape: r = A.reshape({A.numel() + 1}); break;
        case op::bad_select: r = A.select(i.i0, A.size(i.i0)); break;
        case op::bad_dim: r = fg::sum(A, static_cast<fg::index_t>(A.dim()) + 1); break;
        case op::bad_permute: {
          std::vector<fg::index_t> d(A.dim(), 0);
          r = A.permute(d);
          break;
        }
        case op::bad_item: r = A * A.item(); break;
        case op::bad_expand: {
          fg::shape s = A.shape();
          s[static_cast<std::size_t>(i.i0)] += 1;
          r = A.expand(s);
          break;
        }
        case op::bad_hook: {
          D t = A.detach();
          t.register_hook([](const D& g) { return g; });
          r = t;
          break;
        }
        case op::bad_sum_dup: r = fg::sum(A, std::vector<fg::index_t>{i.i0, i.i0}); break;
        case op::bad_view: r = A.view({-1}); break;
        default: fg::detail::fail("fuzz", "unknown op ", op_name(i.k));
      }
    }
    if (r.defined() && r.numel() == 0) f |= f_empty_value;
    if (log->read_values && A.defined() && saturates(i.k))
      for (double x : A.to_vector())
        if (std::abs(x) > 8) {
          f |= f_saturated;
          break;
        }
    if (log->read_values && r.defined())
      for (double x : r.to_vector()) {
        if (x != 0 && std::abs(x) < 1e-150) f |= f_tiny_value;
        if (std::isfinite(x)) log->scale = std::max(log->scale, std::abs(x));
      }
    v.push_back(r);
  }
  std::vector<D> out;
  for (int o : p.outputs) out.push_back(v[static_cast<std::size_t>(o)]);
  for (auto& t : retained) out.push_back(t);
  return out;
}

// ---------------------------------------------------------------------------------------
// The generator
// ---------------------------------------------------------------------------------------
namespace {

std::optional<symshape> broadcast(const symshape& a, const symshape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  symshape r(n, lit1);
  for (std::size_t i = 0; i < n; ++i) {
    const int da = i < a.size() ? a[a.size() - 1 - i] : lit1, db = i < b.size() ? b[b.size() - 1 - i] : lit1;
    int d;
    if (da == lit1) d = db;
    else if (db == lit1 || da == db) d = da;
    else return std::nullopt;
    r[n - 1 - i] = d;
  }
  return r;
}

std::optional<symshape> matmul_shape(const symshape& a, const symshape& b) {
  const std::size_t ra = a.size(), rb = b.size();
  if (ra == 0 || rb == 0) return std::nullopt;
  const int ka = a.back(), kb = rb == 1 ? b[0] : b[rb - 2];
  if (ka != kb) return std::nullopt;
  if (ra == 1 && rb == 1) return symshape{};
  if (ra == 2 && rb == 1) return symshape{a[0]};
  if (ra == 1 && rb == 2) return symshape{b[1]};
  if (ra == 2 && rb == 2) return symshape{a[0], b[1]};
  const symshape A = ra == 1 ? symshape{lit1, a[0]} : a, Bm = rb == 1 ? symshape{b[0], lit1} : b;
  auto batch = broadcast(symshape(A.begin(), A.end() - 2), symshape(Bm.begin(), Bm.end() - 2));
  if (!batch) return std::nullopt;
  symshape out = *batch;
  out.push_back(A[A.size() - 2]);
  out.push_back(Bm.back());
  if (ra == 1) out.erase(out.end() - 2);
  if (rb == 1) out.pop_back();
  return out;
}

class generator {
 public:
  generator(std::uint64_t seed, std::uint64_t index)
      : r_(seed * 0x100000001B3ull + index * 0x9E3779B97F4A7C15ull + 17) {
    p_.seed = (seed * 1000000007ull + index) & 0xFFFFFFFFFFFFull;
  }

  program make() {
    const int n_free = 2 + r_.below(4);
    for (int i = 0; i < n_free; ++i) p_.syms.push_back({});
    special_ = r_.chance(0.15);
    const int n_in = 1 + r_.below(3);
    for (int i = 0; i < n_in; ++i) new_input(random_shape(), true);
    const int n = r_.chance(0.1) ? 12 + r_.below(20) : 2 + r_.below(10);
    const int bad_at = r_.chance(0.06) ? r_.below(n) : -1;
    for (int s = 0; s < n; ++s) {
      if (s == bad_at) add_invalid();
      else add_one();
    }
    // outputs: the last value and up to two others
    p_.outputs.push_back(p_.n_values() - 1);
    const int extra = r_.below(3);
    for (int e = 0; e < extra; ++e) {
      const int v = r_.below(p_.n_values());
      if (std::find(p_.outputs.begin(), p_.outputs.end(), v) == p_.outputs.end()) p_.outputs.push_back(v);
    }
    return std::move(p_);
  }

 private:
  rng r_;
  program p_;
  bool special_ = false;

  int free_sym() {
    std::vector<int> f;
    for (std::size_t i = 0; i < p_.syms.size(); ++i)
      if (p_.syms[i].kind == symbol::free) f.push_back(static_cast<int>(i));
    return r_.pick(f);
  }
  int dim_sym() { return r_.chance(0.2) ? lit1 : free_sym(); }
  symshape random_shape() {
    const int rank = r_.below(5);
    symshape s;
    for (int i = 0; i < rank; ++i) s.push_back(dim_sym());
    return s;
  }
  int derived(symbol s) {
    p_.syms.push_back(std::move(s));
    return static_cast<int>(p_.syms.size()) - 1;
  }
  int product(const symshape& dims) {
    symbol s;
    s.kind = symbol::product;
    for (int d : dims)
      if (d != lit1) s.of.push_back(d);
    if (s.of.empty()) return lit1;
    if (s.of.size() == 1) return s.of[0];
    return derived(std::move(s));
  }
  int new_input(symshape s, bool rg) {
    input in;
    in.shape = std::move(s);
    in.rg = rg;
    if (special_ && r_.chance(0.6)) {
      static constexpr double specials[] = {0.0,
                                            -0.0,
                                            std::numeric_limits<double>::infinity(),
                                            -std::numeric_limits<double>::infinity(),
                                            std::numeric_limits<double>::quiet_NaN(),
                                            1.0,
                                            -1.0,
                                            1e-300,
                                            2.0,
                                            0.5};
      const int k = 1 + r_.below(3);
      for (int i = 0; i < k; ++i) in.specials.emplace_back(r_.uniform(), specials[r_.below(10)]);
    }
    instr i;
    i.k = op::input;
    i.slot = static_cast<int>(p_.inputs.size());
    i.shape = in.shape;
    p_.inputs.push_back(std::move(in));
    push(i, rg, true);
    return p_.n_values() - 1;
  }
  /// A value, the recent ones more likely.
  int pick_value() {
    const int n = p_.n_values();
    if (r_.chance(0.5)) return n - 1 - std::min(n - 1, r_.below(3));
    return r_.below(n);
  }
  template <class Pred>
  int pick_value_if(Pred pred) {
    std::vector<int> c;
    for (int v = 0; v < p_.n_values(); ++v)
      if (pred(v)) c.push_back(v);
    if (c.empty()) return -1;
    if (r_.chance(0.5)) return c.back();
    return r_.pick(c);
  }
  /// Pushes an instruction; fills in the result's metadata from the operands where the
  /// caller left it (shape must be set).
  void push(instr i, bool rg, bool exact, bool contig = true) {
    i.rg = rg;
    i.exact = exact;
    i.contig = contig;
    p_.code.push_back(std::move(i));
  }
  bool rg(int v) const { return p_.rg_of(v); }
  bool ex(int v) const { return p_.exact_of(v); }
  const symshape& sh(int v) const { return p_.shape_of(v); }
  bool contig(int v) const { return p_.code[static_cast<std::size_t>(v)].contig; }

  /// A second operand that broadcasts with `a`: an existing value or a new input.
  int partner(int a) {
    if (r_.chance(0.5)) {
      const int b = pick_value_if([&](int v) { return v != a && broadcast(sh(a), sh(v)).has_value(); });
      if (b >= 0) return b;
    }
    if (r_.chance(0.15)) return a;
    symshape s = sh(a);
    // a suffix, some dims replaced by 1, maybe a leading dim
    const std::size_t drop = s.empty() ? 0 : static_cast<std::size_t>(r_.below(static_cast<int>(s.size()) + 1));
    if (r_.chance(0.5)) s.erase(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(drop));
    for (int& d : s)
      if (r_.chance(0.25)) d = lit1;
    if (s.size() == sh(a).size() && s.size() < 4 && r_.chance(0.15))
      s.insert(s.begin(), dim_sym());  // a new leading dim
    return new_input(s, r_.chance(0.8));
  }

  fg::index_t rand_dim(std::size_t rank, bool allow_neg = true) {
    const auto d = static_cast<fg::index_t>(r_.below(static_cast<int>(rank)));
    return allow_neg && r_.chance(0.3) ? d - static_cast<fg::index_t>(rank) : d;
  }
  static std::size_t norm(fg::index_t d, std::size_t rank) {
    return static_cast<std::size_t>(d < 0 ? d + static_cast<fg::index_t>(rank) : d);
  }

  void add_one() {
    const int a = pick_value();
    const symshape sa = sh(a);
    const int w = r_.below(100);
    instr i;
    i.a = a;
    if (w < 22) {  // element-wise, one operand
      static constexpr op unaries[] = {op::neg, op::abs,  op::sqrt,    op::exp,  op::log,  op::sin,
                                       op::cos, op::tanh, op::sigmoid, op::relu, op::step, op::sign};
      static constexpr op library[] = {op::tan,    op::atan,       op::sinh,  op::asinh,         op::softplus,
                                       op::silu,   op::gelu,       op::erf,   op::log1p,         op::expm1,
                                       op::square, op::reciprocal, op::rsqrt, op::user_softsign, op::user_function};
      i.k = r_.chance(0.3) ? r_.pick(library) : r_.pick(unaries);
      if ((i.k == op::step || i.k == op::sign) && !ex(a)) i.k = op::tanh;  // a jump only on exact values
      if ((i.k == op::sqrt || i.k == op::log || i.k == op::log1p || i.k == op::rsqrt || i.k == op::reciprocal) &&
          r_.chance(0.7))
        i.a = positive(a);
      if ((i.k == op::exp || i.k == op::sinh || i.k == op::expm1 || i.k == op::tan) && r_.chance(0.6)) i.a = bounded(a);
      i.shape = sh(i.a);
      push(i, rg(i.a) && !no_grad_op(i.k), ex(i.a));
    } else if (w < 34) {  // with a scalar
      static constexpr op scalars[] = {op::add_s, op::sub_s, op::rsub_s, op::mul_s, op::div_s, op::rdiv_s, op::pow_s};
      static constexpr double consts[] = {0.5, 2.0, -1.5, 3.0, 0.1, -0.25, 1.0, 0.0};
      static constexpr double exps[] = {2.0, 3.0, -1.0, 0.5, 0.0, 1.5, -2.0, 17.0, 1.0, 2.5, -0.5, 4.0};
      i.k = r_.pick(scalars);
      i.s = i.k == op::pow_s ? r_.pick(exps) : r_.pick(consts);
      if (i.k == op::pow_s && i.s != std::floor(i.s) && r_.chance(0.7)) i.a = positive(a);
      i.shape = sh(i.a);
      push(i, rg(i.a), ex(i.a));
    } else if (w < 52) {  // element-wise, two operands
      static constexpr op binaries[] = {op::add, op::sub,     op::mul,   op::div,   op::maximum,      op::pow, op::add,
                                        op::mul, op::sub,     op::gt,    op::ge,    op::lt,           op::le,  op::eq,
                                        op::ne,  op::minimum, op::atan2, op::hypot, op::user_bilinear};
      i.k = r_.pick(binaries);
      i.b = partner(a);
      if (r_.chance(0.5)) std::swap(i.a, i.b);
      if (is_compare(i.k) && !(ex(i.a) && ex(i.b))) i.k = op::mul;
      if (i.k == op::pow && r_.chance(0.7)) i.a = positive(i.a);
      const auto bs = broadcast(sh(i.a), sh(i.b));
      if (!bs) fg::detail::fail("fuzz", "generator: operands that do not broadcast: ", i.a, " ", i.b);
      i.shape = *bs;
      push(i, !is_compare(i.k) && (rg(i.a) || rg(i.b)), ex(i.a) && ex(i.b));
    } else if (w < 64) {  // reductions
      const int kind = r_.below(3);
      const bool all_reduced_are_1 = std::all_of(sa.begin(), sa.end(), [](int d) { return d == lit1; });
      if (r_.chance(0.35)) {
        i.k = kind == 0 ? op::sum_all : kind == 1 ? op::mean_all : op::max_all;
        i.shape = {};
        push(i, rg(a), kind == 2 ? ex(a) : ex(a) && all_reduced_are_1);
      } else {
        i.k = kind == 0 ? op::sum_dims : kind == 1 ? op::mean_dims : op::max_dims;
        i.keepdim = r_.chance(0.5);
        if (sa.empty()) {
          i.dims = {r_.chance(0.5) ? 0 : -1};
          i.shape = {};
        } else {
          std::vector<bool> m(sa.size(), false);
          const int nd = 1 + r_.below(static_cast<int>(sa.size()));
          for (int k = 0; k < nd; ++k) {
            const fg::index_t d = rand_dim(sa.size());
            if (m[norm(d, sa.size())]) continue;
            m[norm(d, sa.size())] = true;
            i.dims.push_back(d);
          }
          bool ones = true;
          for (std::size_t d = 0; d < sa.size(); ++d) {
            if (m[d]) ones = ones && sa[d] == lit1;
            if (!m[d]) i.shape.push_back(sa[d]);
            else if (i.keepdim) i.shape.push_back(lit1);
          }
          push(i, rg(a), kind == 2 ? ex(a) : ex(a) && ones);
          return;
        }
        push(i, rg(a), kind == 2 ? ex(a) : ex(a));
      }
    } else if (w < 78) {  // layout
      add_layout(i);
    } else if (w < 84) {  // matrix products
      add_matmul(i);
    } else if (w < 88) {  // a branch on a value (a graph break in jit)
      static constexpr op arms[] = {op::neg, op::abs, op::sin, op::cos, op::tanh, op::sigmoid, op::relu, op::mul_s};
      i.k = op::branch;
      i.b = r_.chance(0.6) ? a : pick_value();
      i.u0 = r_.pick(arms);
      i.u1 = r_.pick(arms);
      i.s = ex(i.b) && r_.chance(0.5) ? 0.0 : 0.1234;
      i.shape = sa;
      push(i, rg(a), ex(a));
    } else if (w < 91) {
      i.k = op::graph_break;
      i.shape = sa;
      push(i, rg(a), ex(a), contig(a));
    } else if (w < 97) {  // hooks
      const int t = pick_value_if([&](int v) { return rg(v); });
      if (t < 0) return add_one();
      i.a = t;
      i.shape = sh(t);
      if (r_.chance(0.2)) {
        i.k = op::retain_grad;
        i.slot = p_.retained++;
      } else {
        i.k = op::hook;
        i.hk = static_cast<hook_kind>(r_.chance(0.1) ? 3 : r_.below(3));
        static constexpr double ks[] = {2.0, 10.0, -1.0, 0.5};
        i.s = r_.pick(ks);
        if (i.hk == hook_kind::observe || i.hk == hook_kind::removed) i.slot = p_.slots++;
      }
      push(i, true, ex(t), contig(t));
    } else {
      i.k = op::detach;
      i.shape = sa;
      push(i, false, ex(a), contig(a));
    }
  }

  /// |a| + 0.1 (for log, sqrt, fractional powers): usually finite results.
  int positive(int a) {
    instr i;
    i.k = op::abs;
    i.a = a;
    i.shape = sh(a);
    push(i, rg(a), ex(a));
    instr j;
    j.k = op::add_s;
    j.a = p_.n_values() - 1;
    j.s = 0.1;
    j.shape = sh(a);
    push(j, rg(a), ex(a));
    return p_.n_values() - 1;
  }
  /// tanh(a) * 3 (before exp): no overflow.
  int bounded(int a) {
    instr i;
    i.k = r_.chance(0.5) ? op::tanh : op::sin;
    i.a = a;
    i.shape = sh(a);
    push(i, rg(a), ex(a));
    return p_.n_values() - 1;
  }

  void add_layout(instr& i) {
    const int a = i.a;
    const symshape sa = sh(a);
    const std::size_t r = sa.size();
    const int w = r_.below(14);
    auto same = [&](op k, bool keep_contig) {
      i.k = k;
      i.shape = sa;
      push(i, rg(a), ex(a), keep_contig && contig(a));
    };
    switch (w) {
      case 0: {
        i.k = op::reshape_flat;
        const bool ones = std::all_of(sa.begin(), sa.end(), [](int d) { return d == lit1; });
        i.shape = {ones ? lit1 : product(sa)};
        return push(i, rg(a), ex(a));
      }
      case 1: {
        if (r < 2) return same(op::contiguous, true);
        i.k = op::reshape_merge;
        i.i0 = r_.below(static_cast<int>(r) - 1);
        const auto d = static_cast<std::size_t>(i.i0);
        i.shape = sa;
        const int x = sa[d], y = sa[d + 1];
        i.shape[d] = product({x, y});
        i.shape.erase(i.shape.begin() + static_cast<std::ptrdiff_t>(d) + 1);
        return push(i, rg(a), ex(a));
      }
      case 2: {
        if (!contig(a)) return same(op::clone, true);
        i.k = op::view_flat;
        const bool ones = std::all_of(sa.begin(), sa.end(), [](int d) { return d == lit1; });
        i.shape = {ones ? lit1 : product(sa)};
        return push(i, rg(a), ex(a));
      }
      case 3: {  // expand to a broader value's shape (or a new input's, used only for its shape)
        int b = pick_value_if([&](int v) {
          const auto bs = broadcast(sa, sh(v));
          return v != a && bs && *bs == sh(v) && sh(v) != sa;
        });
        if (b < 0) {
          symshape s = sa;
          for (int& d : s)
            if (d == lit1 && r_.chance(0.7)) d = free_sym();
          if (s.size() < 4 && r_.chance(0.5)) s.insert(s.begin(), free_sym());
          b = new_input(s, false);
        }
        i.k = op::expand_as;
        i.b = b;
        i.shape = sh(b);
        return push(i, rg(a), ex(a), false);
      }
      case 4: {
        if (r < 2) return same(op::clone, true);
        i.k = op::permute;
        std::vector<fg::index_t> d(r);
        std::iota(d.begin(), d.end(), 0);
        for (std::size_t k = r - 1; k > 0; --k)
          std::swap(d[k], d[static_cast<std::size_t>(r_.below(static_cast<int>(k) + 1))]);
        i.dims = d;
        for (std::size_t k = 0; k < r; ++k) i.shape.push_back(sa[static_cast<std::size_t>(d[k])]);
        return push(i, rg(a), ex(a), false);
      }
      case 5: {
        if (r == 0) return same(op::clone, true);
        i.k = op::transpose;
        i.i0 = rand_dim(r);
        i.i1 = rand_dim(r);
        i.shape = sa;
        std::swap(i.shape[norm(i.i0, r)], i.shape[norm(i.i1, r)]);
        return push(i, rg(a), ex(a), false);
      }
      case 6: {
        if (r == 0) return same(op::contiguous, true);
        i.k = op::select;
        i.i0 = rand_dim(r);
        i.i1 = r_.chance(0.5) ? 0 : -1;  // invalid where the dim is empty: eager throws, so must every path
        i.shape = sa;
        i.shape.erase(i.shape.begin() + static_cast<std::ptrdiff_t>(norm(i.i0, r)));
        return push(i, rg(a), ex(a), false);
      }
      case 7: {
        if (r == 0) return same(op::clone, true);
        i.k = op::slice;
        i.i0 = rand_dim(r);
        static constexpr fg::index_t starts[] = {0, 1, -2, 2, -1};
        static constexpr fg::index_t stops[] = {2, -1, 100, 3, 1};
        i.i1 = r_.pick(starts);
        i.i2 = r_.pick(stops);
        i.i3 = 1 + r_.below(3);
        i.shape = sa;
        symbol sl;
        sl.kind = symbol::sliced;
        sl.base = sa[norm(i.i0, r)];
        sl.start = i.i1;
        sl.stop = i.i2;
        sl.step = i.i3;
        i.shape[norm(i.i0, r)] = derived(std::move(sl));
        return push(i, rg(a), ex(a), false);
      }
      case 8: {
        if (r >= 4) return same(op::contiguous, true);
        i.k = op::unsqueeze;
        i.i0 = rand_dim(r + 1);
        i.shape = sa;
        i.shape.insert(i.shape.begin() + static_cast<std::ptrdiff_t>(norm(i.i0, r + 1)), lit1);
        return push(i, rg(a), ex(a), contig(a));
      }
      case 9: {
        std::vector<fg::index_t> ones;
        for (std::size_t d = 0; d < r; ++d)
          if (sa[d] == lit1) ones.push_back(static_cast<fg::index_t>(d));
        if (ones.empty()) return same(op::contiguous, true);
        i.k = op::squeeze;
        i.i0 = r_.pick(ones);
        i.shape = sa;
        i.shape.erase(i.shape.begin() + static_cast<std::ptrdiff_t>(i.i0));
        return push(i, rg(a), ex(a), contig(a));
      }
      case 10: return same(op::contiguous, true);
      case 11: return same(op::clone, true);
      default: {  // cat with itself, a same-shaped value, or a new input differing in that dim
        if (r == 0) return same(op::clone, true);
        i.k = op::cat;
        i.i0 = rand_dim(r);
        const std::size_t d = norm(i.i0, r);
        const int pick = r_.below(3);
        if (pick == 0) {
          i.b = a;
        } else {
          i.b = pick == 1 ? pick_value_if([&](int v) { return sh(v) == sa; }) : -1;
          if (i.b < 0) {
            symshape s = sa;
            s[d] = dim_sym();
            i.b = new_input(s, r_.chance(0.8));
          }
        }
        i.shape = sa;
        symbol sm;
        sm.kind = symbol::sum;
        sm.of = {sa[d], sh(i.b)[d]};
        i.shape[d] = derived(std::move(sm));
        return push(i, rg(a) || rg(i.b), ex(a) && ex(i.b));
      }
    }
  }

  void add_matmul(instr& i) {
    const int a = i.a;
    const symshape sa = sh(a);
    const std::size_t r = sa.size();
    if (r == 0) {  // make a vector from it first
      i.k = op::unsqueeze;
      i.i0 = 0;
      i.shape = {lit1};
      return push(i, rg(a), ex(a));
    }
    const int w = r_.below(6);
    const int k = sa.back();
    if (w == 0 && r == 2) {  // mm
      i.k = op::mm;
      i.b = new_input({k, dim_sym()}, r_.chance(0.8));
    } else if (w == 1 && r == 3) {  // bmm: the batch sizes must be equal
      i.k = op::bmm;
      i.b = new_input({sa[0], k, dim_sym()}, r_.chance(0.8));
    } else if (w == 2) {  // linear, with or without a bias
      i.k = op::linear;
      const int out = dim_sym();
      i.b = new_input({out, k}, r_.chance(0.8));
      if (r_.chance(0.6)) i.c = new_input({out}, r_.chance(0.8));
      i.shape = sa;
      i.shape.back() = out;
      return push(i, rg(a) || rg(i.b) || (i.c >= 0 && rg(i.c)), false);
    } else if (w == 3) {  // the new operand on the left
      i.k = op::matmul;
      const int kk = r == 1 ? sa[0] : sa[r - 2];
      symshape s;
      if (r_.chance(0.3)) s = {kk};
      else s = {dim_sym(), kk};
      i.b = new_input(s, r_.chance(0.8));
      std::swap(i.a, i.b);
    } else {  // matmul with a vector, a matrix or a batch
      i.k = op::matmul;
      symshape s;
      const int shape_kind = r_.below(3);
      if (shape_kind == 0) s = {k};
      else if (shape_kind == 1) s = {k, dim_sym()};
      else {
        s = r > 2 ? symshape(sa.begin(), sa.end() - 2) : symshape{dim_sym()};
        for (int& d : s)
          if (r_.chance(0.3)) d = lit1;
        if (s.size() > 2) s.erase(s.begin());
        s.push_back(k);
        s.push_back(dim_sym());
      }
      i.b = new_input(s, r_.chance(0.8));
    }
    auto out = matmul_shape(sh(i.a), sh(i.b));
    if (!out) fg::detail::fail("fuzz", "generator: a matmul of shapes that do not fit");
    i.shape = *out;
    if (i.shape.size() > 4) {  // too many dims: make it a plain product instead
      i.k = op::mul;
      i.b = i.a;
      i.shape = sh(i.a);
      return push(i, rg(i.a), ex(i.a));
    }
    push(i, rg(i.a) || rg(i.b), false);
  }

  /// One deliberately invalid instruction (eager throws fusegrad::error on it).
  void add_invalid() {
    const int a = pick_value();
    const symshape sa = sh(a);
    const std::size_t r = sa.size();
    instr i;
    i.a = a;
    i.shape = sa;
    switch (r_.below(10)) {
      case 0: i.k = op::bad_reshape; break;
      case 1:
        if (r == 0) {
          i.k = op::bad_dim;
          break;
        }
        i.k = op::bad_select;
        i.i0 = rand_dim(r, false);
        i.shape.erase(i.shape.begin() + i.i0);
        break;
      case 2: i.k = op::bad_dim; break;
      case 3:
        if (r < 2) {
          i.k = op::bad_reshape;
          break;
        }
        i.k = op::bad_permute;
        break;
      case 4: i.k = op::bad_item; break;  // throws unless the value has one element
      case 5: {
        std::vector<fg::index_t> big;
        for (std::size_t d = 0; d < r; ++d)
          if (sa[d] != lit1) big.push_back(static_cast<fg::index_t>(d));
        if (big.empty()) {
          i.k = op::bad_reshape;
          break;
        }
        i.k = op::bad_expand;  // invalid unless that dim has size 1
        i.i0 = r_.pick(big);
        break;
      }
      case 6:
        i.k = op::bad_hook;
        i.shape = sa;
        push(i, false, ex(a));
        return;
      case 7:
        if (r == 0) {
          i.k = op::bad_dim;
          break;
        }
        i.k = op::bad_sum_dup;
        i.i0 = rand_dim(r);
        i.shape.erase(i.shape.begin() + static_cast<std::ptrdiff_t>(norm(i.i0, r)));
        break;
      case 8: {  // a broadcast of sizes that never fit: size(s) + 2 against size(s)
        std::vector<std::size_t> fr;
        for (std::size_t d = 0; d < r; ++d)
          if (sa[d] != lit1 && p_.syms[static_cast<std::size_t>(sa[d])].kind == symbol::free) fr.push_back(d);
        if (fr.empty()) {
          i.k = op::bad_reshape;
          break;
        }
        const std::size_t d = r_.pick(fr);
        symbol plus;
        plus.kind = symbol::plus;
        plus.base = sa[d];
        plus.add = 2;
        p_.syms.push_back(std::move(plus));
        symshape s = sa;
        s[d] = static_cast<int>(p_.syms.size()) - 1;
        i.k = op::add;
        i.b = new_input(s, true);
        break;
      }
      default: {  // view of a non-contiguous value
        if (r < 2) {
          i.k = op::bad_reshape;
          break;
        }
        instr t;
        t.k = op::transpose;
        t.a = a;
        t.i0 = 0;
        t.i1 = static_cast<fg::index_t>(r) - 1;
        t.shape = sa;
        std::swap(t.shape.front(), t.shape.back());
        push(t, rg(a), ex(a), false);
        i.a = p_.n_values() - 1;
        i.k = op::bad_view;  // valid where the transpose is still contiguous (sizes 0 or 1)
        i.shape = {product(t.shape)};
        break;
      }
    }
    push(i, rg(i.a), false);
  }
};
}  // namespace

program generate(std::uint64_t seed, std::uint64_t index) { return generator(seed, index).make(); }

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

// ---------------------------------------------------------------------------------------
// The printer
// ---------------------------------------------------------------------------------------
namespace {
std::string dbl(double x) { return format_double(x); }
std::string v(int i) { return tagged('v', i); }
std::string dims(const std::vector<fg::index_t>& d) {
  std::string s = "{";
  for (std::size_t k = 0; k < d.size(); ++k) s += (k ? ", " : "") + std::to_string(d[k]);
  return s + "}";
}
std::string unary_expr(op k, const std::string& x, double s) {
  switch (k) {
    case op::neg: return "-" + x;
    case op::add_s: return x + " + " + dbl(s);
    case op::sub_s: return x + " - " + dbl(s);
    case op::rsub_s: return dbl(s) + " - " + x;
    case op::mul_s: return x + " * " + dbl(s);
    case op::div_s: return x + " / " + dbl(s);
    case op::rdiv_s: return dbl(s) + " / " + x;
    case op::pow_s: return "fg::pow(" + x + ", " + dbl(s) + ")";
    case op::user_softsign: return "fg::apply_op(fuzz_softsign_op{}, " + x + ")";
    case op::user_function: return "fg::function<fuzz_softclip_fn>::apply(" + x + ")";
    default: return std::string("fg::") + op_name(k) + "(" + x + ")";
  }
}
std::string sym_text(const program& p, const symshape& s) {
  std::string t = "[";
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (k) t += ", ";
    if (s[k] < 0) t += "1";
    else if (p.syms[static_cast<std::size_t>(s[k])].kind == symbol::plus)
      t += tagged('s', p.syms[static_cast<std::size_t>(s[k])].base) + '+' +
           std::to_string(p.syms[static_cast<std::size_t>(s[k])].add);
    else t += tagged('s', s[k]);
  }
  return t + "]";
}
}  // namespace

std::string print_program(const program& p) {
  std::ostringstream o;
  o << "std::vector<D> program(const std::vector<D>& in) {\n";
  if (p.retained) o << "  std::vector<D> retained(" << p.retained << ");\n";
  for (std::size_t n = 0; n < p.code.size(); ++n) {
    const instr& i = p.code[n];
    const std::string r = v(static_cast<int>(n)), A = v(i.a), B = i.b >= 0 ? v(i.b) : "", C = i.c >= 0 ? v(i.c) : "";
    std::string e;
    if (is_unary(i.k) || is_scalar(i.k)) e = unary_expr(i.k, A, i.s);
    else if (is_binary(i.k)) {
      switch (i.k) {
        case op::add: e = A + " + " + B; break;
        case op::sub: e = A + " - " + B; break;
        case op::mul: e = A + " * " + B; break;
        case op::div: e = A + " / " + B; break;
        case op::user_bilinear: e = "fg::apply_op(fuzz_bilinear_op{0.75}, " + A + ", " + B + ")"; break;
        default: e = std::string("fg::") + op_name(i.k) + "(" + A + ", " + B + ")";
      }
    } else {
      switch (i.k) {
        case op::sum_all: e = "fg::sum(" + A + ")"; break;
        case op::mean_all: e = "fg::mean(" + A + ")"; break;
        case op::max_all: e = "fg::max(" + A + ")"; break;
        case op::sum_dims:
        case op::mean_dims:
        case op::max_dims:
          e = std::string("fg::") +
              (i.k == op::sum_dims    ? "sum"
               : i.k == op::mean_dims ? "mean"
                                      : "max") +
              "(" + A + ", std::vector<fg::index_t>" + dims(i.dims) + ", " + (i.keepdim ? "true" : "false") + ")";
          break;
        case op::reshape_flat: e = A + ".reshape({-1})"; break;
        case op::reshape_merge:
          o << "  fg::shape s" << r << " = " << A << ".shape();\n  s" << r << "[" << i.i0 << "] *= s" << r << "["
            << i.i0 + 1 << "];\n  s" << r << ".erase(s" << r << ".begin() + " << i.i0 + 1 << ");\n";
          e = A + ".reshape(s" + r + ")";
          break;
        case op::view_flat: e = A + ".view({-1})"; break;
        case op::expand_as: e = A + ".expand(" + B + ".shape())"; break;
        case op::permute: e = A + ".permute(" + dims(i.dims) + ")"; break;
        case op::transpose: e = A + ".transpose(" + std::to_string(i.i0) + ", " + std::to_string(i.i1) + ")"; break;
        case op::select: e = A + ".select(" + std::to_string(i.i0) + ", " + std::to_string(i.i1) + ")"; break;
        case op::slice:
          e = A + ".slice(" + std::to_string(i.i0) + ", " + std::to_string(i.i1) + ", " + std::to_string(i.i2) + ", " +
              std::to_string(i.i3) + ")";
          break;
        case op::unsqueeze: e = A + ".unsqueeze(" + std::to_string(i.i0) + ")"; break;
        case op::squeeze: e = A + ".squeeze(" + std::to_string(i.i0) + ")"; break;
        case op::contiguous: e = A + ".contiguous()"; break;
        case op::clone: e = A + ".clone()"; break;
        case op::cat: e = "fg::cat(std::vector<D>{" + A + ", " + B + "}, " + std::to_string(i.i0) + ")"; break;
        case op::detach: e = A + ".detach()"; break;
        case op::matmul: e = "fg::matmul(" + A + ", " + B + ")"; break;
        case op::mm: e = "fg::mm(" + A + ", " + B + ")"; break;
        case op::bmm: e = "fg::bmm(" + A + ", " + B + ")"; break;
        case op::linear: e = "fg::linear(" + A + ", " + B + (C.empty() ? "" : ", " + C) + ")"; break;
        case op::branch:
          e = "fg::mean(" + B + ").item() > " + dbl(i.s) + " ? D(" + unary_expr(i.u0, A, 0.5) + ") : D(" +
              unary_expr(i.u1, A, 0.5) + ")";
          break;
        case op::graph_break:
          o << "  fg::graph_break();\n";
          e = A;
          break;
        case op::hook:
          if (i.hk == hook_kind::scale)
            o << "  " << A << ".register_hook([](const D& g) { return g * " << dbl(i.s) << "; });\n";
          else if (i.hk == hook_kind::scale_generic)
            o << "  " << A << ".register_hook([](auto g) { return g * " << dbl(i.s) << "; });\n";
          else
            o << "  " << (i.hk == hook_kind::removed ? "auto id" + r + " = " : "") << A
              << ".register_hook([](const D& g) { double s = 0; for (double e : g.to_vector()) s += e; "
              << "std::printf(\"hook " << i.slot << " saw %.17g\\n\", s); });\n"
              << (i.hk == hook_kind::removed ? "  " + A + ".remove_hook(id" + r + ");\n" : "");
          e = A;
          break;
        case op::retain_grad:
          o << "  " << A << ".retain_grad();\n  retained[" << i.slot << "] = " << A << ";\n";
          e = A;
          break;
        case op::input: e = "in[" + std::to_string(i.slot) + "]"; break;
        case op::bad_reshape: e = A + ".reshape({" + A + ".numel() + 1})"; break;
        case op::bad_select:
          e = A + ".select(" + std::to_string(i.i0) + ", " + A + ".size(" + std::to_string(i.i0) + "))";
          break;
        case op::bad_dim: e = "fg::sum(" + A + ", fg::index_t(" + A + ".dim()) + 1)"; break;
        case op::bad_permute: e = A + ".permute(std::vector<fg::index_t>(" + A + ".dim(), 0))"; break;
        case op::bad_item: e = A + " * " + A + ".item()"; break;
        case op::bad_expand:
          o << "  fg::shape s" << r << " = " << A << ".shape();\n  s" << r << "[" << i.i0 << "] += 1;\n";
          e = A + ".expand(s" + r + ")";
          break;
        case op::bad_hook:
          o << "  D d" << r << " = " << A << ".detach();\n  d" << r
            << ".register_hook([](const D& g) { return g; });\n";
          e = "d" + r;
          break;
        case op::bad_sum_dup:
          e = "fg::sum(" + A + ", std::vector<fg::index_t>{" + std::to_string(i.i0) + ", " + std::to_string(i.i0) +
              "})";
          break;
        case op::bad_view: e = A + ".view({-1})"; break;
        default: e = "?";
      }
    }
    o << "  D " << r << " = " << e << ";  // " << sym_text(p, i.shape) << (i.rg ? "" : " no grad") << "\n";
  }
  o << "  return {";
  bool first = true;
  for (int out : p.outputs) {
    o << (first ? "" : ", ") << v(out);
    first = false;
  }
  for (int k = 0; k < p.retained; ++k) o << (first ? "" : ", ") << "retained[" << k << "]", first = false;
  o << "};\n}\n";
  return o.str();
}

std::string print_reproducer(const program& p, const std::vector<shape_set>& sets, const std::vector<int>& calls,
                             const path_desc& path, const std::string& why) {
  std::ostringstream o;
  o << "// fusegrad fuzz reproducer: program seed " << p.seed << ", path " << path.name << "\n// " << why << "\n";
  o << "#include <cmath>\n#include <cstdio>\n#include <iomanip>\n#include <iostream>\n#include <vector>\n#include "
       "<fusegrad/fusegrad.hpp>\n"
       "namespace fg = fusegrad;\nusing D = fg::tensor<double>;\n\n";
  o << user_ops_source << "\n\n";
  o << print_program(p) << "\n";
  o << "std::vector<D> inputs(int set) {  // sizes of the shape sets:";
  for (std::size_t k = 0; k < sets.size(); ++k) {
    o << " {";
    bool first = true;
    for (std::size_t s = 0; s < sets[k].size(); ++s)
      if (p.syms[s].kind == symbol::free) o << (first ? "" : " ") << "s" << s << "=" << sets[k][s], first = false;
    o << "}";
  }
  o << "\n  std::vector<D> in;\n";
  for (std::size_t k = 0; k < sets.size(); ++k) {
    if (std::find(calls.begin(), calls.end(), static_cast<int>(k)) == calls.end()) continue;
    o << "  if (set == " << k << ") {\n";
    for (std::size_t i = 0; i < p.inputs.size(); ++i) {
      const fg::shape s = concrete(p, sets[k], p.inputs[i].shape);
      o << "    in.push_back(fg::randn<double>(" << format_shape(s) << ", " << input_seed(p, i, static_cast<int>(k))
        << "));\n";
      const fg::index_t n = fg::numel(s);
      if (n > 0)
        for (const auto& [pos, val] : p.inputs[i].specials)
          o << "    in.back().data()[" << special_index(pos, n) << "] = " << dbl(val) << ";\n";
      if (p.inputs[i].rg) o << "    in.back().requires_grad(true);\n";
    }
    o << "  }\n";
  }
  o << "  return in;\n}\n\n";
  o << "// Runs the program on the inputs of `set`: eagerly, or through the path; prints outputs and gradients.\n"
       "void run(int set, bool through_path) {\n";
  if (path.jit)
    o << "  static auto jitted = fg::jit(program"
      << (path.jit_eager_backend ? ", {.backend = fg::jit_backend::eager}" : "") << ");\n";
  o << "  std::vector<D> in = inputs(set);\n  try {\n";
  o << "    std::vector<D> out = " << (path.jit ? "through_path ? jitted(in) : program(in)" : "program(in)") << ";\n";
  o << "    D loss;\n    for (std::size_t i = 0; i < " << p.outputs.size()
    << "; ++i) {\n      if (!out[i].requires_grad()) continue;\n"
       "      D w = fg::randn<double>(out[i].shape(), ("
    << p.seed
    << "ull * 31u + i * 977u + 5u) % 1000000007u);\n      D l = fg::sum(out[i] * w);\n"
       "      loss = loss.defined() ? D(loss + l) : l;\n    }\n";
  if (path.ca)
    o << "    if (loss.defined() && through_path) {\n      fg::compiled_autograd::enable on"
      << (path.ca == 2 ? "(fg::backend::aot_eager{})" : "")
      << ";\n      loss.backward();\n    } else if (loss.defined()) {\n"
      << "      loss.backward();\n    }\n";
  else o << "    if (loss.defined()) loss.backward();\n";
  o << "    for (std::size_t i = 0; i < out.size(); ++i) std::cout << \"out \" << i << \": \" << out[i] << \"\\n\";\n"
       "    for (std::size_t i = 0; i < in.size(); ++i) std::cout << \"grad of input \" << i << \": \" << in[i].grad() "
       "<< \"\\n\";\n"
       "  } catch (const std::exception& e) {\n    std::printf(\"threw: %s\\n\", e.what());\n  }\n}\n\n";
  o << "int main() {\n  std::cout << std::setprecision(17);\n  for (int set : {";
  for (std::size_t k = 0; k < calls.size(); ++k) o << (k ? ", " : "") << calls[k];
  o << "}) {\n    std::printf(\"-- shape set %d, eager:\\n\", set);\n    run(set, false);\n"
       "    std::printf(\"-- shape set %d, "
    << path.name << ":\\n\", set);\n    run(set, true);\n  }\n}\n";
  return o.str();
}

}  // namespace fuzz
