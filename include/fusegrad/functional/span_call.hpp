#pragma once
/// \file fusegrad/functional/span_call.hpp
/// A transformed function with range arguments, run on the span engine: the arguments'
/// slots, the checks on their lengths, the order of the passes, and where the gradients go.
///
/// A scalar output's gradient takes one pass over the elements when the reductions'
/// adjoints do not depend on the reductions' values (the output is built from the
/// reductions with `+`, `-`, scalings and products by things that hold no reduction: a sum,
/// a mean, `-n log(sigma) - 0.5 sum(z^2)`, a discounted mean payoff): the adjoints are
/// computed first, then the pass computes the values and pushes the adjoints back at once.
/// Otherwise (`log(sum(exp(x)))`) a forward pass computes the reductions, then a second
/// pass the gradients.

#include "fusegrad/functional/call.hpp"

namespace fusegrad::detail::fn {

template <class Op>
inline constexpr bool is_linear_unary_v = false;
template <>
inline constexpr bool is_linear_unary_v<ops::neg_op> = true;
template <class T>
inline constexpr bool is_linear_unary_v<ops::add_scalar_op<T>> = true;
template <class T>
inline constexpr bool is_linear_unary_v<ops::sub_scalar_op<T>> = true;
template <class T>
inline constexpr bool is_linear_unary_v<ops::rsub_scalar_op<T>> = true;
template <class T>
inline constexpr bool is_linear_unary_v<ops::mul_scalar_op<T>> = true;
template <class T>
inline constexpr bool is_linear_unary_v<ops::div_scalar_op<T>> = true;

/// Whether the adjoints reaching `E`'s reductions are independent of the reductions' values.
template <class E>
constexpr bool adjoints_free() {
  if constexpr (info<E>::reds == 0 || is_real_reduction_v<E>) {
    return true;
  } else if constexpr (requires { std::declval<E>().op; }) {
    using Op = decltype(std::declval<E>().op);
    if constexpr (arity_v<E> == 1) {
      return is_linear_unary_v<Op> && adjoints_free<child_t<E, 0>>();
    } else {
      using A = child_t<E, 0>;
      using B = child_t<E, 1>;
      constexpr bool fa = adjoints_free<A>(), fb = adjoints_free<B>();
      if constexpr (std::is_same_v<Op, ops::add_op> || std::is_same_v<Op, ops::sub_op>) return fa && fb;
      else if constexpr (std::is_same_v<Op, ops::mul_op>) return (info<A>::reds == 0 || info<B>::reds == 0) && fa && fb;
      else if constexpr (std::is_same_v<Op, ops::div_op>) return info<B>::reds == 0 && fa;
      else return false;
    }
  } else if constexpr (is_custom_v<E>) {
    return false;
  } else {
    return adjoints_free<child_t<E, 0>>();  // a sum of one scalar
  }
}

/// A range argument's tangent (forward mode) or none.
struct no_tangent {};

/// The slot of argument `a` with tangent `tan` (`op`, the transform, names a tangent of the
/// wrong length).
template <class Vs, class A, class Tan>
auto make_slot(const A& a, const Tan& tan, std::string_view op = "jvp") {
  using T = typename kind<Vs>::elem;
  if constexpr (kind_v<A> == arg_kind::scalar) {
    Vs s = lift<Vs>(static_cast<T>(a));
    if constexpr (!std::is_same_v<Tan, no_tangent>) s.t = lift<decltype(s.t)>(static_cast<T>(tan));
    return scalar_slot<Vs>{s, splat(s)};
  } else if constexpr (kind_v<A> == arg_kind::range) {
    span_slot<Vs> sl;
    sl.src[0] = range_source<A>::data(a);
    sl.size = range_source<A>::size(a);
    if constexpr (!std::is_same_v<Tan, no_tangent>) {
      if constexpr (std::is_pointer_v<Tan>) sl.src[1] = tan;
      else {
        if (range_source<Tan>::size(tan) != sl.size)
          fail(op, "a tangent of ", range_source<Tan>::size(tan), " elements for an argument of ", sl.size,
               "; expected as many as the argument");
        sl.src[1] = range_source<Tan>::data(tan);
      }
    }
    return sl;
  } else {
    static_assert(kind_v<A> != arg_kind::value,
                  "fusegrad: a function of ranges (or one reading fg::data, or returning fg::concat) cannot be "
                  "differentiated again by an enclosing transform; use fg::hvp, fg::hessian or fg::jacobian on it");
    return pass_slot{};
  }
}

/// The length of the element-wise expression `e` (each of its range leaves must have it; 0
/// without any).
template <class E>
index_t part_length(std::string_view op, const E& e) {
  index_t n = -1;
  bool n_data = false;
  each_leaf(e, [&](const auto& leaf) {
    if constexpr (requires { leaf.count; }) {
      constexpr bool data = is_data_v<std::remove_cvref_t<decltype(leaf)>>;
      if (n < 0) n = leaf.count, n_data = data;
      else if (n != leaf.count)
        fail(op, "an element-wise part of the function combines ranges of ", n, " and ", leaf.count, " elements",
             n_data && data ? " (both data, fg::data)"
             : n_data       ? " (the first: data, fg::data)"
             : data         ? " (the second: data, fg::data)"
                            : "",
             "; expected equal lengths (fg::slice takes a part of a range; x[i], one element, is a scalar that "
             "broadcasts)");
    }
  });
  return n < 0 ? 0 : n;
}

/// The lengths of `e`'s element-wise parts (`len[b]` for the reduction of mark b; `len[0]` for
/// an element-wise output; the first is returned), and per argument whether its gradient is added up (zeroed first)
/// rather than stored once per element: unless its every leaf is the whole argument, in one
/// pass.
template <class E, class Slots>
index_t lengths(std::string_view op, const E& e, const Slots& slots, index_t* len, bool* add, bool& one_pass) {
  constexpr std::size_t NA = std::tuple_size_v<Slots>;
  index_t first = -1;
  one_pass = true;
  if constexpr (info<E>::elementwise) first = len[0] = part_length(op, e);
  else
    each_reduction<0>(e, [&](auto b, const auto& r) {
      len[b] = part_length(op, r.arg);
      if (first < 0) first = len[b];
      else one_pass = one_pass && len[b] == first;
    });
  bool seen[NA > 0 ? NA : 1] = {};
  for (std::size_t i = 0; i < NA; ++i) add[i] = !one_pass;
  each_leaf(e, [&](const auto& leaf) {
    using L = std::remove_cvref_t<decltype(leaf)>;
    if constexpr (requires { leaf.count; } && !is_data_v<L>) {
      seen[L::index] = true;
      if (leaf.offset != 0 || leaf.count != std::get<L::index>(slots).size) add[L::index] = true;
    }
  });
  // an argument read by element (`x[i]`) gets those elements' adjoints added after the pass
  constexpr std::uint64_t elems = element_args<E>();
  for (std::size_t i = 0; i < NA; ++i) add[i] = add[i] || !seen[i] || ((elems >> i) & 1);
  // a statistic of a range adds its range's gradient after (or between) the passes
  each_range_stat<0>(e, [&](auto, const auto& r) { add[std::remove_cvref_t<decltype(r.x)>::index] = true; });
  return first < 0 ? 0 : first;
}

/// The length of argument `i`'s range (0: not a range).
template <class Slots>
inline index_t range_length(const Slots& slots, int i) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    index_t r = 0;
    ((I == static_cast<std::size_t>(i) ? (r =
                                              [&] {
                                                if constexpr (is_span_slot_v<std::tuple_element_t<I, Slots>>)
                                                  return std::get<I>(slots).size;
                                                else return index_t{0};
                                              }())
                                       : 0),
     ...);
    return r;
  }
  (std::make_index_sequence<std::tuple_size_v<Slots>>{});
}

/// Zeroes the gradients of the range arguments in `Spans` that the passes add up (`add`),
/// unless the caller's `accumulate` adds them to what they hold.
template <std::uint64_t Spans, class Vs, class Slots>
inline void zero_added_gradients(const Slots& slots, const bool* add, bool accumulate,
                                 typename kind<Vs>::elem* const* gout) {
  using T = typename kind<Vs>::elem;
  constexpr int NA = static_cast<int>(std::tuple_size_v<Slots>), nc = n_comp<Vs>;
  for (int i = 0; i < NA; ++i) {
    if (!((Spans >> i) & 1) || !add[i] || accumulate) continue;
    const index_t size = range_length(slots, i);
    for (int k = 0; k < nc; ++k)
      if (gout[i * nc + k]) std::fill_n(gout[i * nc + k], size, T(0));
  }
}

/// The statistics of ranges in `e`, per mark into `rst`: each range's sums by its kernel, once,
/// before everything that reads them (their parameters read no reduction).
template <class Vs, class E, class Slots>
inline void compute_range_stats(const E& e, const Slots& slots, const upper_ctx<Vs, Slots>& uc,
                                range_stat_rec<typename kind<Vs>::elem>* rst) {
  using T = typename kind<Vs>::elem;
  if constexpr (range_stats<E>() > 0 && !plain_num_v<Vs>) {
    static_assert(plain_num_v<Vs>,
                  "fusegrad: fg::normal_lpdf of a range runs under fg::grad, fg::value_and_grad and "
                  "fg::vjp; under fg::jvp, fg::hvp and fg::hessian write the density out "
                  "(-fg::sum(0.5 * z * z + fg::log(sigma)) with z = (x - mu) / sigma)");
  } else if constexpr (range_stats<E>() > 0) {
    each_range_stat<0>(e, [&](auto b, const auto& r) {
      using R = std::remove_cvref_t<decltype(r)>;
      using Rule = typename range_rule<R>::type;
      constexpr std::size_t I = std::remove_cvref_t<decltype(r.x)>::index;
      const T mu = fwd<child_base<R, 0>(decltype(b)::value)>(uc, child<0>(r)).y.v;
      const T sigma = fwd<child_base<R, 1>(decltype(b)::value)>(uc, child<1>(r)).y.v;
      Rule::check(sigma);
      const auto st = Rule::stats(std::get<I>(slots).src[0] + r.x.offset, r.x.count, mu);
      rst[decltype(b)::value] = {st[0], st[1], r.x.count};
    });
  }
}

/// The arguments in `Mask` whose adjoints the upper part and the hoisted subexpressions' rules
/// add: the scalars, and the ranges read by a statistic or by element (`x[i]`).
template <std::uint64_t Mask, class E, class Slots>
inline constexpr std::uint64_t upper_args = (slot_mask<Slots, is_scalar_slot>() & Mask) |
                                            (range_stat_args<E>() & slot_mask<Slots, is_span_slot>() & Mask) |
                                            (element_args<E>() & slot_mask<Slots, is_span_slot>() & Mask);

/// With `Back`: the hoisted subexpressions' summed adjoints `hadj` pushed through their rules
/// once, to the scalars in `Mask` (added to `sadj`) and the ranges that `rg` writes.
template <bool Back, std::uint64_t Mask, class Vs, class E, class Slots>
inline void push_hoisted_adjoints(const E& e, const upper_ctx<Vs, Slots>& uc,
                                  const range_out<typename kind<Vs>::elem, Slots>& rg, const Vs* hadj, Vs* sadj) {
  if constexpr (Back) {
    constexpr int NA = static_cast<int>(std::tuple_size_v<Slots>);
    constexpr std::uint64_t scal = slot_mask<Slots, is_scalar_slot>() & Mask;
    using St = upper_state<Vs, marks<E>(), NA>;
    using Rg = range_out<typename kind<Vs>::elem, Slots>;
    St st{};
    each_hoist<0, false>(e, [&](auto b, const auto& h) {
      if constexpr ((info<std::remove_cvref_t<decltype(h)>>::args & Mask) != 0)
        back<b>(upper_sink<upper_args<Mask, E, Slots>, St, Rg>{&st, rg}, h, fwd<b>(uc, h), hadj[b]);
    });
    for (int i = 0; i < NA; ++i)
      if ((scal >> i) & 1) sadj[i] = sadj[i] + st.arg[i];
  }
}

/// The upper part, outside the passes: the output's value from the reductions' (`uc`); with
/// `Back`, the reductions' adjoints from `seed` (into `red_adj`), and the adjoints of the
/// arguments in `M` that it reads (scalars in `Mask`: added to `sadj`; ranges: `rg`).
template <bool Back, std::uint64_t Mask, std::uint64_t M, class Vs, class E, class Slots>
inline Vs upper_part(const E& e, const upper_ctx<Vs, Slots>& uc, const range_out<typename kind<Vs>::elem, Slots>& rg,
                     const Vs& seed, Vs* red_adj, Vs* sadj) {
  constexpr int NA = static_cast<int>(std::tuple_size_v<Slots>), NR = marks<E>();
  constexpr std::uint64_t scal = slot_mask<Slots, is_scalar_slot>() & Mask;
  using Rg = range_out<typename kind<Vs>::elem, Slots>;
  upper_state<Vs, NR, NA> st{};
  const auto v = fwd<0>(uc, e);
  if constexpr (Back) {
    back<0>(upper_sink<M, decltype(st), Rg>{&st, rg}, e, v, seed);
    for (int r = 0; r < NR; ++r) red_adj[r] = st.red[r];
    if constexpr (M != 0)
      for (int i = 0; i < NA; ++i)
        if ((scal >> i) & 1) sadj[i] = sadj[i] + st.arg[i];
  }
  return v.y;
}

/// The passes over the element-wise parts: one over all of them (`n0` elements), or one per
/// reduction (`len[b]` elements) when their lengths differ.
template <bool B, std::uint64_t M, class Vs, class E, class Slots>
inline void element_passes(const E& e, const Slots& slots, bool one_pass, index_t n0, const index_t* len,
                           const pass_io<Vs, std::tuple_size_v<Slots>>& io) {
  if (one_pass) return element_pass<B, M, Vs>(e, slots, n0, io);
  pass_io<Vs, std::tuple_size_v<Slots>> one = io;
  each_reduction<0>(e, [&](auto b, const auto&) { one.only = b, element_pass<B, M, Vs>(e, slots, len[b], one); });
}

/// Runs `e` on the span engine: returns its value (a scalar output), and with `Back` the
/// adjoints, seeded with `seed` (or `ybar`, an element-wise output's cotangent), of the
/// arguments in `Mask`: ranges' into `gout` (`n_comp` pointers per argument; with
/// `accumulate`, added to what they hold: one part of a `concat` after another), scalars'
/// added to `sadj`. An element-wise output's value goes to `yout`.
/// Its phases are left to the inliner, not forced inline: forced, they made the run too large
/// to be inlined into its caller, and a range statistic's kernel stayed a call.
template <bool Back, std::uint64_t Mask, class Vs, class E, class Slots>
Vs span_run(std::string_view op, const E& e, const Slots& slots, const Vs& seed, typename kind<Vs>::elem* const* gout,
            Vs* sadj, typename kind<Vs>::elem* const* yout, const typename kind<Vs>::elem* const* ybar,
            bool accumulate = false) {
  using T = typename kind<Vs>::elem;
  constexpr int NA = static_cast<int>(std::tuple_size_v<Slots>);
  constexpr int NR = marks<E>();  // reductions and hoisted subexpressions, by mark
  constexpr std::uint64_t spans = slot_mask<Slots, is_span_slot>() & Mask;
  bool add[NA > 0 ? NA : 1], one_pass = true;
  index_t len[NR > 0 ? NR : 1] = {};
  const index_t n0 = lengths(op, e, slots, len, add, one_pass);
  if (accumulate)
    for (int i = 0; i < NA; ++i) add[i] = true;
  if constexpr (Back) zero_added_gradients<spans, Vs>(slots, add, accumulate, gout);
  pass_io<Vs, NA> io;
  io.out = gout, io.add = add, io.arg_adj = sadj, io.y = yout, io.ybar = ybar;
  // hoisted subexpressions: their values once, splat; afterwards their summed adjoints pushed
  // through their rules once
  Vs red[NR > 0 ? NR : 1]{}, red_adj[NR > 0 ? NR : 1]{}, hadj[NR > 0 ? NR : 1]{};
  batch_of<Vs> hval[NR > 0 ? NR : 1]{};
  upper_ctx<Vs, Slots> uc{slots, red};
  range_stat_rec<T> rst[NR > 0 ? NR : 1]{};
  compute_range_stats<Vs>(e, slots, uc, rst);
  uc.rst = rst;
  const range_out<T, Slots> rg{gout, &slots};
  each_hoist<0, false>(e, [&](auto b, const auto& h) { hval[b] = splat(fwd<b>(uc, h).y); });
  io.hoisted = hval, io.hoisted_adj = hadj;
  if constexpr (info<E>::elementwise) {
    element_pass<Back, Mask, Vs>(e, slots, n0, io);
    push_hoisted_adjoints<Back, Mask>(e, uc, rg, hadj, sadj);
    return Vs{};
  } else {
    io.red_val = red, io.red_adj = red_adj;
    constexpr std::uint64_t upper_back = upper_args<Mask, E, Slots>;
    // (`io` by reference: a copy per call was built with 8-byte stores and read back as 16-byte
    // blocks, store-forwarding stalls that weighed on a short call)
    auto pass = [&]<bool B, std::uint64_t M>(std::bool_constant<B>, std::integral_constant<std::uint64_t, M>) {
      element_passes<B, M, Vs>(e, slots, one_pass, n0, len, io);
    };
    auto upper = [&]<std::uint64_t M>(std::integral_constant<std::uint64_t, M>) {
      return upper_part<Back, Mask, M>(e, uc, rg, seed, red_adj, sadj);
    };
    if constexpr (!Back) {
      pass(std::false_type{}, std::integral_constant<std::uint64_t, 0>{});
      return upper(std::integral_constant<std::uint64_t, 0>{});
    } else if constexpr (adjoints_free<E>()) {
      upper(std::integral_constant<std::uint64_t, 0>{});  // the reductions' adjoints (their values unused)
      pass(std::true_type{}, std::integral_constant<std::uint64_t, Mask>{});
      push_hoisted_adjoints<Back, Mask>(e, uc, rg, hadj, sadj);
      return upper(std::integral_constant<std::uint64_t, upper_back>{});
    } else {
      pass(std::false_type{}, std::integral_constant<std::uint64_t, 0>{});
      const Vs y = upper(std::integral_constant<std::uint64_t, upper_back>{});
      Vs keep[NR > 0 ? NR : 1];
      io.red_val = keep;
      pass(std::true_type{}, std::integral_constant<std::uint64_t, Mask>{});
      push_hoisted_adjoints<Back, Mask>(e, uc, rg, hadj, sadj);
      return y;
    }
  }
}

/// Calls `fn(part)` for each part of the output `e` (`e` itself unless a `concat`).
template <class E, class Fn>
void each_part(const E& e, Fn&& fn) {
  if constexpr (is_concat_v<E>) std::apply([&](const auto&... p) { (fn(p), ...); }, e.parts);
  else fn(e);
}
/// The number of elements of the output `e`: an element-wise part's length, 1 for a scalar,
/// the parts' added for a `concat`.
template <class E>
index_t output_length(std::string_view op, const E& e) {
  index_t m = 0;
  each_part(e, [&](const auto& p) {
    if constexpr (info<std::remove_cvref_t<decltype(p)>>::elementwise) m += part_length(op, p);
    else m += 1;
  });
  return m;
}
/// Runs the output `e` (element-wise, or a `concat`) forward: its value to `y` (`n_comp`
/// arrays of `output_length` elements), part by part.
template <class Vs, class E, class Slots>
void output_forward(std::string_view op, const E& e, const Slots& slots, typename kind<Vs>::elem* const* y) {
  using T = typename kind<Vs>::elem;
  constexpr int nc = n_comp<Vs>;
  index_t off = 0;
  each_part(e, [&](const auto& p) {
    if constexpr (info<std::remove_cvref_t<decltype(p)>>::elementwise) {
      T* yo[nc];
      for (int k = 0; k < nc; ++k) yo[k] = y[k] + off;
      span_run<false, 0, Vs>(op, p, slots, Vs{}, nullptr, nullptr, yo, nullptr);
      off += part_length(op, p);
    } else {
      T c[nc];
      to_comps(span_run<false, 0, Vs>(op, p, slots, Vs{}, nullptr, nullptr, nullptr, nullptr), c);
      for (int k = 0; k < nc; ++k) y[k][off] = c[k];
      off += 1;
    }
  });
}
/// Pulls the cotangent `ybar` (`output_length` elements) of the output `e` back to the
/// arguments in `Mask`: ranges' gradients to `gout` (zeroed here first), scalars' added to
/// `sadj`; a `concat` part by part, each adding its share.
template <std::uint64_t Mask, class Vs, class E, class Slots>
void output_backward(std::string_view op, const E& e, const Slots& slots, typename kind<Vs>::elem* const* gout,
                     const index_t* gsize, Vs* sadj, const typename kind<Vs>::elem* ybar) {
  using T = typename kind<Vs>::elem;
  static_assert(n_comp<Vs> == 1, "fusegrad (internal): a cotangent of numbers");
  if constexpr (!is_concat_v<E>) {
    const T* yb[1] = {ybar};
    span_run<true, Mask, Vs>(op, e, slots, Vs{}, gout, sadj, nullptr, yb);
  } else {
    for (std::size_t i = 0; i < std::tuple_size_v<Slots>; ++i)
      if (gout[i]) std::fill_n(gout[i], gsize[i], T(0));
    index_t off = 0;
    each_part(e, [&](const auto& p) {
      if constexpr (info<std::remove_cvref_t<decltype(p)>>::elementwise) {
        const T* yb[1] = {ybar + off};
        span_run<true, Mask, Vs>(op, p, slots, Vs{}, gout, sadj, nullptr, yb, true);
        off += part_length(op, p);
      } else {
        span_run<true, Mask, Vs>(op, p, slots, lift<Vs>(ybar[off]), gout, sadj, nullptr, nullptr, true);
        off += 1;
      }
    });
  }
}

}  // namespace fusegrad::detail::fn
