// Slice 0 of the compile-time graph family (see compile_family.hpp): its graphs' seeds.
#include "compile_family.hpp"

namespace fuzz::family {
std::vector<entry> slice_0() {
  return {graph_of<1>::value, graph_of<2>::value, graph_of<3>::value, graph_of<4>::value, graph_of<5>::value,
          graph_of<6>::value, graph_of<7>::value, graph_of<8>::value, graph_of<9>::value, graph_of<10>::value};
}
}  // namespace fuzz::family
