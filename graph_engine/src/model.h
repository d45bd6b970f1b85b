#pragma once
// The seam between an executor and the network it runs: the built-in encoder and a TorchScript
// module both sit behind it, so that the eager executor (and, later, the CUDA-graph executor that
// captures Forward) do not care which one they drive.
// Not thread-safe: one executor owns a Model and calls it from one thread at a time.
#include <ATen/ATen.h>

#include <vector>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"

namespace graphserve {

// The dtype a model's floating-point weights are cast to.
inline at::ScalarType PrecisionScalarType(Precision precision) {
  switch (precision) {
    case Precision::kFp16: return at::kHalf;
    case Precision::kBf16: return at::kBFloat16;
    case Precision::kFp32: break;
  }
  return at::kFloat;
}

class Model {
 public:
  virtual ~Model() = default;

  // Runs one forward pass. `inputs` are the padded inputs in ModelSpec order, already on the
  // model's device; `outputs` receives one tensor per ModelSpec output, in spec order, in whatever
  // dtype the network computes in. Call under c10::InferenceMode. Throws c10::Error when libtorch
  // fails; returns INVALID_ARGUMENT when the network's result cannot be mapped onto the spec's
  // outputs. Implementations should only launch device work (no host syncs, no .item()), so that
  // a CUDA-graph executor can capture Forward.
  virtual Status Forward(const std::vector<at::Tensor>& inputs,
                         std::vector<at::Tensor>* outputs) = 0;
};

}  // namespace graphserve
