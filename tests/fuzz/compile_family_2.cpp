// Slice 2 of the compile-time graph family (see compile_family.hpp): its graphs' seeds.
#include "compile_family.hpp"

namespace fuzz::family {
std::vector<entry> slice_2() {
  return {graph_of<21>::value, graph_of<22>::value, graph_of<23>::value, graph_of<24>::value, graph_of<25>::value,
          graph_of<26>::value, graph_of<27>::value, graph_of<28>::value, graph_of<29>::value, graph_of<30>::value};
}
}  // namespace fuzz::family
