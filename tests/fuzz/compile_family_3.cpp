// Slice 3 of the compile-time graph family (see compile_family.hpp): its graphs' seeds.
#include "compile_family.hpp"

namespace fuzz::family {
std::vector<entry> slice_3() {
  return {graph_of<31>::value, graph_of<32>::value, graph_of<33>::value, graph_of<34>::value, graph_of<35>::value,
          graph_of<36>::value, graph_of<37>::value, graph_of<38>::value, graph_of<39>::value, graph_of<40>::value};
}
}  // namespace fuzz::family
