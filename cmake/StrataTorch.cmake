# Finds LibTorch in this order: CMAKE_PREFIX_PATH / Torch_DIR, the system
# (Debian's libtorch-dev), then the cmake prefix of a Python torch (GPU machine).
# Wraps it in one imported target, strata::torch.
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  find_package(Python3 QUIET COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _strata_py_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET RESULT_VARIABLE _strata_py_rc)
    if(_strata_py_rc EQUAL 0 AND _strata_py_torch_prefix)
      list(APPEND CMAKE_PREFIX_PATH ${_strata_py_torch_prefix})
    endif()
  endif()
  find_package(Torch REQUIRED)
endif()
message(STATUS "Strata: LibTorch ${Torch_VERSION} from ${Torch_DIR}")

add_library(strata_torch INTERFACE)
add_library(strata::torch ALIAS strata_torch)
# With the PyTorch wheel's LibTorch, binaries crashed in std::filesystem code
# (seen with LD_DEBUG on the GPU machine): its toolchain linked libstdc++
# statically into them, so two copies met in one process (ours and the shared
# one LibTorch loads). Linking the shared libstdc++.so.6 first, in the link
# options (which precede the objects) and with --no-as-needed, leaves one copy.
set(_strata_wheel_torch OFF)
if(TORCH_INSTALL_PREFIX MATCHES "site-packages" OR Torch_DIR MATCHES "site-packages")
  set(_strata_wheel_torch ON)
endif()
option(STRATA_LIBSTDCXX_FIRST "Link the shared libstdc++ first (needed with the PyTorch wheel's LibTorch)"
       ${_strata_wheel_torch})
if(STRATA_LIBSTDCXX_FIRST)
  target_link_options(strata_torch INTERFACE "SHELL:-Wl,--push-state,--no-as-needed -l:libstdc++.so.6 -Wl,--pop-state")
endif()
target_link_libraries(strata_torch INTERFACE ${TORCH_LIBRARIES})
# TorchConfig puts its flags in TORCH_CXX_FLAGS (the ABI flag among them).
separate_arguments(_strata_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(strata_torch INTERFACE ${_strata_torch_flags})
target_include_directories(strata_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})

set(STRATA_HAS_CUDA OFF)
if(TARGET torch_cuda OR TARGET c10_cuda)
  set(STRATA_HAS_CUDA ON)
  target_compile_definitions(strata_torch INTERFACE STRATA_HAS_CUDA=1)
endif()
add_feature_info(CUDA STRATA_HAS_CUDA "LibTorch built with CUDA")
