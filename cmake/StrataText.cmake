# Libraries of the tokenizers (core/text):
#   sentencepiece (required): T5's spiece.model, Llama 2's tokenizer.model. Only the
#   module strata_sentencepiece links it; strata_text loads that module at run time
#   with RTLD_LOCAL | RTLD_DEEPBIND, because Debian's libsentencepiece exports its own
#   protobuf-lite, which crashes next to the libprotobuf LibTorch loads
#   (core/text/SentencePieceBackend.h).
# The regex patterns of tokenizer.json files (Split, ByteLevel's GPT-2 split, Replace
# with a regex) need no library: core/text/Regex is Strata's own engine. PCRE2, whose
# semantics it follows, is only a test dependency (tests/CMakeLists.txt).
# sentencepiece is looked up with pkg-config first, then as a plain library + header.
find_package(PkgConfig QUIET)

if(NOT TARGET strata::sentencepiece_lib)
  set(_strata_spm_found OFF)
  if(PkgConfig_FOUND)
    pkg_check_modules(STRATA_SPM QUIET IMPORTED_TARGET sentencepiece)
    if(STRATA_SPM_FOUND)
      add_library(strata_sentencepiece_lib INTERFACE)
      target_link_libraries(strata_sentencepiece_lib INTERFACE PkgConfig::STRATA_SPM)
      set(_strata_spm_found ON)
      message(STATUS "Strata: sentencepiece ${STRATA_SPM_VERSION} (pkg-config)")
    endif()
  endif()
  if(NOT _strata_spm_found)
    find_library(STRATA_SPM_LIBRARY NAMES sentencepiece)
    find_path(STRATA_SPM_INCLUDE_DIR NAMES sentencepiece_processor.h)
    if(STRATA_SPM_LIBRARY AND STRATA_SPM_INCLUDE_DIR)
      add_library(strata_sentencepiece_lib INTERFACE)
      target_link_libraries(strata_sentencepiece_lib INTERFACE ${STRATA_SPM_LIBRARY})
      target_include_directories(strata_sentencepiece_lib SYSTEM INTERFACE ${STRATA_SPM_INCLUDE_DIR})
      set(_strata_spm_found ON)
      message(STATUS "Strata: sentencepiece ${STRATA_SPM_LIBRARY}")
    endif()
  endif()
  if(NOT _strata_spm_found)
    message(FATAL_ERROR
      "Strata needs the sentencepiece C++ library for the T5 and Llama 2 tokenizers, and it was not found "
      "(neither sentencepiece.pc for pkg-config nor libsentencepiece + sentencepiece_processor.h). "
      "Debian/Ubuntu: apt-get install libsentencepiece-dev; elsewhere set CMAKE_PREFIX_PATH to its install prefix.")
  endif()
  add_library(strata::sentencepiece_lib ALIAS strata_sentencepiece_lib)
endif()

# The module (lib/libstrata_sentencepiece.so in the build tree).
add_library(strata_sentencepiece MODULE ${CMAKE_SOURCE_DIR}/core/text/spm/SentencePieceModule.cpp)
target_include_directories(strata_sentencepiece PRIVATE ${CMAKE_SOURCE_DIR}/core)
target_link_libraries(strata_sentencepiece PRIVATE strata::sentencepiece_lib)
target_compile_options(strata_sentencepiece PRIVATE -Wall -Wextra)
set_target_properties(strata_sentencepiece PROPERTIES
  POSITION_INDEPENDENT_CODE ON
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)

# Same libstdc++ rule as strata::torch (cmake/StrataTorch.cmake): one shared copy
# in the process, so strings and vectors cross the module boundary safely.
if(STRATA_LIBSTDCXX_FIRST)
  target_link_options(strata_sentencepiece PRIVATE "SHELL:-Wl,--push-state,--no-as-needed -l:libstdc++.so.6 -Wl,--pop-state")
endif()
