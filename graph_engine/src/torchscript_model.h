#pragma once
// A TorchScript module (model.pt) as a Model. Its forward takes the padded inputs as
// positional arguments in ModelSpec order and may return one tensor (for a single output), a tuple
// or list of tensors (matched to the spec's outputs in order), or a dict (matched by output name).
// As in Triton's PyTorch backend, tensors named <name>__<N> (INPUT__0, OUTPUT__1) bind by N
// instead, when every input (or every output) is named so: input N is forward's argument N, output
// N the result's element N.
// Not thread-safe: one executor owns an instance.
#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "model.h"

namespace graphserve {

// Loads the module at `path` onto `device` in eval mode, casting its floating-point parameters and
// buffers to spec.precision when that is fp16/bf16 (floating-point inputs are then cast to match
// on every forward). NOT_FOUND when the file is missing; INVALID_ARGUMENT with the loader's message
// when it cannot be loaded, or naming the tensor when __N indices repeat or leave an argument out.
Status LoadTorchScriptModel(const ModelSpec& spec, const std::string& path,
                            const c10::Device& device, std::unique_ptr<Model>* model);

}  // namespace graphserve
