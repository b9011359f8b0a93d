// Run-time programs: the printer (see program.hpp).
#include "program_internal.hpp"

namespace fuzz {

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
        case op::softmax_dim:
        case op::log_softmax_dim:
          e = std::string("fg::") + (i.k == op::softmax_dim ? "softmax(" : "log_softmax(") + A + ", " +
              std::to_string(i.i0) + ")";
          break;
        case op::logsumexp_dim:
          e = "fg::logsumexp(" + A + ", " + std::to_string(i.i0) + ", " + (i.keepdim ? "true" : "false") + ")";
          break;
        case op::layer_norm_last: e = "fg::layer_norm(" + A + ")"; break;
        case op::rms_norm_last: e = "fg::rms_norm(" + A + ")"; break;
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
      << (path.jit_eager_backend ? ", {.backend = fg::jit_backend::eager}"
          : path.trace_once      ? ", {.trace_once = true}"
                                 : "")
      << ");\n";
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
