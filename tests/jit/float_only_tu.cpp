// A header-only TU whose jitted functions take float tensors, in both modes (the default and
// trace_once). The test `jit_one_element_type` reads its object's symbols: it must compile the
// run-time compiler for float only, none of double's (each element type's tracer is the whole
// run-time compiler once more).
#include <fusegrad/jit.hpp>

namespace fg = fusegrad;

fg::tensor<float> jitted_float(const fg::tensor<float>& x) {
  static const auto f = fg::jit([](const fg::tensor<float>& v) { return fg::exp(v) * 2.0f; });
  static const auto once = fg::jit([](const fg::tensor<float>& v) { return fg::tanh(v); }, {.trace_once = true});
  return f(once(x));
}
