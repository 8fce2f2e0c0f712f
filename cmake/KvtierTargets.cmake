# The one declarative helper for kvtier targets.
#
#   kvtier_library(NAME foo
#     SOURCES a.cc b.cc            # C++ sources
#     CUDA_SOURCES k.cu            # compiled only when KVTIER_WITH_CUDA
#     CPU_SOURCES k_cpu.cc         # compiled only when NOT KVTIER_WITH_CUDA
#     DEPS kvtier::common ...      # public link dependencies
#     PRIVATE_DEPS ...             # private link dependencies
#     TESTS foo_test.cc ...        # one GoogleTest binary per file
#     TEST_DEPS ...                # extra dependencies of the tests
#     FUZZ foo_fuzz.cc ...         # fuzz targets over the library (kvtier_fuzz)
#     FUZZ_DEPS ...)               # extra dependencies of the fuzz targets
#
# declares the static library kvtier_foo with the alias kvtier::foo, and its tests.
# Include paths are rooted at the repository ("common/status.h") and at the generated
# directory (Cap'n Proto headers).

add_library(kvtier_build_flags INTERFACE)
target_compile_features(kvtier_build_flags INTERFACE cxx_std_20)
# CMake 3.25 predates nvcc 13 and cannot map cuda_std_20 to a flag for it; pass it directly.
target_compile_options(kvtier_build_flags INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
target_compile_options(kvtier_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
# GCC 12 at -O3 (Release) reports -Wrestrict on plain `"literal" + std::string` chains
# inside libstdc++ (GCC bug 105651, fixed in 13); the warning is wrong, so it is off there.
target_compile_options(kvtier_build_flags INTERFACE
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>)
# Clang proves the locking annotations (common/thread_annotations.h) at every compile; the
# ASan tree is built with clang for that (Makefile). GCC has no such analysis. The beta
# group adds the check of a class's declared lock order (KVTIER_ACQUIRED_AFTER).
target_compile_options(kvtier_build_flags INTERFACE
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>>:-Wthread-safety -Wthread-safety-beta>)
if(KVTIER_SANITIZE)
  target_compile_options(kvtier_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(kvtier_build_flags INTERFACE -fsanitize=address,undefined)
endif()
# Coverage for libFuzzer in every kvtier object, so that it steers by the code under test;
# the fuzz targets link its runtime (kvtier_fuzz). Only those targets build in such a tree.
if(KVTIER_FUZZ)
  target_compile_options(kvtier_build_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()
if(KVTIER_TSAN)
  # GCC 12 warns (-Wtsan) at each std::atomic_thread_fence, which ThreadSanitizer does
  # not model; library headers use them, and -Werror would fail the build on that.
  target_compile_options(kvtier_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread -fno-omit-frame-pointer -Wno-tsan>)
  target_link_options(kvtier_build_flags INTERFACE -fsanitize=thread)
endif()
add_library(kvtier::build_flags ALIAS kvtier_build_flags)

set(KVTIER_GENERATED_DIR "${PROJECT_BINARY_DIR}/generated")
set(KVTIER_BIN_DIR "${PROJECT_BINARY_DIR}/bin")

# Every test source reuses one precompiled <gtest/gtest.h>: parsing it took about 2 s of
# each test's compile, and CI compiles some 85 tests twice (the plain and the ASan tree).
# Only GoogleTest is precompiled, so a test still has to include what else it uses. GCC
# takes the header from the PCH only when the flags match, which they do: every test and
# this target take theirs from kvtier_build_flags and GTest (CMake adds -Winvalid-pch,
# which -Werror turns into a build error should they ever differ).
add_library(kvtier_test_pch OBJECT "${CMAKE_CURRENT_LIST_DIR}/test_pch.cc")
target_link_libraries(kvtier_test_pch PRIVATE kvtier_build_flags GTest::gtest GTest::gmock)
target_precompile_headers(kvtier_test_pch PRIVATE <gtest/gtest.h>)

function(kvtier_test)
  cmake_parse_arguments(ARG "" "SOURCE" "DEPS" ${ARGN})
  get_filename_component(name "${ARG_SOURCE}" NAME_WE)
  add_executable(${name} "${ARG_SOURCE}")
  target_link_libraries(${name} PRIVATE kvtier_build_flags ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_precompile_headers(${name} REUSE_FROM kvtier_test_pch)
  target_compile_definitions(${name} PRIVATE
    KVTIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}" KVTIER_BIN_DIR="${KVTIER_BIN_DIR}")
  # PRE_TEST: tests are listed when ctest runs, so building never executes test binaries.
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 30
    PROPERTIES TIMEOUT 120)
endfunction()

# kvtier_fuzz(SOURCE foo_fuzz.cc DEPS ...): a fuzz target, a libFuzzer entry point
# (LLVMFuzzerTestOneInput) over input kvtier takes from outside, which aborts when a property
# of the answer fails (tests/testing/fuzz_check.h). Every tree builds it with a driver that
# replays its seeds, tests/fuzz/<name>/, as the test <name>.Seeds; with KVTIER_FUZZ (clang)
# it is a libFuzzer program in <build>/fuzz instead, which `make fuzz` runs from those seeds.
function(kvtier_fuzz)
  cmake_parse_arguments(ARG "" "SOURCE" "DEPS" ${ARGN})
  get_filename_component(name "${ARG_SOURCE}" NAME_WE)
  add_executable(${name} "${ARG_SOURCE}")
  target_link_libraries(${name} PRIVATE kvtier_build_flags ${ARG_DEPS})
  if(KVTIER_FUZZ)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/fuzz")
    set_property(GLOBAL APPEND PROPERTY KVTIER_FUZZ_TARGETS ${name})
  else()
    target_link_libraries(${name} PRIVATE kvtier_fuzz_replay)
    add_test(NAME ${name}.Seeds COMMAND ${name} "${PROJECT_SOURCE_DIR}/tests/fuzz/${name}")
    set_tests_properties(${name}.Seeds PROPERTIES TIMEOUT 120)
  endif()
endfunction()

function(kvtier_library)
  cmake_parse_arguments(ARG "" "NAME"
    "SOURCES;CUDA_SOURCES;CPU_SOURCES;DEPS;PRIVATE_DEPS;TESTS;TEST_DEPS;FUZZ;FUZZ_DEPS" ${ARGN})
  set(target kvtier_${ARG_NAME})
  set(sources ${ARG_SOURCES})
  if(KVTIER_WITH_CUDA)
    list(APPEND sources ${ARG_CUDA_SOURCES})
  else()
    list(APPEND sources ${ARG_CPU_SOURCES})
  endif()
  add_library(${target} STATIC ${sources})
  add_library(kvtier::${ARG_NAME} ALIAS ${target})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                             $<BUILD_INTERFACE:${KVTIER_GENERATED_DIR}> $<INSTALL_INTERFACE:include>
                             $<INSTALL_INTERFACE:include/kvtier>)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${ARG_NAME})
  target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE kvtier_build_flags ${ARG_PRIVATE_DEPS})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # The library's kvtier dependencies, for tests/deps (the direction of the layers).
  set(kvtier_deps "")
  foreach(dep IN LISTS ARG_DEPS ARG_PRIVATE_DEPS)
    if(dep MATCHES "^kvtier::(.+)$")
      list(APPEND kvtier_deps "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  list(JOIN kvtier_deps " " kvtier_deps)
  set_property(GLOBAL APPEND PROPERTY KVTIER_LIBRARY_GRAPH "${ARG_NAME}: ${kvtier_deps}")
  foreach(test_source IN LISTS ARG_TESTS)
    kvtier_test(SOURCE "${test_source}" DEPS ${target} ${ARG_TEST_DEPS})
  endforeach()
  foreach(fuzz_source IN LISTS ARG_FUZZ)
    kvtier_fuzz(SOURCE "${fuzz_source}" DEPS ${target} ${ARG_FUZZ_DEPS})
  endforeach()
endfunction()

# kvtier_executable(NAME kvtier SOURCES ... DEPS ...): a binary placed in build/bin.
function(kvtier_executable)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE kvtier_build_flags ${ARG_DEPS})
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${KVTIER_BIN_DIR}")
endfunction()

# kvtier_benchmark(SOURCE foo_bench.cc DEPS ...): a Google Benchmark program in build/bin.
# Benchmarks are built with the tree (so they keep compiling) but never run by ctest.
# Sanitizer builds leave them out: the plain build compiles them, and an instrumented
# figure means nothing.
function(kvtier_benchmark)
  if(KVTIER_INSTRUMENTED)
    return()
  endif()
  cmake_parse_arguments(ARG "" "SOURCE" "DEPS" ${ARGN})
  get_filename_component(name "${ARG_SOURCE}" NAME_WE)
  kvtier_executable(NAME ${name} SOURCES "${ARG_SOURCE}" DEPS ${ARG_DEPS} benchmark::benchmark benchmark::benchmark_main)
endfunction()
