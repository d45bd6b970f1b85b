#pragma once
// Small CUDA helpers shared by the CUDA-graph executor's capture (cuda_graph_capture.cpp) and launch
// (cuda_graph_executor.cpp) halves.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define GRAPHSERVE_HAVE_NVTX 1
#endif

namespace graphserve {

// An Nsight Systems range ("replay 8x128") around one stage of the CUDA path.
class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name) {
#ifdef GRAPHSERVE_HAVE_NVTX
    nvtxRangePushA(name.c_str());
#else
    (void)name;
#endif
  }
  ~NvtxRange() {
#ifdef GRAPHSERVE_HAVE_NVTX
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

inline void CheckCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
  }
}

}  // namespace graphserve
