// test_double_backward: every differentiable op of the structured registry against closed-form
// second derivatives.
#include "helpers.hpp"

namespace {
/// A second directional derivative in closed form: d²/dt² Σ w ⊙ f(x + t h) at t = 0, from the
/// values of x, h and w (closed forms evaluated with plain, unrecorded tensors and loops).
template <std::size_t N>
using second_form = std::function<double(const std::array<td, N>& x, const std::array<td, N>& h, const td& w)>;

std::vector<double> vals(const td& t) { return t.detach().contiguous().to_vector(); }
/// Row-wise along the last dim: f(row of x, row of h) summed with the weights of each row.
double by_rows(const td& x, const td& h, const td& w,
               const std::function<double(const std::vector<double>&, const std::vector<double>&, std::size_t row,
                                          const std::vector<double>& w)>& f) {
  const auto xv = vals(x), hv = vals(h), wv = vals(w);
  const std::size_t c = x.dim() ? static_cast<std::size_t>(x.shape().back()) : 1, rows = xv.size() / c;
  double q = 0;
  for (std::size_t r = 0; r < rows; ++r)
    q += f(std::vector<double>(xv.begin() + static_cast<std::ptrdiff_t>(r * c),
                               xv.begin() + static_cast<std::ptrdiff_t>((r + 1) * c)),
           std::vector<double>(hv.begin() + static_cast<std::ptrdiff_t>(r * c),
                               hv.begin() + static_cast<std::ptrdiff_t>((r + 1) * c)),
           r, wv);
  return q;
}
double dotv(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
/// Σ_{i≠j} h_i h_j Π_{k≠i,j, k<n} x_k: the second directional derivative of a product of n factors.
double prod_second(const std::vector<double>& x, const std::vector<double>& h, std::size_t n) {
  double q = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      double p = h[i] * h[j];
      for (std::size_t k = 0; k < n; ++k)
        if (k != i && k != j) p *= x[k];
      q += p;
    }
  return q;
}
double total(const td& t) { return fg::sum(t.detach()).item(); }
td shifted(const td& a) { return a.detach() + fg::eye<double>(a.shape()[0]) * 3.0; }

/// The structured registry's ops: linear ones (their second derivative is that of sin over
/// them, -sin(f(x)) f(h)², f(h) exact by linearity) and the others' closed forms.
const std::map<std::string, second_form<1>>& unary_seconds() {
  using A = std::array<td, 1>;
  static const std::map<std::string, second_form<1>> m = {
      {"logsumexp",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto& xr, const auto& hr, std::size_t r, const auto& wv) {
           const td p = fg::softmax(fg::from_vector<double>(xr), 0);
           const auto pv = vals(p);
           const double m1 = dotv(pv, hr);
           double m2 = 0;
           for (std::size_t i = 0; i < hr.size(); ++i) m2 += pv[i] * hr[i] * hr[i];
           return wv[r] * (m2 - m1 * m1);  // Σ p h² - (Σ p h)²
         });
       }},
      {"softmax",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           const auto sv = vals(fg::softmax(fg::from_vector<double>(xr), 0));
           const double m1 = dotv(sv, hr);
           double v = 0;
           for (std::size_t j = 0; j < hr.size(); ++j) v += sv[j] * (hr[j] - m1) * hr[j];
           double q = 0;
           for (std::size_t i = 0; i < hr.size(); ++i) q += wv[r * c + i] * sv[i] * ((hr[i] - m1) * (hr[i] - m1) - v);
           return q;  // d²s_i = s_i ((h_i - m)² - Σ s_j (h_j - m) h_j)
         });
       }},
      {"log_softmax",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           const auto pv = vals(fg::softmax(fg::from_vector<double>(xr), 0));
           const double m1 = dotv(pv, hr);
           double m2 = 0, ws = 0;
           for (std::size_t i = 0; i < hr.size(); ++i) {
             m2 += pv[i] * hr[i] * hr[i];
             ws += wv[r * c + i];
           }
           return -ws * (m2 - m1 * m1);
         });
       }},
      {"layer_norm",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           // y_i = d_i v^(-1/2), d = x - mean x, v = mean d² + eps; along h, d moves by e = h - mean h.
           const double n = static_cast<double>(xr.size());
           double xb = 0, hb = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) xb += xr[i] / n, hb += hr[i] / n;
           double v = 1e-5, dv = 0, d2v = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) {
             const double d = xr[i] - xb, e = hr[i] - hb;
             v += d * d / n, dv += 2 * d * e / n, d2v += 2 * e * e / n;
           }
           const double ds = -0.5 * std::pow(v, -1.5) * dv,
                        d2s = 0.75 * std::pow(v, -2.5) * dv * dv - 0.5 * std::pow(v, -1.5) * d2v;
           double q = 0;
           for (std::size_t i = 0; i < xr.size(); ++i)
             q += wv[r * c + i] * (2 * (hr[i] - hb) * ds + (xr[i] - xb) * d2s);
           return q;
         });
       }},
      {"rms_norm",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           // y_i = x_i q^(-1/2), q = mean x² + eps.
           const double n = static_cast<double>(xr.size());
           double q = 1e-6, dq = 0, d2q = 0;
           for (std::size_t i = 0; i < xr.size(); ++i)
             q += xr[i] * xr[i] / n, dq += 2 * xr[i] * hr[i] / n, d2q += 2 * hr[i] * hr[i] / n;
           const double ds = -0.5 * std::pow(q, -1.5) * dq,
                        d2s = 0.75 * std::pow(q, -2.5) * dq * dq - 0.5 * std::pow(q, -1.5) * d2q;
           double t = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) t += wv[r * c + i] * (2 * hr[i] * ds + xr[i] * d2s);
           return t;
         });
       }},
      {"min", [](const A&, const A&, const td&) { return 0.0; }},
      {"amax", [](const A&, const A&, const td&) { return 0.0; }},
      {"amin_all", [](const A&, const A&, const td&) { return 0.0; }},
      {"norm1", [](const A&, const A&, const td&) { return 0.0; }},
      {"norm_inf", [](const A&, const A&, const td&) { return 0.0; }},
      {"var",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto&, const auto& hr, std::size_t r, const auto& wv) {
           const double n = static_cast<double>(hr.size());
           double hb = 0, q = 0;
           for (double v : hr) hb += v / n;
           for (double v : hr) q += (v - hb) * (v - hb);
           return wv[r] * 2 * q / (n - 1);
         });
       }},
      {"stddev",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto& xr, const auto& hr, std::size_t r, const auto& wv) {
           const double n = static_cast<double>(hr.size());
           double xb = 0, hb = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) {
             xb += xr[i] / n;
             hb += hr[i] / n;
           }
           double v = 0, dv = 0, d2v = 0;
           for (std::size_t i = 0; i < xr.size(); ++i) {
             v += (xr[i] - xb) * (xr[i] - xb) / n;
             dv += 2 * (xr[i] - xb) * (hr[i] - hb) / n;
             d2v += 2 * (hr[i] - hb) * (hr[i] - hb) / n;
           }
           const double sd = std::sqrt(v);
           return wv[r] * (d2v / (2 * sd) - dv * dv / (4 * sd * sd * sd));
         });
       }},
      {"norm2",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto& xr, const auto& hr, std::size_t r, const auto& wv) {
           const double nr = std::sqrt(dotv(xr, xr)), xh = dotv(xr, hr);
           return wv[r] * (dotv(hr, hr) - xh * xh / (nr * nr)) / nr;
         });
       }},
      {"prod",
       [](const A& x, const A& h, const td& w) {
         return by_rows(x[0], h[0], w, [](const auto& xr, const auto& hr, std::size_t r, const auto& wv) {
           return wv[r] * prod_second(xr, hr, xr.size());
         });
       }},
      {"cumprod",
       [](const A& x, const A& h, const td& w) {
         const auto wv = vals(w);
         const std::size_t c = static_cast<std::size_t>(x[0].shape().back());
         return by_rows(x[0], h[0], w, [c, &wv](const auto& xr, const auto& hr, std::size_t r, const auto&) {
           double q = 0;
           for (std::size_t k = 0; k < c; ++k) q += wv[r * c + k] * prod_second(xr, hr, k + 1);
           return q;
         });
       }},
      {"inverse",
       [](const A& x, const A& h, const td& w) {  // d²Y = 2 Y H Y H Y
         const td y = fg::inverse(shifted(x[0])), hh = h[0].detach();
         return 2 * total(fg::mm(fg::mm(fg::mm(fg::mm(y, hh), y), hh), y) * w);
       }},
      {"det",
       [](const A& x, const A& h, const td& w) {  // det ((tr YH)² - tr(YHYH))
         const td a = shifted(x[0]), y = fg::inverse(a), yh = fg::mm(y, h[0].detach());
         const double t = fg::trace(yh).item();
         return w.item() * fg::det(a).item() * (t * t - fg::trace(fg::mm(yh, yh)).item());
       }},
      {"logdet",
       [](const A& x, const A& h, const td& w) {  // -tr(YHYH)
         const td yh = fg::mm(fg::inverse(shifted(x[0])), h[0].detach());
         return -w.item() * fg::trace(fg::mm(yh, yh)).item();
       }},
      {"cholesky",
       [](const A& x, const A& h, const td& w) {
         // A = X Xᵀ + I: A' = H Xᵀ + X Hᵀ, A'' = 2 H Hᵀ. L' = L Φ(M), M = L⁻¹ A' L⁻ᵀ;
         // L'' = L' Φ(M) + L Φ(M'), M' = -L⁻¹ L' M - M L'ᵀ L⁻ᵀ + L⁻¹ A'' L⁻ᵀ (Φ: lower
         // triangle, diagonal halved).
         const td xx = x[0].detach(), hh = h[0].detach();
         const index_t n = xx.shape()[0];
         const auto phi = [n](const td& m) { return fg::tril(m) - fg::where(fg::eye<double>(n), m, 0.0) * 0.5; };
         const td a1 = fg::mm(hh, xx.t()) + fg::mm(xx, hh.t()), a2 = fg::mm(hh, hh.t()) * 2.0;
         const td l = fg::cholesky(fg::mm(xx, xx.t()) + fg::eye<double>(n)), li = fg::inverse(l);
         const td m = fg::mm(fg::mm(li, a1), li.t());
         const td l1 = fg::mm(l, phi(m));
         const td m1 = -fg::mm(fg::mm(li, l1), m) - fg::mm(fg::mm(m, l1.t()), li.t()) + fg::mm(fg::mm(li, a2), li.t());
         return total((fg::mm(l1, phi(m)) + fg::mm(l, phi(m1))) * w);
       }},
  };
  return m;
}
const std::map<std::string, second_form<2>>& binary_seconds() {
  using A = std::array<td, 2>;
  static const std::map<std::string, second_form<2>> m = {
      {"dot", [](const A&, const A& h, const td& w) { return 2 * w.item() * total(h[0] * h[1]); }},
      {"outer",
       [](const A&, const A& h, const td& w) { return 2 * total(fg::outer(h[0].detach(), h[1].detach()) * w); }},
      {"solve",
       [](const A& x, const A& h, const td& w) {  // X' = Y (H_B - H_A X), X'' = -2 Y H_A X'
         const td y = fg::inverse(shifted(x[0]));
         const td hb = h[1].dim() == 1 ? h[1].detach().unsqueeze(1) : h[1].detach();
         const td xs = fg::mm(y, x[1].dim() == 1 ? x[1].detach().unsqueeze(1) : x[1].detach());
         const td x1 = fg::mm(y, hb - fg::mm(h[0].detach(), xs));
         const td x2 = fg::mm(fg::mm(y, h[0].detach()), x1) * -2.0;
         return total(x2.reshape(w.shape()) * w);
       }},
  };
  return m;
}
const std::vector<std::string> linear_ops = {"cumsum",      "flip",  "narrow", "split",        "chunk",
                                             "cat",         "stack", "repeat", "index_select", "gather",
                                             "scatter_add", "tril",  "triu",   "trace",        "diag"};
}  // namespace

TEST_CASE(
    "double backward: every differentiable op of the structured registry against closed-form second derivatives") {
  int checked = 0;
  for_each(structured(), [&](const auto& e) {
    if (!e.differentiable) return;
    using info = std::remove_cvref_t<decltype(e)>;
    constexpr std::size_t N = info::arity;
    const std::string op(e.name);
    CAPTURE(op);
    const bool linear = std::find(linear_ops.begin(), linear_ops.end(), op) != linear_ops.end();
    second_form<N> form;
    if constexpr (N == 1) {
      if (const auto it = unary_seconds().find(op); it != unary_seconds().end()) form = it->second;
    } else {
      if (const auto it = binary_seconds().find(op); it != binary_seconds().end()) form = it->second;
    }
    if (!linear && !form) {
      FAIL_CHECK("no closed-form second derivative for " << op);
      return;
    }
    const auto f = fn_of<double>(e);
    for (const auto& ss : e.shapes) {
      const std::string shapes_ = str(ss);
      CAPTURE(shapes_);
      std::array<td, N> x, h;
      std::vector<td> in;
      for (std::size_t k = 0; k < N; ++k) {
        x[k] = to_tensor<double>(sample_values(e.dom[k], ss[k], 21 + 13 * k), ss[k]).requires_grad(true);
        h[k] = weights(ss[k], 4.0 + static_cast<double>(k)) - 0.5;
        in.push_back(x[k]);
      }
      const td fx = call(f, x);
      const td w = weights(fx.shape(), 9.0);
      const td big_f = fg::sum(w * (linear ? fg::sin(fx) : fx));
      const auto g = fg::autograd::grad({big_f}, in, {.create_graph = true});
      td s = fg::sum(g[0] * h[0]);
      for (std::size_t k = 1; k < N; ++k) s = s + fg::sum(g[k] * h[k]);
      double got = 0;  // a piecewise-linear op's gradient has no history: its second derivative is 0
      if (s.requires_grad()) {
        const auto d = fg::autograd::grad({s}, in, {.allow_unused = true});
        for (std::size_t k = 0; k < N; ++k)
          if (d[k].defined()) got += total(d[k] * h[k]);
      }
      double want;
      if (linear) {
        std::array<td, N> hd;
        for (std::size_t k = 0; k < N; ++k) hd[k] = h[k].detach();
        const td fh = call(f, hd);  // the op's directional derivative, exact: it is linear
        want = -total(w * fg::sin(fx.detach()) * fh * fh);
      } else {
        want = form(x, h, w);
      }
      CHECK(got == doctest::Approx(want).epsilon(1e-10).scale(1.0));
    }
    ++checked;
  });
  CHECK(checked >= 35);
}
