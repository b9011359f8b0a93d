// The precompiled runtime for element type double: fusegrad's generic runtime instantiated once
// (see fusegrad/runtime.hpp). Part of the CMake target fusegrad::runtime, whose users see these
// instantiations as extern.
#define FUSEGRAD_BUILDING_RUNTIME
#include "fusegrad/fusegrad.hpp"

#define FUSEGRAD_RT_EXTERN
namespace fusegrad {
FUSEGRAD_RUNTIME_INSTANCES(double)
}  // namespace fusegrad
