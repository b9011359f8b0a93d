// The precompiled runtime for element type float: fusegrad's generic runtime instantiated once
// (see fusegrad/runtime.hpp). Part of the CMake target fusegrad::runtime, whose users see these
// instantiations as extern.
#define FUSEGRAD_BUILDING_RUNTIME
#include "fusegrad/fusegrad.hpp"

#define FUSEGRAD_RT_EXTERN
namespace fusegrad {
FUSEGRAD_RUNTIME_INSTANCES(float)
FUSEGRAD_RUNTIME_JIT_SHARED
}  // namespace fusegrad

// The instruction set this runtime is built for (see fusegrad/runtime.hpp).
template <class Arch>
const bool fusegrad::detail::
    fusegrad_runtime_was_built_for_another_instruction_set__compile_this_file_with_the_flags_of_target_fusegrad_fusegrad<
        Arch>::linked = true;
template const bool fusegrad::detail::
    fusegrad_runtime_was_built_for_another_instruction_set__compile_this_file_with_the_flags_of_target_fusegrad_fusegrad<
        xsimd::default_arch>::linked;
