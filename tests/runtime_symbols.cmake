# Which functions a TU compiles, read from its object's symbols.
#
# By default: a user TU linked to the precompiled runtime compiles none of the runtime's own
# code. The runtime's class templates are declared extern in its TUs, but an explicit
# instantiation declaration does not stop a compiler from instantiating inline members
# (defined in the class body, or implicitly declared, such as a destructor) where it might
# inline them; each such function that a user TU calls would be compiled there again.
#
# With FORBIDDEN (a pattern) and WHY: the objects define no function matching it, WHY saying
# what that means; with REQUIRED (a pattern), they define at least one
# function matching it (so that the check cannot pass on an object that compiled nothing).
#   cmake -DNM=<nm> -DOBJECTS=<a.o|b.o> [-DFORBIDDEN=<p> -DWHY=<text> -DREQUIRED=<p>] -P runtime_symbols.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
if(FORBIDDEN)
  set(forbidden "${FORBIDDEN}")
else()
  set(forbidden
    "fusegrad::ir::graph<(float|double)>::"
    "fusegrad::detail::jit::program<(float|double)>::"
    "fusegrad::detail::jit::row_step<(float|double)>::"
    "fusegrad::detail::jit::(trace|entry|cache|replayer|once_recording)<(float|double)>::"
    "fusegrad::detail::jit::entry_info<(float|double)>"
    "fusegrad::detail::jit::begin_tracer<(float|double)>"
    "fusegrad::detail::jit::tracing_scope<void, "
    "fusegrad::compiled_autograd::detail::run<(float|double)>")
  set(WHY "user TUs compiled functions of the precompiled runtime (declare them out of the class body, or call them through a function the runtime instantiates)")
endif()
set(failed "")
set(found_required FALSE)
foreach(obj IN LISTS objects)
  execute_process(COMMAND ${NM} -C --defined-only ${obj} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES " [TtWw] ")
      continue()
    endif()
    if(REQUIRED AND line MATCHES "${REQUIRED}")
      set(found_required TRUE)
    endif()
    foreach(pattern IN LISTS forbidden)
      if(line MATCHES "${pattern}")
        string(APPEND failed "\n  ${obj}: ${line}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(failed)
  message(FATAL_ERROR "${WHY}:${failed}")
endif()
if(REQUIRED AND NOT found_required)
  message(FATAL_ERROR "no function matching '${REQUIRED}' in ${OBJECTS}: the check would see nothing")
endif()
list(LENGTH objects n)
message(STATUS "${n} TUs checked: none defines a function it should not")
