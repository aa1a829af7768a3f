# ccache with settings that keep precompiled headers cacheable and let build
# folders at the same depth (build, build-gpu, ...) share hits.
if(STRATA_USE_CCACHE)
  find_program(CCACHE_PROGRAM ccache)
  if(CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER
        ${CMAKE_COMMAND} -E env
        CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        CCACHE_COMPRESS=1
        ${CCACHE_PROGRAM})
    message(STATUS "Strata: compiling through ${CCACHE_PROGRAM}")
  endif()
endif()
