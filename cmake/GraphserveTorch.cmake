# Finds the one libtorch graphserve builds against: the torch wheel installed for GRAPHSERVE_PYTHON,
# at the version pinned in deploy/toolchain.env. That interpreter also makes the tests' TorchScript
# models, so models and engine always come from the same PyTorch.
#
# Sets GRAPHSERVE_TORCH_VERSION and, when the CUDA-graph executor is built, GRAPHSERVE_CUDA (ON).
# Include after Protobuf and gRPC are found (docs/development/gpu-host.md, pitfall 1).

set(GRAPHSERVE_PYTHON "" CACHE FILEPATH
    "Python whose torch wheel provides libtorch (deploy/build.sh passes the project's venv)")
option(GRAPHSERVE_WITH_CUDA
       "Compile the CUDA-graph executor (needs the wheel's CUDA libtorch and a CUDA toolkit)" ON)
option(GRAPHSERVE_ALLOW_UNPINNED_TORCH
       "Build against a libtorch other than the pinned one (untested)" OFF)

file(STRINGS "${PROJECT_SOURCE_DIR}/deploy/toolchain.env" torch_pin REGEX "^GRAPHSERVE_TORCH_VERSION=")
string(REGEX REPLACE "^GRAPHSERVE_TORCH_VERSION=" "" GRAPHSERVE_TORCH_VERSION "${torch_pin}")

if(NOT GRAPHSERVE_PYTHON)
  message(FATAL_ERROR
    "graphserve: set -DGRAPHSERVE_PYTHON=<python with torch==${GRAPHSERVE_TORCH_VERSION}> "
    "(deploy/build.sh passes the one deploy/install-deps.sh made)")
endif()
execute_process(
  COMMAND "${GRAPHSERVE_PYTHON}" -c "import torch; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
  OUTPUT_VARIABLE torch_query ERROR_VARIABLE torch_error RESULT_VARIABLE torch_result
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT torch_result EQUAL 0)
  message(FATAL_ERROR "graphserve: '${GRAPHSERVE_PYTHON}' cannot import torch:\n${torch_error}")
endif()
string(REPLACE "\n" ";" torch_query "${torch_query}")
list(GET torch_query 0 torch_cmake_prefix)
list(GET torch_query 1 torch_python_version)
list(APPEND CMAKE_PREFIX_PATH "${torch_cmake_prefix}")

# No CUDA toolkit installed: the one install-deps.sh put beside the wheel, from PyPI.
if(GRAPHSERVE_WITH_CUDA AND NOT CUDA_TOOLKIT_ROOT_DIR)
  find_program(system_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(NOT system_nvcc)
    execute_process(
      COMMAND "${GRAPHSERVE_PYTHON}" -c
              "import glob, nvidia; print(sorted(p[:-len('/bin/nvcc')] for d in nvidia.__path__ for p in glob.glob(d + '/cu*/bin/nvcc'))[-1])"
      OUTPUT_VARIABLE pip_cuda_root RESULT_VARIABLE pip_cuda_result OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET)
    if(pip_cuda_result EQUAL 0)
      message(STATUS "graphserve: CUDA toolkit from PyPI at ${pip_cuda_root}")
      set(CUDA_TOOLKIT_ROOT_DIR "${pip_cuda_root}" CACHE PATH "CUDA toolkit" FORCE)
      set(CMAKE_CUDA_COMPILER "${pip_cuda_root}/bin/nvcc" CACHE FILEPATH "nvcc" FORCE)
    endif()
  endif()
endif()

find_package(Torch REQUIRED)

string(REGEX REPLACE "\\+.*" "" torch_release "${torch_python_version}")
if(NOT torch_release VERSION_EQUAL GRAPHSERVE_TORCH_VERSION)
  if(GRAPHSERVE_ALLOW_UNPINNED_TORCH)
    message(WARNING "graphserve: libtorch ${torch_python_version} is not the pinned "
                    "${GRAPHSERVE_TORCH_VERSION}; building anyway (untested)")
  else()
    message(FATAL_ERROR
      "graphserve: ${GRAPHSERVE_PYTHON} has torch ${torch_python_version}, but every build uses the "
      "pinned ${GRAPHSERVE_TORCH_VERSION} (deploy/toolchain.env; deploy/install-deps.sh installs it). "
      "-DGRAPHSERVE_ALLOW_UNPINNED_TORCH=ON builds anyway.")
  endif()
endif()

set(GRAPHSERVE_CUDA OFF)
if(GRAPHSERVE_WITH_CUDA)
  if(NOT TORCH_CUDA_LIBRARIES)
    message(FATAL_ERROR
      "graphserve: libtorch ${torch_python_version} has no CUDA, or no CUDA toolkit was found; the "
      "CUDA-graph executor cannot be compiled. -DGRAPHSERVE_WITH_CUDA=OFF builds the CPU path alone.")
  endif()
  set(GRAPHSERVE_CUDA ON)
  message(STATUS "graphserve: libtorch ${torch_python_version} with CUDA ${CUDA_VERSION}; "
                 "building the CUDA-graph executor")
else()
  message(STATUS "graphserve: libtorch ${torch_python_version}; CPU execution only "
                 "(GRAPHSERVE_WITH_CUDA=OFF)")
endif()
