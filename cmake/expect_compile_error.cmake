# cmake -DCOMPILER=<c++> -DSOURCE=<file.cpp> -DFLAGS_FILE=<flags.cmake>
#       -P expect_compile_error.cmake
#
# Passes iff compiling SOURCE FAILS and the compiler output contains every
# phrase given on a "// expect: <phrase>" line of SOURCE.
cmake_minimum_required(VERSION 3.25)

foreach(var COMPILER SOURCE FLAGS_FILE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_compile_error.cmake: ${var} not set")
  endif()
endforeach()

include(${FLAGS_FILE})  # -> FUSEGRAD_COMPILE_FAIL_FLAGS

file(STRINGS ${SOURCE} _lines REGEX "^[ \t]*//[ \t]*expect:")
set(_phrases)
foreach(line IN LISTS _lines)
  string(REGEX REPLACE "^[ \t]*//[ \t]*expect:[ \t]*" "" phrase "${line}")
  string(STRIP "${phrase}" phrase)
  if(NOT phrase STREQUAL "")
    list(APPEND _phrases "${phrase}")
  endif()
endforeach()

# Plain ASCII quotes, no colours: keep the diagnostics greppable.
set(ENV{LC_ALL} C)
set(ENV{LANG} C)
execute_process(
  COMMAND ${COMPILER} ${FUSEGRAD_COMPILE_FAIL_FLAGS} -fno-diagnostics-color ${SOURCE}
  RESULT_VARIABLE _rc
  OUTPUT_VARIABLE _out
  ERROR_VARIABLE  _out)

if(_rc STREQUAL "0")
  message(FATAL_ERROR "${SOURCE} compiled successfully, but it must not compile.")
endif()

set(_missing)
foreach(phrase IN LISTS _phrases)
  string(FIND "${_out}" "${phrase}" _pos)
  if(_pos EQUAL -1)
    list(APPEND _missing "${phrase}")
  endif()
endforeach()

# "// expect-first: <phrase>": the first error the compiler reports contains the phrase (the
# sentence comes before any error from inside the standard library or fusegrad's internals).
file(STRINGS ${SOURCE} _first_lines REGEX "^[ \t]*//[ \t]*expect-first:")
if(_first_lines)
  string(REGEX MATCH "[^\n]*error[^\n]*" _first_error "${_out}")
  foreach(line IN LISTS _first_lines)
    string(REGEX REPLACE "^[ \t]*//[ \t]*expect-first:[ \t]*" "" phrase "${line}")
    string(STRIP "${phrase}" phrase)
    string(FIND "${_first_error}" "${phrase}" _pos)
    if(_pos EQUAL -1)
      list(APPEND _missing "first error: ${phrase} (the first error was: ${_first_error})")
    endif()
  endforeach()
endif()

if(_missing)
  string(LENGTH "${_out}" _len)
  if(_len GREATER 20000)
    string(SUBSTRING "${_out}" 0 20000 _out)
    string(APPEND _out "\n... [compiler output truncated]")
  endif()
  list(JOIN _missing "\n  " _missing_txt)
  message(FATAL_ERROR
    "${SOURCE} failed to compile (as it should), but the diagnostics lack:\n"
    "  ${_missing_txt}\n"
    "Compiler exit status: ${_rc}\nCompiler output:\n${_out}")
endif()

message(STATUS "OK: ${SOURCE} failed to compile with the expected diagnostics.")
