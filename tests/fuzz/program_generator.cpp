// Run-time programs: the generator (see program.hpp).
#include "program_internal.hpp"

namespace fuzz {

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
    } else if (w < 60) {  // reductions
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
    } else if (w < 66) {  // along one dim
      add_along_dim(i);
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

  /// The softmax family along a dim (mostly the last, as attention and cross-entropy take it),
  /// or a normalisation over the last dim.
  void add_along_dim(instr& i) {
    const symshape sa = sh(i.a);
    static constexpr op family[] = {op::softmax_dim, op::log_softmax_dim, op::logsumexp_dim};
    static constexpr op norms[] = {op::layer_norm_last, op::rms_norm_last};
    i.k = sa.empty() || r_.chance(0.7) ? r_.pick(family) : r_.pick(norms);
    const auto rank = static_cast<fg::index_t>(sa.size());
    if (sa.empty()) i.i0 = r_.chance(0.5) ? 0 : -1;  // a 0-d value: dim 0 or -1, as PyTorch takes it
    else if (i.k == op::layer_norm_last || i.k == op::rms_norm_last || r_.chance(0.7))
      i.i0 = r_.chance(0.5) ? -1 : rank - 1;
    else i.i0 = rand_dim(sa.size());
    i.shape = sa;
    if (i.k == op::logsumexp_dim && !sa.empty()) {
      i.keepdim = r_.chance(0.5);
      const auto d = static_cast<std::ptrdiff_t>(norm(i.i0, sa.size()));
      if (i.keepdim) i.shape[static_cast<std::size_t>(d)] = lit1;
      else i.shape.erase(i.shape.begin() + d);
    }
    push(i, rg(i.a), false);
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

}  // namespace fuzz
