# Where loom's libtorch comes from (README "Install"; docs/design.md "libtorch"). LOOM_TORCH (the
# environment variable, or -DLOOM_TORCH=) names either a python3 whose torch is PyTorch 2, or an
# unpacked LibTorch folder; unset, it is the project's .venv/bin/python3, where
# scripts/install-deps.sh installs the release pinned in scripts/torch-requirements.txt. CMake finds
# Torch through that interpreter's torch.utils.cmake_prefix_path. LOOM_TORCH_PYTHON is the
# interpreter (empty for a LibTorch folder): the tests that read loom's output back with PyTorch and
# the benchmarks' PyTorch peer run in it, so loom and its peer share one libtorch.
set(LOOM_TORCH "$ENV{LOOM_TORCH}" CACHE STRING "A python3 with PyTorch 2, or a LibTorch folder (default: .venv/bin/python3)")
set(loom_torch "${LOOM_TORCH}")
if(loom_torch STREQUAL "")
  set(loom_torch ${PROJECT_SOURCE_DIR}/.venv/bin/python3)
endif()
set(LOOM_TORCH_PYTHON "" CACHE INTERNAL "The python3 of LOOM_TORCH, empty for a LibTorch folder")
if(IS_DIRECTORY "${loom_torch}")
  list(PREPEND CMAKE_PREFIX_PATH "${loom_torch}")
elseif(EXISTS "${loom_torch}")
  execute_process(COMMAND "${loom_torch}" -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE loom_torch_prefix ERROR_VARIABLE loom_torch_error RESULT_VARIABLE loom_torch_rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT loom_torch_rc EQUAL 0)
    string(REGEX REPLACE "\n.*" "" loom_torch_error "${loom_torch_error}")
    message(FATAL_ERROR "loom: error: ${loom_torch} cannot import torch (${loom_torch_error}); hint: run scripts/install-deps.sh, or set LOOM_TORCH to a python3 with PyTorch 2 or a LibTorch folder")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${loom_torch_prefix}")
  set(LOOM_TORCH_PYTHON "${loom_torch}" CACHE INTERNAL "The python3 of LOOM_TORCH, empty for a LibTorch folder")
else()
  message(FATAL_ERROR "loom: error: LOOM_TORCH = '${loom_torch}' does not exist; hint: run scripts/install-deps.sh (it makes .venv/), or set LOOM_TORCH to a python3 with PyTorch 2 or a LibTorch folder")
endif()
# A CUDA build of libtorch finds the CUDA toolkit when it is found itself, and would compile and run
# a probe for the GPUs of this machine unless told which architectures to build for: the
# architectures of the GPUs loom is checked on (sm_90: H100, H200), unless the user says otherwise.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND "$ENV{TORCH_CUDA_ARCH_LIST}" STREQUAL "")
  set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA architectures for libtorch's CUDA flags (and loom's CUDA sources)")
endif()
# It also enables CUDA as a language, at loom's C++ standard unless one is set: CMake 3.25 has no
# flag for CUDA C++20 with extensions, so loom's CUDA is C++17 without them.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_EXTENSIONS OFF)
find_package(Torch REQUIRED)
if(Torch_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "loom: error: ${loom_torch} has libtorch ${Torch_VERSION}; loom needs PyTorch 2; hint: run scripts/install-deps.sh")
endif()
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR "loom: error: the libtorch of ${Torch_DIR} is built with the old C++ string ABI (_GLIBCXX_USE_CXX11_ABI=0), and the Debian libraries loom links use the C++11 one; hint: use a PyTorch wheel or a LibTorch built with the C++11 ABI")
endif()
# loom links libtorch's CPU library alone (torch_cpu and c10), not TORCH_LIBRARIES: in a CUDA build
# that is libtorch.so, which loads libtorch_cuda with cuBLAS, cuDNN and NCCL at every start, some
# 0.4 s and 370 MB of resident memory per process that no CPU rank uses (docs/design.md, "libtorch").
# A rank that trains on a GPU loads libtorch_cuda when it needs it (cuda::load_torch_cuda: measured
# here 110 ms and 367 MB of resident memory), which registers libtorch's CUDA kernels.
set(LOOM_TORCH_LIBRARIES torch_cpu_library)
# Installed programs and libloom.so find that libtorch where it was linked (a .venv/ or a LibTorch
# folder is no system library directory): its folder is in their RPATH.
set(LOOM_TORCH_LIBRARY_DIR "${TORCH_INSTALL_PREFIX}/lib")
list(APPEND CMAKE_INSTALL_RPATH "${LOOM_TORCH_LIBRARY_DIR}")
message(STATUS "loom: libtorch ${Torch_VERSION} from ${Torch_DIR}")
