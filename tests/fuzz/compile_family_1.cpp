// Slice 1 of the compile-time graph family (see compile_family.hpp): its graphs' seeds.
#include "compile_family.hpp"

namespace fuzz::family {
std::vector<entry> slice_1() {
  return {graph_of<11>::value, graph_of<12>::value, graph_of<13>::value, graph_of<14>::value, graph_of<15>::value,
          graph_of<16>::value, graph_of<17>::value, graph_of<18>::value, graph_of<19>::value, graph_of<20>::value};
}
}  // namespace fuzz::family
