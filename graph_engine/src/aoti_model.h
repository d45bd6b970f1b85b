#pragma once
// An AOTInductor package (model.pt2, made by torch._inductor.aoti_compile_and_package)
// as a Model. The package is loaded in single-threaded mode: it then runs on the caller's current
// CUDA stream without its own locks, events or syncs, so that the CUDA-graph executor can capture
// it like any other Forward. Its outputs come back flat, in the order of the package's output
// spec; a dict output is matched to the config's outputs by key, a tuple or list by position.
//
// At load time the config is checked against what the package says about itself: the device it
// was compiled for, and, when it carries graphserve's signature (deploy/models/aoti_export.py),
// its input names, dtypes and exported dimension ranges and its weights' dtype; a disagreement is
// INVALID_ARGUMENT naming both sides.
// Not thread-safe: one executor owns an instance.
#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "model.h"

namespace graphserve {

// NOT_FOUND when the file is missing; INVALID_ARGUMENT when the package cannot be loaded on
// `device` or disagrees with `spec`.
Status LoadAotInductorModel(const ModelSpec& spec, const std::string& path,
                            const c10::Device& device, std::unique_ptr<Model>* model);

}  // namespace graphserve
