# fusegrad_precompile_headers(<target> [HEADERS <header>...])
#
# Gives <target> fusegrad's headers precompiled: one precompiled header, built once for the
# target and reused by each of its TUs, which then parse none of fusegrad (nor the standard
# headers and xsimd it includes). HEADERS names the headers to precompile, as a TU includes
# them (default: fusegrad/fusegrad.hpp; a component such as fusegrad/compile.hpp for a target
# that uses one part). Call it after target_link_libraries(<target> ... fusegrad::fusegrad)
# (or fusegrad::header_only).
#
#   add_executable(app main.cpp model.cpp)
#   target_link_libraries(app PRIVATE fusegrad::fusegrad)
#   fusegrad_precompile_headers(app)
function(fusegrad_precompile_headers target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "HEADERS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "fusegrad_precompile_headers(${target}): unexpected arguments '${arg_UNPARSED_ARGUMENTS}'; expected HEADERS <header>...")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "fusegrad_precompile_headers: '${target}' is not a target; call it after add_executable/add_library")
  endif()
  if(NOT arg_HEADERS)
    set(arg_HEADERS fusegrad/fusegrad.hpp)
  endif()
  set(headers)
  foreach(h IN LISTS arg_HEADERS)
    list(APPEND headers "<${h}>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()
