# Libraries of the tokenizers (core/text):
#   sentencepiece (required): T5's spiece.model, Llama 2's tokenizer.model. Only the
#   module strata_sentencepiece links it; strata_text loads that module at run time
#   with RTLD_LOCAL | RTLD_DEEPBIND, because Debian's libsentencepiece exports its own
#   protobuf-lite, which crashes next to the libprotobuf LibTorch loads
#   (core/text/SentencePieceBackend.h).
#   PCRE2 (optional): the regex patterns of tokenizer.json files (Split, ByteLevel's
#   GPT-2 split, Replace with a regex). Without it strata_text still builds and
#   refuses such files at run time, saying Strata was built without PCRE2.
# Both are looked up with pkg-config first, then as a plain library + header.
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

option(STRATA_USE_PCRE2 "Use PCRE2 for tokenizer.json regex patterns when it is found" ON)
set(STRATA_HAS_PCRE2 OFF)
if(STRATA_USE_PCRE2 AND NOT TARGET strata::pcre2)
  if(PkgConfig_FOUND)
    pkg_check_modules(STRATA_PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
    if(STRATA_PCRE2_FOUND)
      add_library(strata_pcre2 INTERFACE)
      target_link_libraries(strata_pcre2 INTERFACE PkgConfig::STRATA_PCRE2)
      set(STRATA_HAS_PCRE2 ON)
    endif()
  endif()
  if(NOT STRATA_HAS_PCRE2)
    find_library(STRATA_PCRE2_LIBRARY NAMES pcre2-8)
    find_path(STRATA_PCRE2_INCLUDE_DIR NAMES pcre2.h)
    if(STRATA_PCRE2_LIBRARY AND STRATA_PCRE2_INCLUDE_DIR)
      add_library(strata_pcre2 INTERFACE)
      target_link_libraries(strata_pcre2 INTERFACE ${STRATA_PCRE2_LIBRARY})
      target_include_directories(strata_pcre2 SYSTEM INTERFACE ${STRATA_PCRE2_INCLUDE_DIR})
      set(STRATA_HAS_PCRE2 ON)
    endif()
  endif()
  if(STRATA_HAS_PCRE2)
    add_library(strata::pcre2 ALIAS strata_pcre2)
  else()
    message(STATUS "Strata: PCRE2 (libpcre2-dev) not found or STRATA_USE_PCRE2=OFF: tokenizer.json files with regex "
                   "patterns (Llama 3, Qwen2, GPT-2 style) will be refused at run time")
  endif()
endif()
add_feature_info(PCRE2 STRATA_HAS_PCRE2 "regex pre-tokenizers of tokenizer.json files (libpcre2-dev)")

# Same libstdc++ rule as strata::torch (cmake/StrataTorch.cmake): one shared copy
# in the process, so strings and vectors cross the module boundary safely.
if(STRATA_LIBSTDCXX_FIRST)
  target_link_options(strata_sentencepiece PRIVATE "SHELL:-Wl,--push-state,--no-as-needed -l:libstdc++.so.6 -Wl,--pop-state")
endif()
