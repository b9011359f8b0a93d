// Run-time programs: the interpreter (see program.hpp).
#include "program_internal.hpp"

namespace fuzz {

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
    case op::sinh:
    case op::softmax_dim: return true;
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
      case op::softmax_dim:
      case op::log_softmax_dim:
      case op::logsumexp_dim:
      case op::layer_norm_last:
      case op::rms_norm_last: reduction(A, {A.dim() == 0 ? 0 : i.i0}); break;
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
        case op::softmax_dim: r = fg::softmax(A, i.i0); break;
        case op::log_softmax_dim: r = fg::log_softmax(A, i.i0); break;
        case op::logsumexp_dim: r = fg::logsumexp(A, i.i0, i.keepdim); break;
        case op::layer_norm_last: r = fg::layer_norm(A); break;
        case op::rms_norm_last: r = fg::rms_norm(A); break;
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

}  // namespace fuzz
