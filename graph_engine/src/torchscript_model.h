#pragma once
// A TorchScript module (<model_dir>/model.pt) as a Model. Its forward takes the padded inputs as
// positional arguments in ModelSpec order and may return one tensor (for a single output), a tuple
// or list of tensors (matched to the spec's outputs in order), or a dict (matched by output name).
// Not thread-safe: one executor owns an instance.
#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "model.h"

namespace graphserve {

// The file name a TorchScript model's folder must hold.
inline constexpr const char* kTorchScriptFileName = "model.pt";

// Loads <model_dir>/model.pt onto `device` in eval mode, casting its floating-point parameters and
// buffers to spec.precision when that is fp16/bf16 (floating-point inputs are then cast to match
// on every forward). NOT_FOUND when the file is missing; INVALID_ARGUMENT with the loader's message
// when it cannot be loaded.
Status LoadTorchScriptModel(const ModelSpec& spec, const std::string& model_dir,
                            const c10::Device& device, std::unique_ptr<Model>* model);

}  // namespace graphserve
