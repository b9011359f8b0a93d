# Fails when clang-tidy finds, in the library's headers (include/fusegrad/), a finding of a check
# that .clang-tidy enables. Only clang-tidy 14 (Debian 12's) is asked: other versions have other
# checks and count complexity differently.
#
#   cmake -DCLANG_TIDY=clang-tidy-14 -DROOT=. -DBUILD=<build dir> "-DSOURCES=a.cpp|b.cpp" -P tools/check_tidy.cmake
#                                                                               (CTest: `tidy`, cmake/tidy.cmake)
# BUILD holds compile_commands.json; SOURCES are translation units listed in it. Findings in the
# sources themselves do not count: they are the means of parsing and instantiating the headers.
# An intended finding is suppressed where it is, with its reason (see .clang-tidy).
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  set(ROOT "${CMAKE_CURRENT_LIST_DIR}/..")
endif()
if(NOT CLANG_TIDY)
  set(CLANG_TIDY clang-tidy-14)
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
if(NOT EXISTS "${BUILD}/compile_commands.json")
  message(FATAL_ERROR "no compile_commands.json in '${BUILD}': configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
endif()
string(REPLACE "|" ";" SOURCES "${SOURCES}")

# Diagnostics only in the library's headers: a line filter that names each of them (clang-tidy
# reports a main file's findings whatever the header filter says; a file the line filter does
# not name reports none).
file(GLOB_RECURSE headers RELATIVE "${ROOT}" "${ROOT}/include/fusegrad/*.hpp" "${ROOT}/include/fusegrad/*.h")
list(TRANSFORM headers REPLACE "(.+)" "{\"name\":\"/\\1\"}")
list(JOIN headers "," filter)

set(findings)
foreach(src IN LISTS SOURCES)
  execute_process(COMMAND "${CLANG_TIDY}" -p "${BUILD}" --quiet "--config-file=${ROOT}/.clang-tidy"
                          "--line-filter=[${filter}]" "${src}"
                  WORKING_DIRECTORY "${ROOT}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # A TU compiled with -fopenmp needs clang's own omp.h, which clang-tidy-14 does not bring.
  if(out MATCHES "'omp.h' file not found")
    message(FATAL_ERROR "clang-tidy cannot find clang's omp.h for ${src} (compiled with -fopenmp): "
                        "apt-get install libomp-14-dev")
  endif()
  string(REPLACE ";" "," out "${out}")  # a list's separator; some messages have one
  # A finding: "<file>:<line>:<col>: warning|error: <text> [<check>...]", then its notes and source lines.
  string(REGEX MATCHALL "[^\n]+:[0-9]+:[0-9]+: (warning|error): [^\n]*" found "${out}")
  list(LENGTH found n)
  file(RELATIVE_PATH name "${ROOT}" "${src}")
  message(STATUS "${name}: ${n} findings")
  if(NOT rc EQUAL 0 AND n EQUAL 0)
    message(FATAL_ERROR "${CLANG_TIDY} failed on ${name} (exit code ${rc}):\n${err}\n${out}")
  endif()
  list(APPEND findings ${found})
endforeach()
list(TRANSFORM findings REPLACE "^${ROOT}/" "")
list(REMOVE_DUPLICATES findings)
list(SORT findings)
list(LENGTH findings count)
if(count GREATER 0)
  string(REPLACE ";" "\n  " findings "${findings}")
  message(FATAL_ERROR "${count} clang-tidy findings in include/fusegrad/ (fix each, or suppress an intended one "
                      "at its line with // NOLINTNEXTLINE(<check>): <reason>):\n  ${findings}")
endif()
list(LENGTH SOURCES nsources)
message(STATUS "include/fusegrad/ is clean under .clang-tidy (${nsources} translation units)")
