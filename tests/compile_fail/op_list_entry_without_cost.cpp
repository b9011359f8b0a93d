// An op of the op list (ops/list.hpp) must declare its cost: without it the save/recompute
// plans would count it as cheap arithmetic. This is the check ops/all.hpp runs on every entry
// of the list, run on an op that declares no `cost`.
// expect: fusegrad: ops::cube_op is in the op list (ops/list.hpp) but declares no `static constexpr double cost`
// expect-first: fusegrad: ops::cube_op is in the op list (ops/list.hpp) but declares no `static constexpr double cost`
#include <fusegrad/ops/all.hpp>

namespace fusegrad::ops {
struct cube_op {
  static constexpr std::string_view name = "cube", grad_fn = "CubeBackward0";
  template <class V>
  static constexpr V value(const V& x) {
    return x * x * x;
  }
  static constexpr auto derivative(const auto& x, const auto&, const auto& g) { return g * (x * x * 3.0); }
};
FUSEGRAD_OP_CHECK(U, plain, cube_op)
}  // namespace fusegrad::ops

int main() {}
