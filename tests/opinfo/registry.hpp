#pragma once
// The op registry: every element-wise op of fusegrad, with its sample domains, reference,
// edge values (PyTorch's results) and derivative edge values. A new op is one entry here plus
// its header in include/fusegrad/ops/. Iterate with `opinfo::for_each(opinfo::registry(), fn)`.
//
// Edge values follow C99 Annex F where PyTorch does (it computes with the C library or Sleef,
// which follow it) and PyTorch's own rules elsewhere (digamma's poles, softplus' threshold,
// clamp's NaN and bounds, where's gradient).
#include <cmath>
#include <numbers>

#include <fusegrad/fusegrad.hpp>

#include "opinfo.hpp"
#include "references.hpp"

namespace opinfo {
namespace fg = fusegrad;

// f: a generic lambda of x (unary), a, b (binary) or c, a, b (ternary); ref: long double v,
// (a, b) or (c, a, b).
#define FG_OP1(name, call, deriv, expr, reference)           \
  make<1>(                                                   \
      name, call, deriv, [](const auto& x) { return expr; }, \
      []([[maybe_unused]] long double v) -> long double { return reference; })
#define FG_OP2(name, call, deriv, expr, reference)                          \
  make<2>(                                                                  \
      name, call, deriv, [](const auto& a, const auto& b) { return expr; }, \
      []([[maybe_unused]] long double a, [[maybe_unused]] long double b) -> long double { return reference; })
#define FG_OP3(name, call, deriv, expr, reference)                                         \
  make<3>(                                                                                 \
      name, call, deriv, [](const auto& c, const auto& a, const auto& b) { return expr; }, \
      []([[maybe_unused]] long double c, [[maybe_unused]] long double a,                   \
         [[maybe_unused]] long double b) -> long double { return reference; })

inline bool near_int(double v, double step = 1.0) { return std::abs(v / step - std::round(v / step)) < 0.05 / step; }

inline constexpr double pi = std::numbers::pi, euler = std::numbers::egamma, ln2 = std::numbers::ln2;

inline const auto& registry() {
  static const auto r = std::make_tuple(
      // ---- arithmetic ----------------------------------------------------------------------
      FG_OP1("neg", "-x", "-1", -x, -v).edges({{{0}, -0.0}, {{-0.0}, 0}, {{inf}, -inf}, {{nan}, nan}}),
      FG_OP2("add", "a + b", "1, 1", a + b, a + b).edges({{{-0.0, 0}, 0}, {{inf, -inf}, nan}, {{nan, 1}, nan}}),
      FG_OP2("sub", "a - b", "1, -1", a - b, a - b).edges({{{inf, inf}, nan}, {{0, 0}, 0}}),
      FG_OP2("mul", "a * b", "b, a", a * b, a * b).edges({{{inf, 0}, nan}, {{-0.0, 2}, -0.0}}),
      FG_OP2("div", "a / b", "1/b, -y/b", a / b, a / b)
          .skip([](const double* v) { return std::abs(v[1]) < 0.3; })
          .edges({{{1, 0}, inf}, {{1, -0.0}, -inf}, {{0, 0}, nan}, {{1, inf}, 0}})
          .grad_edges({{{1, 0}, {inf, -inf}}}),
      FG_OP1("add_scalar", "x + 2.5", "1", x + 2.5, v + 2.5L),
      FG_OP1("rsub_scalar", "2.5 - x", "-1", 2.5 - x, 2.5L - v),
      FG_OP1("mul_scalar", "x * 2.5", "2.5", x * 2.5, v * 2.5L),
      FG_OP1("div_scalar", "x / 2.5", "1/2.5", x / 2.5, v / 2.5L),
      FG_OP1("rdiv_scalar", "2.5 / x", "-y/x", 2.5 / x, 2.5L / v)
          .skip([](const double* v) { return std::abs(v[0]) < 0.3; })
          .edges({{{0}, inf}, {{-0.0}, -inf}, {{inf}, 0}}),
      FG_OP1("square", "square(x)", "2x", fg::square(x), v * v).edges({{{-0.0}, 0}, {{-inf}, inf}, {{nan}, nan}}),
      FG_OP1("reciprocal", "reciprocal(x)", "-y²", fg::reciprocal(x), 1 / v)
          .skip([](const double* v) { return std::abs(v[0]) < 0.3; })
          .edges({{{0}, inf}, {{-0.0}, -inf}, {{inf}, 0}, {{-inf}, -0.0}})
          .grad_edges({{{0}, {-inf}}}),
      FG_OP1("sqrt", "sqrt(x)", "1/(2y)", fg::sqrt(x), std::sqrt(v))
          .domains({pos})
          .edges({{{0}, 0}, {{-0.0}, -0.0}, {{-1}, nan}, {{inf}, inf}})
          .grad_edges({{{0}, {inf}}}),
      FG_OP1("rsqrt", "rsqrt(x)", "-y³/2", fg::rsqrt(x), 1 / std::sqrt(v))
          .domains({pos})
          .edges({{{0}, inf}, {{-0.0}, -inf}, {{-1}, nan}, {{inf}, 0}}),
      FG_OP1("pow_scalar_2", "pow(x, 2)", "2x", fg::pow(x, 2), v * v).edges({{{-inf}, inf}, {{nan}, nan}}),
      FG_OP1("pow_scalar_half", "pow(x, 0.5)", "0.5 x^-0.5", fg::pow(x, 0.5), std::pow(v, 0.5L))
          .domains({pos})
          .edges({{{-inf}, inf}, {{-0.0}, 0}, {{-1}, nan}}),
      FG_OP1("pow_scalar_0", "pow(x, 0)", "0", fg::pow(x, 0.0), 1)
          .edges({{{nan}, 1}, {{0}, 1}, {{inf}, 1}})
          .grad_edges({{{0}, {0}}}),
      FG_OP2("pow", "pow(a, b)", "b a^(b-1), y log a", fg::pow(a, b), std::pow(a, b))
          .domains({pos, any})
          .edges({{{1, nan}, 1}, {{nan, 0}, 1}, {{0, -1}, inf}, {{-0.0, -1}, -inf}, {{-8, 1.0 / 3}, nan}})
          .grad_edges({{{0, 2}, {0, 0}}}),
      FG_OP2("maximum", "maximum(a, b)", "[a > b] + [a = b]/2", fg::maximum(a, b), std::fmax(a, b))
          .skip([](const double* v) { return std::abs(v[0] - v[1]) < 0.1; })
          .edges({{{nan, 1}, nan}, {{1, nan}, nan}, {{-inf, 1}, 1}})
          .grad_edges({{{1, 1}, {0.5, 0.5}}, {{2, 1}, {1, 0}}}),
      FG_OP2("minimum", "minimum(a, b)", "[a < b] + [a = b]/2", fg::minimum(a, b), std::fmin(a, b))
          .skip([](const double* v) { return std::abs(v[0] - v[1]) < 0.1; })
          .edges({{{nan, 1}, nan}, {{1, nan}, nan}, {{-inf, 1}, -inf}})
          .grad_edges({{{1, 1}, {0.5, 0.5}}, {{2, 1}, {0, 1}}}),
      FG_OP1("abs", "abs(x)", "sign(x)", fg::abs(x), std::abs(v))
          .skip([](const double* v) { return std::abs(v[0]) < 0.1; })
          .edges({{{-0.0}, 0}, {{-inf}, inf}, {{nan}, nan}})
          .grad_edges({{{0}, {0}}}),
      // ---- exponentials and logarithms -----------------------------------------------------
      FG_OP1("exp", "exp(x)", "y", fg::exp(x), std::exp(v)).edges({{{0}, 1}, {{-inf}, 0}, {{inf}, inf}, {{nan}, nan}}),
      FG_OP1("log", "log(x)", "1/x", fg::log(x), std::log(v))
          .domains({pos})
          .edges({{{0}, -inf}, {{-0.0}, -inf}, {{-1}, nan}, {{1}, 0}, {{inf}, inf}})
          .grad_edges({{{0}, {inf}}}),
      FG_OP1("log1p", "log1p(x)", "1/(x + 1)", fg::log1p(x), std::log1p(v))
          .domains({{-0.8, 3}})
          .edges({{{0}, 0}, {{-0.0}, -0.0}, {{-1}, -inf}, {{-2}, nan}, {{inf}, inf}, {{1e-300}, 1e-300}})
          .grad_edges({{{-1}, {inf}}}),
      FG_OP1("expm1", "expm1(x)", "y + 1", fg::expm1(x), std::expm1(v))
          .edges({{{0}, 0}, {{-0.0}, -0.0}, {{-inf}, -1}, {{inf}, inf}, {{1e-300}, 1e-300}}),
      FG_OP1("log2", "log2(x)", "1/(x ln 2)", fg::log2(x), std::log2(v))
          .domains({pos})
          .edges({{{0}, -inf}, {{1}, 0}, {{8}, 3}, {{-1}, nan}, {{inf}, inf}}),
      FG_OP1("exp2", "exp2(x)", "y ln 2", fg::exp2(x), std::exp2(v))
          .edges({{{0}, 1}, {{3}, 8}, {{-1}, 0.5}, {{-inf}, 0}, {{inf}, inf}}),
      // ---- trigonometric and hyperbolic ----------------------------------------------------
      FG_OP1("sin", "sin(x)", "cos(x)", fg::sin(x), std::sin(v))
          .edges({{{0}, 0}, {{-0.0}, -0.0}, {{inf}, nan}, {{nan}, nan}}),
      FG_OP1("cos", "cos(x)", "-sin(x)", fg::cos(x), std::cos(v)).edges({{{0}, 1}, {{-inf}, nan}, {{nan}, nan}}),
      FG_OP1("tan", "tan(x)", "1 + y²", fg::tan(x), std::tan(v))
          .domains({{-1.4, 1.4}})
          .edges({{{0}, 0}, {{-0.0}, -0.0}, {{inf}, nan}, {{nan}, nan}}),
      FG_OP1("asin", "asin(x)", "1/√(1 - x²)", fg::asin(x), std::asin(v))
          .domains({unit})
          .edges({{{0}, 0}, {{-0.0}, -0.0}, {{1}, pi / 2}, {{2}, nan}})
          .grad_edges({{{1}, {inf}}}),
      FG_OP1("acos", "acos(x)", "-1/√(1 - x²)", fg::acos(x), std::acos(v))
          .domains({unit})
          .edges({{{1}, 0}, {{-1}, pi}, {{2}, nan}})
          .grad_edges({{{1}, {-inf}}}),
      FG_OP1("atan", "atan(x)", "1/(1 + x²)", fg::atan(x), std::atan(v))
          .edges({{{-0.0}, -0.0}, {{inf}, pi / 2}, {{-inf}, -pi / 2}}),
      FG_OP2("atan2", "atan2(a, b)", "b/(a² + b²), -a/(a² + b²)", fg::atan2(a, b), std::atan2(a, b))
          .skip([](const double* v) { return std::hypot(v[0], v[1]) < 0.3; })
          .edges({{{0, 0}, 0},
                  {{-0.0, -0.0}, -pi},
                  {{0, -0.0}, pi},
                  {{inf, inf}, pi / 4},
                  {{-inf, -inf}, -3 * pi / 4},
                  {{1, 0}, pi / 2}})
          .grad_edges({{{0, 0}, {nan, nan}}}),
      FG_OP1("tanh", "tanh(x)", "1 - y²", fg::tanh(x), std::tanh(v)).edges({{{-0.0}, -0.0}, {{inf}, 1}, {{-inf}, -1}}),
      // tanh's gradient from its output (ATen's tanh_backward(grad, output)): g (1 - y²)
      FG_OP2("tanh_backward", "tanh_backward(g, y)", "1 - y², -2gy", fg::tanh_backward(a, b), a * (1 - b * b))
          .domains({any, unit})
          .edges({{{2, 0}, 2}, {{1, 1}, 0}, {{inf, 0}, inf}, {{inf, 1}, nan}, {{nan, 0}, nan}}),
      FG_OP1("sinh", "sinh(x)", "cosh(x)", fg::sinh(x), std::sinh(v))
          .edges({{{-0.0}, -0.0}, {{inf}, inf}, {{-inf}, -inf}}),
      FG_OP1("cosh", "cosh(x)", "sinh(x)", fg::cosh(x), std::cosh(v)).edges({{{0}, 1}, {{-inf}, inf}, {{nan}, nan}}),
      FG_OP1("asinh", "asinh(x)", "1/√(x² + 1)", fg::asinh(x), std::asinh(v))
          .edges({{{-0.0}, -0.0}, {{inf}, inf}, {{-inf}, -inf}}),
      FG_OP1("acosh", "acosh(x)", "1/√(x² - 1)", fg::acosh(x), std::acosh(v))
          .domains({ge1})
          .edges({{{1}, 0}, {{0.5}, nan}, {{inf}, inf}})
          .grad_edges({{{1}, {inf}}}),
      FG_OP1("atanh", "atanh(x)", "1/(1 - x²)", fg::atanh(x), std::atanh(v))
          .domains({unit})
          .edges({{{1}, inf}, {{-1}, -inf}, {{2}, nan}, {{-0.0}, -0.0}})
          .grad_edges({{{1}, {inf}}}),
      // ---- special functions ---------------------------------------------------------------
      FG_OP1("erf", "erf(x)", "2/√π exp(-x²)", fg::erf(x), std::erf(v))
          .edges({{{0}, 0}, {{-0.0}, -0.0}, {{inf}, 1}, {{-inf}, -1}, {{1e300}, 1}}),
      FG_OP1("erfc", "erfc(x)", "-2/√π exp(-x²)", fg::erfc(x), std::erfc(v))
          .domains({{-2, 6}})
          .edges({{{0}, 1}, {{inf}, 0}, {{-inf}, 2}, {{1e300}, 0}}),
      FG_OP1("lgamma", "lgamma(x)", "digamma(x)", fg::lgamma(x), std::lgamma(v))
          .domains({{-2.5, 4}})
          .skip([](const double* v) { return v[0] < 0.2 && near_int(v[0]); })
          .edges({{{1}, 0},
                  {{2}, 0},
                  {{0}, inf},
                  {{-0.0}, inf},
                  {{-1}, inf},
                  {{inf}, inf},
                  {{-inf}, inf},
                  {{0.5}, 0.5723649429247001}})
          .grad_edges({{{1}, {-euler}}, {{2}, {1 - euler}}}),
      FG_OP1("digamma", "digamma(x)", "polygamma(1, x)", fg::digamma(x), ref::digamma(v))
          .domains({{-2.5, 4}})
          .skip([](const double* v) { return v[0] < 0.2 && near_int(v[0]); })
          .tol(1e-5, 1e-12)
          .edges({{{0}, -inf},
                  {{-0.0}, inf},
                  {{-1}, nan},
                  {{-inf}, nan},
                  {{inf}, inf},
                  {{1}, -euler},
                  {{0.5}, -euler - 2 * ln2}})
          .grad_edges({{{1}, {pi * pi / 6}}}),
      FG_OP1("polygamma_1", "polygamma(1, x)", "polygamma(2, x)", fg::polygamma(1, x), ref::trigamma(v))
          .domains({{-2.5, 4}})
          .skip([](const double* v) { return v[0] < 0.2 && near_int(v[0]); })
          .tol(1e-4, 1e-7)
          .edges({{{1}, pi * pi / 6}, {{0}, inf}, {{inf}, 0}})
          .differs("PyTorch's trigamma algorithm: accurate to about 1e-8 in double (six recurrence steps before its "
                   "asymptotic series), and to about 1e-5 in float near the poles (sin(πx) in float)"),
      FG_OP1("polygamma_2", "polygamma(2, x)", "polygamma(3, x)", fg::polygamma(2, x), ref::tetragamma(v))
          .domains({{0.5, 4}})
          .tol(1e-5, 1e-12)
          .edges({{{1}, -2.4041138063191885}}),
      // ---- activations ---------------------------------------------------------------------
      FG_OP1("sigmoid", "sigmoid(x)", "y (1 - y)", fg::sigmoid(x), 1 / (1 + std::exp(-v)))
          .edges({{{0}, 0.5}, {{inf}, 1}, {{-inf}, 0}, {{nan}, nan}}),
      // sigmoid's gradient from its output (ATen's sigmoid_backward(grad, output)): g y (1 - y)
      FG_OP2("sigmoid_backward", "sigmoid_backward(g, y)", "y (1 - y), g (1 - 2y)", fg::sigmoid_backward(a, b),
             a * (b * (1 - b)))
          .domains({any, domain{0.05, 0.95}})
          .edges({{{1, 0.5}, 0.25}, {{2, 1}, 0}, {{2, 0}, 0}, {{inf, 0.5}, inf}, {{inf, 0}, nan}}),
      FG_OP1("relu", "relu(x)", "[y > 0]", fg::relu(x), v > 0 ? v : 0)
          .skip([](const double* v) { return std::abs(v[0]) < 0.1; })
          .edges({{{0}, 0}, {{-1}, 0}, {{inf}, inf}, {{-inf}, 0}, {{nan}, nan}})
          .grad_edges({{{0}, {0}}, {{1}, {1}}}),
      FG_OP1("softplus", "softplus(x)", "sigmoid(x), 1 above 20", fg::softplus(x), v > 20 ? v : std::log1p(std::exp(v)))
          .domains({{-5, 25}})
          .skip([](const double* v) { return std::abs(v[0] - 20) < 0.1; })
          .edges({{{0}, ln2}, {{30}, 30}, {{-inf}, 0}, {{inf}, inf}, {{nan}, nan}})
          .grad_edges({{{30}, {1}}, {{0}, {0.5}}}),
      FG_OP1("silu", "silu(x)", "σ (1 + x (1 - σ))", fg::silu(x), v / (1 + std::exp(-v)))
          .domains({{-6, 6}})
          .edges({{{0}, 0}, {{inf}, inf}, {{-inf}, nan}, {{nan}, nan}}),
      FG_OP1("gelu", "gelu(x)", "Φ(x) + x φ(x)", fg::gelu(x), v * 0.5L * (1 + std::erf(v / std::sqrt(2.0L))))
          .domains({{-4, 4}})
          .edges({{{0}, 0}, {{inf}, inf}, {{-inf}, nan}, {{nan}, nan}}),
      // ---- piecewise: rounding, clamping, signs, comparisons, selection --------------------
      FG_OP1("floor", "floor(x)", "0", fg::floor(x), std::floor(v))
          .skip([](const double* v) { return near_int(v[0]); })
          .edges({{{-0.5}, -1}, {{-0.0}, -0.0}, {{inf}, inf}, {{nan}, nan}})
          .grad_edges({{{1.5}, {0}}, {{1}, {0}}}),
      FG_OP1("ceil", "ceil(x)", "0", fg::ceil(x), std::ceil(v))
          .skip([](const double* v) { return near_int(v[0]); })
          .edges({{{-0.5}, -0.0}, {{0.5}, 1}, {{-inf}, -inf}, {{nan}, nan}})
          .grad_edges({{{1.5}, {0}}}),
      FG_OP1("round", "round(x)", "0", fg::round(x), std::nearbyint(v))
          .skip([](const double* v) { return near_int(v[0] + 0.5); })
          .edges({{{0.5}, 0}, {{1.5}, 2}, {{2.5}, 2}, {{-0.5}, -0.0}, {{inf}, inf}, {{nan}, nan}})
          .grad_edges({{{0.5}, {0}}}),
      FG_OP1("trunc", "trunc(x)", "0", fg::trunc(x), std::trunc(v))
          .skip([](const double* v) { return near_int(v[0]); })
          .edges({{{-0.7}, -0.0}, {{1.7}, 1}, {{-inf}, -inf}, {{nan}, nan}}),
      FG_OP1("clamp", "clamp(x, -0.5, 0.8)", "[-0.5 <= x <= 0.8]", fg::clamp(x, -0.5, 0.8),
             std::fmin(std::fmax(v, -0.5L), 0.8L))
          .skip([](const double* v) { return std::abs(v[0] + 0.5) < 0.05 || std::abs(v[0] - 0.8) < 0.05; })
          .edges({{{nan}, nan}, {{-inf}, -0.5}, {{inf}, 0.8}, {{0}, 0}})
          .grad_edges({{{-0.5}, {1}}, {{0.8}, {1}}, {{-1}, {0}}, {{1}, {0}}, {{nan}, {0}}}),
      FG_OP1("clamp_reversed", "clamp(x, 1, -1)", "0", fg::clamp(x, 1, -1), -1)
          .edges({{{0}, -1}, {{5}, -1}, {{nan}, nan}}),
      FG_OP1("clamp_min", "clamp_min(x, 0.3)", "[x >= 0.3]", fg::clamp_min(x, 0.3), std::fmax(v, 0.3L))
          .skip([](const double* v) { return std::abs(v[0] - 0.3) < 0.05; })
          .edges({{{nan}, nan}, {{-inf}, 0.3}})
          .grad_edges({{{0.3}, {1}}, {{0}, {0}}}),
      FG_OP1("clamp_max", "clamp_max(x, -0.2)", "[x <= -0.2]", fg::clamp_max(x, -0.2), std::fmin(v, -0.2L))
          .skip([](const double* v) { return std::abs(v[0] + 0.2) < 0.05; })
          .edges({{{nan}, nan}, {{inf}, -0.2}})
          .grad_edges({{{-0.2}, {1}}, {{0}, {0}}}),
      FG_OP1("sign", "sign(x)", "none", fg::sign(x),
             v > 0    ? 1
             : v < 0  ? -1
             : v == 0 ? 0
                      : v)
          .edges({{{0}, 0}, {{-2}, -1}, {{inf}, 1}, {{nan}, nan}})
          .differs("sign(NaN) is NaN (NumPy's rule: a NaN stays visible) where PyTorch gives 0; sign and step carry no "
                   "gradient (their results never require grad) where PyTorch's sign has a zero gradient"),
      FG_OP1("step", "step(x)", "none", fg::step(x), v > 0 ? 1 : 0).edges({{{0}, 0}, {{nan}, 0}, {{1e-30}, 1}}),
      FG_OP1("zeros_like", "zeros_like(x)", "none", fg::zeros_like(x), 0).edges({{{nan}, 0}, {{inf}, 0}}),
      FG_OP1("detach", "detach(x)", "none", fg::detach(x), v).edges({{{nan}, nan}, {{-inf}, -inf}, {{-0.0}, -0.0}}),
      FG_OP1("logical_not", "logical_not(x)", "none", fg::logical_not(x), v == 0 ? 1 : 0)
          .edges({{{0}, 1}, {{-0.0}, 1}, {{nan}, 0}, {{2}, 0}}),
      FG_OP2("gt", "gt(a, b)", "none", fg::gt(a, b), a > b).edges({{{nan, 1}, 0}, {{1, 1}, 0}}),
      FG_OP2("ge", "ge(a, b)", "none", fg::ge(a, b), a >= b).edges({{{nan, nan}, 0}, {{1, 1}, 1}}),
      FG_OP2("lt", "lt(a, b)", "none", fg::lt(a, b), a < b).edges({{{1, nan}, 0}, {{-inf, inf}, 1}}),
      FG_OP2("le", "le(a, b)", "none", fg::le(a, b), a <= b).edges({{{nan, 1}, 0}, {{1, 1}, 1}}),
      FG_OP2("eq", "eq(a, b)", "none", fg::eq(a, b), a == b).edges({{{nan, nan}, 0}, {{0, -0.0}, 1}}),
      FG_OP2("ne", "ne(a, b)", "none", fg::ne(a, b), a != b).edges({{{nan, nan}, 1}, {{0, -0.0}, 0}}),
      FG_OP1("gt_scalar", "gt(x, 0.5)", "none", fg::gt(x, 0.5), v > 0.5L).edges({{{nan}, 0}, {{0.5}, 0}}),
      FG_OP1("ge_scalar", "ge(x, 0.5)", "none", fg::ge(x, 0.5), v >= 0.5L).edges({{{nan}, 0}, {{0.5}, 1}}),
      FG_OP1("lt_scalar", "lt(x, 0.5)", "none", fg::lt(x, 0.5), v < 0.5L).edges({{{nan}, 0}, {{-inf}, 1}}),
      FG_OP1("le_scalar", "le(x, 0.5)", "none", fg::le(x, 0.5), v <= 0.5L).edges({{{nan}, 0}, {{0.5}, 1}}),
      FG_OP1("eq_scalar", "eq(x, 0.5)", "none", fg::eq(x, 0.5), v == 0.5L).edges({{{nan}, 0}, {{0.5}, 1}}),
      FG_OP1("ne_scalar", "ne(x, 0.5)", "none", fg::ne(x, 0.5), v != 0.5L).edges({{{nan}, 1}, {{0.5}, 0}}),
      FG_OP3("where", "where(c, a, b)", "0, [c], [not c]", fg::where(c, a, b), c != 0 ? a : b)
          .domains({mask, any, any})
          .edges({{{1, -0.0, 5}, -0.0}, {{0, 5, -0.0}, -0.0}, {{1, 1, nan}, 1}, {{0, inf, 2}, 2}, {{nan, 1, 2}, 1}})
          .grad_edges({{{1, 3, nan}, {0, 1, 0}}, {{0, inf, 1}, {0, 0, 1}}})
          .differs("the condition is a 0/1 mask in the operands' element type (nonzero and NaN count as true); "
                   "PyTorch's is a bool tensor"),
      FG_OP2("where_scalar_b", "where(c, a, 0.25)", "0, [c]", fg::where(a, b, 0.25), a != 0 ? b : 0.25L)
          .domains({mask, any})
          .edges({{{0, nan}, 0.25}, {{1, -0.0}, -0.0}}),
      FG_OP2("where_scalar_a", "where(c, -1.5, b)", "0, [not c]", fg::where(a, -1.5, b), a != 0 ? -1.5L : b)
          .domains({mask, any})
          .edges({{{1, nan}, -1.5}, {{0, -0.0}, -0.0}}),
      FG_OP2("masked_fill", "masked_fill(x, m, -1.5)", "[not m]", fg::masked_fill(a, b, -1.5), b != 0 ? -1.5L : a)
          .domains({any, mask})
          .edges({{{nan, 1}, -1.5}, {{2, 0}, 2}}),
      // ---- two-operand math ----------------------------------------------------------------
      FG_OP2("hypot", "hypot(a, b)", "a/y, b/y", fg::hypot(a, b), std::hypot(a, b))
          .skip([](const double* v) { return std::hypot(v[0], v[1]) < 0.3; })
          .edges({{{3, 4}, 5},
                  {{inf, nan}, inf},
                  {{nan, -inf}, inf},
                  {{1e300, 1e300}, 1.4142135623730951e300},
                  {{-0.0, 0}, 0}})
          .grad_edges({{{0, 0}, {nan, nan}}}),
      FG_OP2("fmod", "fmod(a, b)", "1, -trunc(a/b)", fg::fmod(a, b), std::fmod(a, b))
          .domains({any, {0.3, 2}})
          .skip([](const double* v) { return near_int(v[0] / v[1]); })
          .edges({{{5, 3}, 2}, {{-5, 3}, -2}, {{-0.0, 1}, -0.0}, {{1, inf}, 1}, {{inf, 1}, nan}, {{1, 0}, nan}}),
      FG_OP1("fmod_scalar", "fmod(x, 1.5)", "1", fg::fmod(x, 1.5), std::fmod(v, 1.5L))
          .skip([](const double* v) { return near_int(v[0], 1.5); })
          .edges({{{-0.0}, -0.0}, {{inf}, nan}, {{4}, 1}, {{-4}, -1}}),
      FG_OP2("lerp_scalar", "lerp(a, b, 0.3)", "0.7, 0.3", fg::lerp(a, b, 0.3), a + 0.3L * (b - a))
          .edges({{{1, inf}, inf}}),
      FG_OP2("lerp_scalar_high", "lerp(a, b, 0.75)", "0.25, 0.75", fg::lerp(a, b, 0.75), b - (b - a) * 0.25L)
          .edges({{{1, 1}, 1}, {{0, 4}, 3}}),
      FG_OP3("lerp", "lerp(a, b, w)", "1 - w, w, b - a", fg::lerp(a, b, c), a + c * (b - a))
          .domains({domain{-1, 2}, any, any})
          .skip([](const double* v) { return std::abs(std::abs(v[0]) - 0.5) < 0.05; })
          .edges({{{0.3, 1, 2}, 1.3}, {{0.75, 0, 4}, 3}, {{1, 1, 2}, 2}}));
  return r;
}

#undef FG_OP1
#undef FG_OP2
#undef FG_OP3

}  // namespace opinfo
