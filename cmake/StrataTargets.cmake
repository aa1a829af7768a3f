# strata_add_core_lib(NAME DIR <dir under core/> DEPS <targets>)
#   A static library of every .cpp in core/<dir> (CONFIGURE_DEPENDS: new files are
#   picked up on the next build). Shares the LibTorch precompiled header.
# strata_add_test(NAME SOURCES ... LIBS ... LABELS ...)
#   One GoogleTest executable; every test in it carries LABELS.

set(STRATA_PCH_HEADER ${CMAKE_SOURCE_DIR}/core/common/Pch.h)

# Each library exposes only its own folder: core/<dir> is reachable as "<dir>/..."
# through a link in the build tree (include/<name>/<dir> -> core/<dir>), and a
# library sees another's headers only by linking it. So a forbidden include
# (lora -> a model family, a model -> placement, core -> ui) fails to compile;
# tests/layers proves it.
function(strata_expose_headers name visibility src_dir rel_dir)
  set(_root ${CMAKE_BINARY_DIR}/include/${name})
  get_filename_component(_parent ${_root}/${rel_dir} DIRECTORY)
  file(MAKE_DIRECTORY ${_parent})
  if(NOT EXISTS ${_root}/${rel_dir})
    file(CREATE_LINK ${src_dir} ${_root}/${rel_dir} SYMBOLIC)
  endif()
  target_include_directories(${name} ${visibility} ${_root})
endfunction()

function(strata_add_core_lib name)
  cmake_parse_arguments(A "" "DIR" "DEPS" ${ARGN})
  file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/core/${A_DIR}/*.cpp)
  if(NOT _srcs)
    # Header-only (or not written yet): still a target, so dependants link.
    add_library(${name} INTERFACE)
    add_library(strata::${name} ALIAS ${name})
    strata_expose_headers(${name} INTERFACE ${CMAKE_SOURCE_DIR}/core/${A_DIR} ${A_DIR})
    target_link_libraries(${name} INTERFACE strata::torch ${A_DEPS})
    return()
  endif()
  add_library(${name} STATIC ${_srcs})
  add_library(strata::${name} ALIAS ${name})
  strata_expose_headers(${name} PUBLIC ${CMAKE_SOURCE_DIR}/core/${A_DIR} ${A_DIR})
  target_link_libraries(${name} PUBLIC strata::torch ${A_DEPS})
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(TARGET strata_pch)
    target_precompile_headers(${name} REUSE_FROM strata_pch)
  endif()
endfunction()

# strata_add_test(NAME SOURCES ... LIBS ... LABELS ... [TEST_PREFIX p] [PROPERTIES k v ...]):
# one GoogleTest executable, its tests discovered at test time; TEST_PREFIX goes in
# front of every test name, PROPERTIES are further ctest properties of each test.
function(strata_add_test name)
  cmake_parse_arguments(A "" "TEST_PREFIX" "SOURCES;LIBS;LABELS;PROPERTIES" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  # A test of the whole core starts like the programs do: families registered in main().
  if("strata_core" IN_LIST A_LIBS)
    set(_main strata_test_main_families)
  elseif("strata_family_descriptions" IN_LIST A_LIBS)
    # The families' descriptions without their runs (config's tests).
    set(_main strata_test_main_descriptions)
  else()
    set(_main GTest::gtest_main)
  endif()
  target_link_libraries(${name} PRIVATE ${A_LIBS} strata_test_support GTest::gtest ${_main})
  if(TARGET strata_pch)
    target_precompile_headers(${name} REUSE_FROM strata_pch)
  endif()
  set(_prefix)
  if(A_TEST_PREFIX)
    set(_prefix TEST_PREFIX ${A_TEST_PREFIX})
  endif()
  gtest_discover_tests(${name}
    ${_prefix}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${A_LABELS}"
               SKIP_REGULAR_EXPRESSION "  SKIPPED "
               # The content-hash memo (io/ContentHash) goes to the build folder, not ~/.cache.
               # One variable per property: gtest_discover_tests flattens a list value
               # (ENVIRONMENT "A;B" would set A and turn B into a property name).
               ENVIRONMENT "STRATA_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
               ENVIRONMENT_MODIFICATION "XDG_CACHE_HOME=set:${CMAKE_BINARY_DIR}/test-cache"
               ${A_PROPERTIES})
endfunction()

# strata_add_test_dir(AREA LIBS ... LABELS ...): one test executable
# strata_tests_<area> from every .cpp in tests/<area>/ (skipped while empty).
function(strata_add_test_dir area)
  cmake_parse_arguments(A "" "TEST_PREFIX" "LIBS;LABELS;PROPERTIES" ${ARGN})
  file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/${area}/*.cpp)
  if(_srcs)
    strata_add_test(strata_tests_${area} SOURCES ${_srcs} LIBS ${A_LIBS} LABELS ${A_LABELS}
                    TEST_PREFIX "${A_TEST_PREFIX}" PROPERTIES ${A_PROPERTIES})
  endif()
endfunction()
