# A user TU linked to the precompiled runtime compiles none of the runtime's own code. The
# runtime's class templates are declared extern in its TUs, but an explicit instantiation
# declaration does not stop a compiler from instantiating inline members (defined in the class
# body, or implicitly declared, such as a destructor) where it might inline them; each such
# function that a user TU calls would be compiled there again. This check lists the functions
# the objects OBJECTS (a |-separated list) define and fails on any of the runtime's classes.
#   cmake -DNM=<nm> -DOBJECTS=<a.o|b.o> -P runtime_symbols.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
set(runtime_classes
  "fusegrad::ir::graph<(float|double)>::"
  "fusegrad::detail::jit::program<(float|double)>::"
  "fusegrad::detail::jit::row_step<(float|double)>::"
  "fusegrad::detail::jit::(trace|entry|cache|replayer|once_recording)<(float|double)>::"
  "fusegrad::detail::jit::entry_info<(float|double)>"
  "fusegrad::detail::jit::tracing_scope<void>::"
  "fusegrad::compiled_autograd::detail::run<(float|double)>")
set(failed "")
foreach(obj IN LISTS objects)
  execute_process(COMMAND ${NM} -C --defined-only ${obj} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line IN LISTS lines)
    foreach(pattern IN LISTS runtime_classes)
      if(line MATCHES " [TtWw] .*${pattern}")
        string(APPEND failed "\n  ${obj}: ${line}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(failed)
  message(FATAL_ERROR "user TUs compiled functions of the precompiled runtime (declare them "
                      "out of the class body, or call them through a function the runtime "
                      "instantiates):${failed}")
endif()
list(LENGTH objects n)
message(STATUS "${n} user TUs define no function of the precompiled runtime")
