# Builds and runs tests/consumer against fusegrad, as a user would (CTest: consumer_*).
#   cmake -DMODE=<default|header_only|pch|build_tree|avx512_tu> -DPREFIX=<install prefix>
#         -DBUILD_TREE=<fusegrad build dir> -DWORK=<scratch dir> -DCXX=<compiler>
#         -DEXPECT_PARALLEL=<ON|OFF> -P run.cmake
# default, header_only, pch: find_package from the install in PREFIX; build_tree: from the
# build tree (fusegrad_DIR); avx512_tu: the link of a TU compiled for AVX-512 against an AVX2
# runtime must fail, naming the instruction-set mismatch.
cmake_minimum_required(VERSION 3.25)
set(src ${CMAKE_CURRENT_LIST_DIR})
set(bin ${WORK}/${MODE})
file(REMOVE_RECURSE ${bin})
set(link ${MODE})
set(where -DCMAKE_PREFIX_PATH=${PREFIX})
if(MODE STREQUAL "build_tree")
  set(link default)
  set(where -Dfusegrad_DIR=${BUILD_TREE})
elseif(MODE STREQUAL "avx512_tu")
  set(link default)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${src} -B ${bin} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX}
                        ${where} -DCONSUMER_LINK=${link} -DCONSUMER_EXPECT_PARALLEL=${EXPECT_PARALLEL}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer (${MODE}): configure failed")
endif()
if(MODE STREQUAL "avx512_tu")
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${bin} --target app_avx512
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0)
    message(FATAL_ERROR "consumer (${MODE}): a TU compiled for AVX-512 linked against the AVX2 runtime")
  endif()
  if(NOT out MATCHES "fusegrad_runtime_was_built_for_another_instruction_set__compile_this_file_with_the_flags_of_target_fusegrad_fusegrad")
    message(FATAL_ERROR "consumer (${MODE}): the link failed without naming the instruction-set mismatch:\n${out}")
  endif()
  message(STATUS "consumer (${MODE}): the link failed, naming the mismatch, as it should")
  return()
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${bin} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer (${MODE}): build failed")
endif()
execute_process(COMMAND ${bin}/app RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer (${MODE}): the program failed")
endif()
